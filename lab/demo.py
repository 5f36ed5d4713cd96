"""What an operator wants to see of the lab cluster, and a "just rebooted" cluster to see.

    python -m lab.demo seed-rebooted   # replace the lab data: this host "just rebooted"
    python -m lab.demo show            # jobs by state, running jobs, Slurm queue, tokens
    python -m lab.demo counts --save F # the numbers a recovery changes; --before F: side by side

The database: ``--dsn``, else libpq's PG* variables when PGHOST is set, else
the local lab (lab/labctl.py). Slurm: ``SLURM_CONF``, else the lab's slurm.conf.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import uuids  # noqa: E402
from lab import datagen  # noqa: E402

JOBS_BY_STATE_SQL = """
SELECT state, count(*), min(started_at), max(started_at)
  FROM jobs GROUP BY state ORDER BY state
"""

RUNNING_JOBS_SQL = """
SELECT uuid, started_at, is_locked_by_uuid
  FROM jobs WHERE state = 'Running'
 ORDER BY started_at NULLS FIRST, uuid
 LIMIT %(limit)s
"""

# Running jobs by their start against the boot, then the states a recovery leaves them in.
COUNTS_SQL = """
SELECT count(*) FILTER (WHERE state = 'Running' AND started_at < %(boot)s),
       count(*) FILTER (WHERE state = 'Running' AND started_at >= %(boot)s),
       count(*) FILTER (WHERE state = 'Running' AND started_at IS NULL),
       count(*) FILTER (WHERE state = 'Failed'),
       count(*) FILTER (WHERE state = 'Queued')
  FROM jobs
"""

# The dispatcher's per-job tokens as ARVADOS.md describes them, still valid.
VALID_JOB_TOKENS_SQL = """
SELECT count(DISTINCT t.id),
       count(DISTINCT t.id) FILTER (WHERE j.started_at < %(boot)s)
  FROM jobs j
  JOIN users u ON u.uuid = j.is_locked_by_uuid
  JOIN api_client_authorizations t ON t.user_id = u.id
 WHERE j.state = 'Running'
   AND t.api_client_id = 0
   AND (t.expires_at IS NULL OR t.expires_at > (now() AT TIME ZONE 'UTC'))
   AND t.created_at BETWEEN j.created_at AND j.started_at
   AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.auth_uuid = t.uuid)
"""

VALID_TOKENS_SQL = """
SELECT count(*) FROM api_client_authorizations
 WHERE expires_at IS NULL OR expires_at > (now() AT TIME ZONE 'UTC')
