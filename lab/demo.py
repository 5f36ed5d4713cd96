"""What an operator wants to see of the lab cluster, and a "just rebooted" cluster to see.

    python -m lab.demo seed-rebooted   # fill the lab DB as if this host just rebooted
    python -m lab.demo show            # jobs by state, running jobs, Slurm queue, tokens

The database comes from libpq's PG* variables (``eval "$(lab/labctl.py env)"``)
or ``--dsn``; Slurm's clients find the lab through ``SLURM_CONF``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from lab import datagen  # noqa: E402
from plugins.module_utils import uuids  # noqa: E402

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

RUNNING_COUNTS_SQL = """
SELECT count(*) FILTER (WHERE started_at < %(boot)s),
       count(*) FILTER (WHERE started_at >= %(boot)s),
       count(*) FILTER (WHERE started_at IS NULL)
  FROM jobs WHERE state = 'Running'
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
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row]
                                           for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _when(moment: Optional[datetime]) -> str:
    return "" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def boot_side(started_at: Optional[datetime], boot: datetime) -> str:
    if started_at is None:
        return "no started_at"
    return "before boot" if started_at < boot else "after boot"


# ---------------------------------------------------------------------------
# Slurm
# ---------------------------------------------------------------------------

SQUEUE_FORMAT = "%i|%j|%T|%M|%u"


def squeue_command(squeue: str = "squeue") -> List[str]:
    return [squeue, "--all", "--noheader", "--format=" + SQUEUE_FORMAT]


def parse_squeue(output: str) -> List[Tuple[str, str, str, str, str]]:
    """Queue lines whose job name is an Arvados UUID (the lab's jobs)."""
    jobs = []
    for line in output.splitlines():
        fields = line.split("|")
        if len(fields) == 5 and uuids.ANY_UUID_RE.match(fields[1]):
            jobs.append(tuple(fields))
    return jobs


def slurm_queue(squeue: str = "squeue", timeout: float = 20.0) -> Tuple[Optional[list], str]:
    """(lab jobs, "") or (None, why the queue could not be read)."""
    if shutil.which(squeue) is None:
        return None, "squeue not found"
    env = dict(os.environ, LC_ALL="C")
    try:
        result = subprocess.run(squeue_command(squeue), env=env, capture_output=True, text=True,
                                timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, "squeue timed out after %.0f s" % timeout
    if result.returncode != 0:
        return None, "squeue exited %d: %s" % (result.returncode, result.stderr.strip())
    return parse_squeue(result.stdout), ""


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------

def show(conninfo: str, boot: datetime, max_running: int, out=sys.stdout) -> None:
    import psycopg

    with psycopg.connect(conninfo) as conn:
        state_rows = conn.execute(JOBS_BY_STATE_SQL).fetchall()
        before, after, unstarted = conn.execute(RUNNING_COUNTS_SQL, {"boot": boot}).fetchone()
        running = conn.execute(RUNNING_JOBS_SQL, {"limit": max_running}).fetchall()
        job_tokens, job_tokens_before_boot = conn.execute(VALID_JOB_TOKENS_SQL,
                                                          {"boot": boot}).fetchone()
        valid_tokens = conn.execute(VALID_TOKENS_SQL).fetchone()[0]
    print("Host boot time (btime): %s UTC" % _when(boot), file=out)
    print("\nJobs by state", file=out)
    print(format_table(("state", "jobs", "first started", "last started"),
                       [(s, n, _when(a), _when(b)) for s, n, a, b in state_rows]), file=out)
    total_running = before + after + unstarted
    print("\nRunning jobs: %d (%d started before boot, %d after, %d without started_at)"
          % (total_running, before, after, unstarted), file=out)
    if running:
        print(format_table(("uuid", "started_at", "vs boot", "locked by"),
                           [(u, _when(s), boot_side(s, boot), who) for u, s, who in running]),
              file=out)
        if total_running > len(running):
            print("... and %d more" % (total_running - len(running)), file=out)
    print("\nSlurm queue (jobs named after Arvados UUIDs)", file=out)
    queue, problem = slurm_queue()
    if queue is None:
        print("unavailable: %s" % problem, file=out)
    elif not queue:
        print("empty", file=out)
    else:
        print(format_table(("job id", "name", "state", "time", "user"), queue[:max_running]),
              file=out)
        if len(queue) > max_running:
            print("... and %d more" % (len(queue) - max_running), file=out)
    print("\nValid API tokens: %d; the running jobs' dispatcher tokens: %d, "
          "of jobs started before boot: %d" % (valid_tokens, job_tokens, job_tokens_before_boot),
          file=out)


# ---------------------------------------------------------------------------
# seed-rebooted
# ---------------------------------------------------------------------------

def rebooted_spec(boot: datetime, now: datetime, seed: int, running: int,
                  prefix: str) -> datagen.ClusterSpec:
    """Running jobs started before ``boot`` and one after it (if time allows)."""
    after_boot = 1 if now - boot >= timedelta(seconds=2) else 0
    return datagen.ClusterSpec(
        boot_time=boot, now=now, prefix=prefix, jobs=200, running=running, queued=5,
        running_after_boot=after_boot, tasks_per_job=2, users=8, idle_users=2, seed=seed,
        running_span=timedelta(hours=12),
    )


def seed_rebooted(conninfo: str, boot: datetime, seed: int, running: int, slurm_jobs: int,
                  prefix: str, out=sys.stdout) -> datagen.Summary:
    spec = rebooted_spec(boot, datagen.utc_now(), seed, running, prefix)
    summary, timings = datagen.load_cluster(conninfo, spec, defer_indexes=False, replace=True)
    if slurm_jobs:
        # Lingering Slurm jobs for the jobs the reboot interrupted (and a live
        # one for the job started since, which a recovery must leave alone).
        summary.slurm_jobs = datagen.submit_slurm_jobs(
            summary.running_after_boot + summary.running_before_boot, slurm_jobs)
    print(datagen.format_report(summary, timings, max_listed=5), file=out)
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default="", help="libpq connection string (default: PG* env)")
    parser.add_argument("--boot-time", default="btime",
                        help="'btime' (this host's, default), '@EPOCH' or ISO 8601 UTC")
    parser.add_argument("--max-running", type=int, default=10,
                        help="list at most this many running jobs and Slurm jobs (default 10)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("show", help="print the lab cluster's state")
    seed = commands.add_parser("seed-rebooted",
                               help="replace the lab data with a cluster that just rebooted")
    seed.add_argument("--seed", type=int, default=2015, help="random seed (default 2015)")
    seed.add_argument("--running", type=int, default=12, help="Running jobs (default 12)")
    seed.add_argument("--slurm-jobs", type=int, default=20,
                      help="Slurm jobs named after running jobs, at most (default 20; "
                           "0: none)")
    seed.add_argument("--prefix", default="zzzzz", help="cluster prefix (default zzzzz)")
    seed.add_argument("--no-show", action="store_true", help="do not print the state after")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    import psycopg

    try:
        boot = datagen.parse_time(args.boot_time)
        if args.command == "seed-rebooted":
            seed_rebooted(args.dsn, boot, args.seed, args.running, args.slurm_jobs, args.prefix)
            if args.no_show:
                return 0
            print()
        show(args.dsn, boot, args.max_running)
    except (ValueError, RuntimeError, OSError, psycopg.Error) as error:
        print("demo: %s" % error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