"""


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _when(moment: datetime | None) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def boot_side(started_at: datetime | None, boot: datetime) -> str:
    if started_at is None:
        return "no started_at"
    return "before boot" if started_at < boot else "after boot"


# ---------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------

SQUEUE_FORMAT = "%i|%j|%T|%M|%u"


def squeue_command(squeue: str = "squeue") -> list[str]:
    return [squeue, "--all", "--noheader", "--format=" + SQUEUE_FORMAT]


def parse_squeue(output: str) -> list[tuple[str, str, str, str, str]]:
    """Queue lines whose job name is an Arvados UUID (the lab's jobs)."""
    jobs = []
    for line in output.splitlines():
        fields = line.split("|")
        if len(fields) == 5 and uuids.ANY_UUID_RE.match(fields[1]):
            jobs.append(tuple(fields))
    return jobs


def slurm_queue(squeue: str = "squeue", timeout: float = 20.0) -> tuple[list | None, str]:
    """(lab jobs, "") or (None, why the queue could not be read)."""
    if shutil.which(squeue) is None:
        return None, "squeue not found"
    try:
        result = subprocess.run(
            squeue_command(squeue),
            env=datagen.slurm_environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, "squeue timed out after %.0f s" % timeout
    if result.returncode != 0:
        return None, "squeue exited %d: %s" % (result.returncode, result.stderr.strip())
    return parse_squeue(result.stdout), ""


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------


def show(conninfo: str, boot: datetime, max_running: int, out=None) -> None:
    import psycopg

    out = out or sys.stdout

    with psycopg.connect(conninfo) as conn:
        state_rows = conn.execute(JOBS_BY_STATE_SQL).fetchall()
        before, after, unstarted, _failed, _queued = conn.execute(COUNTS_SQL, {"boot": boot}).fetchone()
        running = conn.execute(RUNNING_JOBS_SQL, {"limit": max_running}).fetchall()
        job_tokens, job_tokens_before_boot = conn.execute(VALID_JOB_TOKENS_SQL, {"boot": boot}).fetchone()
        valid_tokens = conn.execute(VALID_TOKENS_SQL).fetchone()[0]
    print("Host boot time (btime): %s UTC" % _when(boot), file=out)
    print("\nJobs by state", file=out)
    print(
        format_table(
            ("state", "jobs", "first started", "last started"),
            [(s, n, _when(a), _when(b)) for s, n, a, b in state_rows],
        ),
        file=out,
    )
    total_running = before + after + unstarted
    print(
        "\nRunning jobs: %d (%d started before boot, %d after, %d without started_at)"
        % (total_running, before, after, unstarted),
        file=out,
    )
    if running:
        print(
            format_table(
                ("uuid", "started_at", "vs boot", "locked by"),
                [(u, _when(s), boot_side(s, boot), who) for u, s, who in running],
            ),
            file=out,
        )
        if total_running > len(running):
            print("... and %d more" % (total_running - len(running)), file=out)
    print("\nSlurm queue (jobs named after Arvados UUIDs)", file=out)
    queue, problem = slurm_queue()
    if queue is None:
        print("unavailable: %s" % problem, file=out)
    elif not queue:
        print("empty", file=out)
    else:
        print(format_table(("job id", "name", "state", "time", "user"), queue[:max_running]), file=out)
        if len(queue) > max_running:
            print("... and %d more" % (len(queue) - max_running), file=out)
    print(
        "\nValid API tokens: %d; the running jobs' dispatcher tokens: %d, "
        "of jobs started before boot: %d" % (valid_tokens, job_tokens, job_tokens_before_boot),
        file=out,
    )


# ---------------------------------------------------------------------------
# counts: the few numbers a recovery changes, to compare before and after
# ---------------------------------------------------------------------------

DISPATCH_LOGS_SQL = "SELECT count(*) FROM logs WHERE event_type = 'dispatch'"

STARTED_AT_SQL = "SELECT uuid, started_at FROM jobs WHERE uuid = ANY(%(uuids)s)"

COUNT_LABELS = (
    ("running_before_boot", "Running jobs started before boot"),
    ("running_after_boot", "Running jobs started after boot"),
    ("running_unstarted", "Running jobs without started_at"),
    ("failed", "Failed jobs"),
    ("queued", "Queued jobs"),
    ("dispatch_logs", "log rows of type dispatch"),
    ("valid_job_tokens", "valid tokens of running jobs"),
    ("valid_tokens", "valid API tokens, all"),
    ("slurm_before_boot", "Slurm jobs of jobs started before boot"),
    ("slurm_after_boot", "Slurm jobs of jobs started after boot"),
)


def counts(conninfo: str, boot: datetime) -> dict:
    """The numbers of COUNT_LABELS; the Slurm ones are None when the queue is unreadable."""
    import psycopg

    queue, _ = slurm_queue()
    with psycopg.connect(conninfo) as conn:
        before, after, unstarted, failed, queued = conn.execute(COUNTS_SQL, {"boot": boot}).fetchone()
        job_tokens, _ = conn.execute(VALID_JOB_TOKENS_SQL, {"boot": boot}).fetchone()
        started = dict(conn.execute(STARTED_AT_SQL, {"uuids": [name for _, name, _, _, _ in queue or ()]}).fetchall())
        found = {
            "running_before_boot": before,
            "running_after_boot": after,
            "running_unstarted": unstarted,
            "failed": failed,
            "queued": queued,
            "dispatch_logs": conn.execute(DISPATCH_LOGS_SQL).fetchone()[0],
            "valid_job_tokens": job_tokens,
            "valid_tokens": conn.execute(VALID_TOKENS_SQL).fetchone()[0],
        }
    sides = [boot_side(started[name], boot) for _, name, _, _, _ in queue or () if name in started]
    found["slurm_before_boot"] = None if queue is None else sides.count("before boot")
    found["slurm_after_boot"] = None if queue is None else sides.count("after boot")
    return found


def format_counts(now: dict, before: dict | None = None) -> str:
    """One column of numbers, or before and after side by side."""
    if before is None:
        return format_table(("", "now"), [(label, now.get(key)) for key, label in COUNT_LABELS])
    return format_table(
        ("", "before", "after"), [(label, before.get(key), now.get(key)) for key, label in COUNT_LABELS]
    )


# ---------------------------------------------------------------------------
# seed-rebooted
# ---------------------------------------------------------------------------


def rebooted_spec(boot: datetime, now: datetime, seed: int, running: int, prefix: str) -> datagen.ClusterSpec:
    """Running jobs started before ``boot`` and one after it (if time allows)."""
    after_boot = 1 if now - boot >= timedelta(seconds=2) else 0
    return datagen.ClusterSpec(
        boot_time=boot,
        now=now,
        prefix=prefix,
        jobs=200,
        running=running,
        queued=5,
        running_after_boot=after_boot,
        tasks_per_job=2,
        users=8,
        idle_users=2,
        seed=seed,
        running_span=timedelta(hours=12),
    )


def running_job_uuids(conninfo: str) -> list[str]:
    import psycopg

    with psycopg.connect(conninfo) as conn:
        return [uuid for (uuid,) in conn.execute("SELECT uuid FROM jobs WHERE state = 'Running'")]


def cancel_slurm_jobs_named(names: Sequence[str], scancel: str = "scancel") -> list[str]:
    """Cancel (one scancel, by job id) the queued Slurm jobs bearing these names."""
    queue, _ = slurm_queue()
    if queue is None:
        return []
    wanted = set(names)
    job_ids = [job_id for job_id, name, _, _, _ in queue if name in wanted]
    if job_ids:
        subprocess.run(
            [scancel, *job_ids],
            env=datagen.slurm_environment(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    return job_ids


def seed_rebooted(
    conninfo: str, boot: datetime, seed: int, running: int, slurm_jobs: int, prefix: str, out=None
) -> datagen.Summary:
    spec = rebooted_spec(boot, datagen.utc_now(), seed, running, prefix)
    if slurm_jobs:
        # The previous demo's Slurm jobs would otherwise outlive its data.
        cancel_slurm_jobs_named(running_job_uuids(conninfo))
    summary, timings = datagen.load_cluster(conninfo, spec, defer_indexes=False, replace=True)
    if slurm_jobs:
        # Lingering Slurm jobs for the jobs the reboot interrupted (and a live
        # one for the job started since, which a recovery must leave alone).
        summary.slurm_jobs = datagen.submit_slurm_jobs(
            summary.running_after_boot + summary.running_before_boot, slurm_jobs
        )
    print(datagen.format_report(summary, timings, max_listed=5), file=out or sys.stdout)
    return summary


def lab_cluster_id() -> str:
    from lab import labctl

    return labctl.lab_settings().cluster_id


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dsn",
        default=None,
        help="libpq connection string (default: the PG* environment if PGHOST is set, else the local lab's database)",
    )
    common.add_argument("--boot-time", default="btime", help="'btime' (this host's, default), '@EPOCH' or ISO 8601 UTC")
    parser = argparse.ArgumentParser(prog="python -m lab.demo", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show_parser = commands.add_parser("show", parents=[common], help="print the lab cluster's state")
    show_parser.add_argument(
        "--max-running", type=int, default=10, help="list at most this many running jobs and Slurm jobs (default 10)"
    )
    seed = commands.add_parser(
        "seed-rebooted", parents=[common], help="replace the lab data with a cluster that just rebooted"
    )
    seed.add_argument("--seed", type=int, default=2015, help="random seed (default 2015)")
    seed.add_argument("--running", type=int, default=12, help="Running jobs (default 12)")
    seed.add_argument(
        "--slurm-jobs", type=int, default=20, help="Slurm jobs named after running jobs, at most (default 20; 0: none)"
    )
    seed.add_argument("--prefix", default=None, help="cluster prefix (default: the lab's cluster id, zzzzz)")
    counts_parser = commands.add_parser(
        "counts", parents=[common], help="the numbers a recovery changes (jobs, tokens, Slurm jobs), compact"
    )
    counts_parser.add_argument("--save", metavar="FILE", help="also write them to FILE (JSON), for --before later")
    counts_parser.add_argument("--before", metavar="FILE", help="print them beside those saved in FILE")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    import psycopg

    try:
        boot = datagen.parse_time(args.boot_time)
        conninfo = datagen.lab_conninfo() if args.dsn is None else args.dsn
        if args.command == "seed-rebooted":
            seed_rebooted(conninfo, boot, args.seed, args.running, args.slurm_jobs, args.prefix or lab_cluster_id())
        elif args.command == "counts":
            now = counts(conninfo, boot)
            if args.save:
                Path(args.save).write_text(json.dumps(now))
            before = json.loads(Path(args.before).read_text()) if args.before else None
            print(format_counts(now, before))
        else:
            show(conninfo, boot, args.max_running)
    except (ValueError, RuntimeError, OSError, psycopg.Error) as error:
        print("demo: %s" % error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
