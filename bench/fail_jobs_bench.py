"""Benchmark of the arvados_fail_jobs cleanup on a large lab database (issue 4).

Side by side, in one run, each on its own copy of the same generated cluster:

(a) this collection's cleanup, through the `arvados-fail-jobs` command (a child process, so
    its peak RSS is its own), on every Running job started before the boot time;
(b) a per-row baseline doing what Arvados' Rails script did: select the jobs, then per job
    its own transaction (update the job, insert its log row, delete its tasks, expire its
    token), on a sample of the jobs, scaled;
(c) the floor: a bare `UPDATE jobs SET state = 'Failed'` of the same jobs, which is what
    PostgreSQL's upkeep of the jobs table and its indexes alone costs;
(d) the same floor with the session settings (a) raises for its GIN index merges, and the
    merge it leaves pending done and timed: how much of (a)'s lead over (c) is those settings;
(e) the same writes as (a) done as plain set-based SQL (bench/plain_sql_cleanup.py): the
    floor of what (a) writes, which issue 40 holds (a) to (at most 1.2 times it); (a), (p)
    and (e) must leave the same rows, and the report says whether they did;
and then the command again on (a)'s database: the no-op rerun.

`--contenders` picks some of them, or adds (r): the command with `--retry` (the jobs
requeued, their tasks deleted). Each contender runs on a fresh copy of the template, after
a CHECKPOINT, `--rounds` times (default 3) in a rotating order; the report gives the
median, the spread, the WAL each wrote and the checkpoints that fell inside it, because
single runs of the same code differ by 10%.

Run against the lab (`make lab-start`):

    .venv/bin/python -m bench.fail_jobs_bench --jobs 1000000 --running 100000

The generated cluster is kept as database `bench_fail_jobs_template` and reused by later
runs with the same sizes (`--rebuild` makes it anew).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql

from bench import plain_sql_cleanup
from bench.results import ratio_summary, write_json
from lab import datagen, labctl

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = "bench_fail_jobs_template"
MESSAGE = "benchmark: interrupted by a server reboot"


def superuser(lab):
    conn = psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True)
    return conn


def database_comment(lab, name):
    with superuser(lab) as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", (name,)
        ).fetchone()
    return row[0] if row else None


def clone(lab, name, template):
    drop(lab, name)
    with superuser(lab) as conn:
        # FILE_COPY: the default WAL_LOG strategy would write gigabytes of WAL for the copy.
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER arvados STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )


def drop(lab, name):
    with superuser(lab) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


def build_template(lab, args, boot_time, now):
    wanted = "jobs=%d running=%d tasks=%d seed=%d" % (args.jobs, args.running, args.tasks, args.seed)
    if not args.rebuild and database_comment(lab, TEMPLATE) == wanted:
        print("reusing %s (%s)" % (TEMPLATE, wanted), flush=True)
        return None
    print("generating %s: %s" % (TEMPLATE, wanted), flush=True)
    clone(lab, TEMPLATE, labctl.TEMPLATE_DATABASE)
    spec = datagen.ClusterSpec(
        boot_time=boot_time,
        now=now,
        jobs=args.jobs,
        running=args.running,
        queued=1000,
        running_after_boot=10,
        tasks_per_job=args.tasks,
        users=200,
        idle_users=20,
        seed=args.seed,
        finished_job_tokens=False,
    )
    conninfo = psycopg.conninfo.make_conninfo(**lab.connection(TEMPLATE))
    _summary, timings = datagen.load_cluster(conninfo, spec, defer_indexes=True)
    with superuser(lab) as conn:
        conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(TEMPLATE), sql.Literal(wanted)))
    return timings


def warm(lab, name):
    """Read the tables once, so every contender starts from the same (cached) state."""
    with psycopg.connect(**lab.connection(name)) as conn:
        for table in ("jobs", "job_tasks", "api_client_authorizations", "users", "logs"):
            conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))


def analyze_cleaned_copy(lab, name):
    """Before a no-op run on a cleaned copy: the copy's statistics are the template's, where
    a tenth of the jobs lack finished_at, and autovacuum would not analyze it (99,990 rows
    changed, its threshold 10% + 50 of 1,000,000), so the planner would read the whole table
    for the index's query too. On a cluster the no-op rerun (the next boot) finds a table
    analyzed since, with its few unfinished jobs; so does this one."""
    with psycopg.connect(**lab.connection(name), autocommit=True) as conn:
        conn.execute("ANALYZE jobs")


def running_count(lab, name, threshold):
    with psycopg.connect(**lab.connection(name)) as conn:
        return conn.execute(
            "SELECT count(*) FROM jobs WHERE state = 'Running' AND started_at < %s", (threshold,)
        ).fetchone()[0]


def command_line(lab, name, before, batch_size=None, code_dir=REPO, extra=()):
    """(argv, env, options file) of `arvados-fail-jobs` run from `code_dir`'s tree on database
    `name`, without Slurm; the caller removes the options file. `batch_size` None leaves the
    command its own default (which depends on `live`)."""
    options = {
        "config_file": str(lab.config_yml),
        "db_name": name,
        "cancel_slurm_jobs": False,
        "log_message": MESSAGE,
    }
    if batch_size is not None:
        options["batch_size"] = batch_size
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(options, handle)
    argv = [
        sys.executable,
        "-m",
        "plugins.module_utils._cleanup.cli",
        "--options-file",
        handle.name,
        "--before",
        before,
        "--quiet",
    ] + list(extra)
    return argv, dict(os.environ, PYTHONPATH=str(code_dir)), handle.name


def run_command(lab, name, before, batch_size, extra=(), driver="psycopg"):
    """(wall seconds, its summary lines, its peak RSS in MiB).

    The RSS comes from GNU time, a small parent: Linux starts a child's ru_maxrss from its
    parent's peak across fork and exec, so read here it would be this benchmark's own."""
    argv, env, options_file = command_line(lab, name, before, batch_size, extra=extra)
    env["ARVADOS_RECOVERY_PG_DRIVER"] = driver
    with tempfile.NamedTemporaryFile(suffix=".time") as usage:
        began = time.monotonic()
        child = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", usage.name] + argv,
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.monotonic() - began
        rss_mib = int(Path(usage.name).read_text().split()[-1]) / 1024.0
    os.unlink(options_file)
    if child.returncode != 0:
        raise SystemExit("arvados-fail-jobs failed: %s" % child.stderr.strip())
    return wall, child.stdout, rss_mib


def engine_only_noop(lab, name, before):
    """The no-op rerun's time without the interpreter's start-up."""
    sys.path.insert(0, str(REPO))
    from plugins.module_utils._cleanup.run import run_fail_jobs  # pylint: disable=import-outside-toplevel

    params = {"config_file": str(lab.config_yml), "db_name": name, "cancel_slurm_jobs": False, "before": before}
    began = time.monotonic()
    result = run_fail_jobs(params, keep_uuids=False)
    return time.monotonic() - began, result["changed"]


SQL_PER_ROW = (
    """UPDATE jobs SET state = 'Failed', running = false, success = false,
           finished_at = COALESCE(finished_at, now() AT TIME ZONE 'UTC'),
           modified_at = now() AT TIME ZONE 'UTC', updated_at = now() AT TIME ZONE 'UTC'
       WHERE uuid = %(uuid)s AND state = 'Running'""",
    """INSERT INTO logs (uuid, owner_uuid, object_uuid, object_owner_uuid, event_at, event_type,
                         summary, properties, created_at, updated_at, modified_at)
       VALUES (%(log_uuid)s, %(owner)s, %(uuid)s, %(owner)s, now() AT TIME ZONE 'UTC', 'dispatch',
               %(message)s, %(properties)s, now() AT TIME ZONE 'UTC', now() AT TIME ZONE 'UTC',
               now() AT TIME ZONE 'UTC')""",
    "DELETE FROM job_tasks WHERE job_uuid = %(uuid)s",
    """UPDATE api_client_authorizations a SET expires_at = now() AT TIME ZONE 'UTC'
       FROM users u
       WHERE u.uuid = %(locked_by)s AND a.user_id = u.id AND a.api_client_id = 0
         AND a.expires_at IS NULL AND a.created_at BETWEEN %(created)s AND %(started)s""",
)


def per_row_baseline(lab, name, threshold, sample):
    """Seconds for `sample` jobs the way the Rails script went: a transaction per job."""
    from plugins.module_utils._common.uuids import LOG_INFIX, new_uuid  # pylint: disable=import-outside-toplevel

    with psycopg.connect(**lab.connection(name)) as conn:
        began = time.monotonic()
        jobs = conn.execute(
            "SELECT uuid, owner_uuid, is_locked_by_uuid, created_at, started_at FROM jobs "
            "WHERE state = 'Running' AND started_at < %s ORDER BY uuid LIMIT %s",
            (threshold, sample),
        ).fetchall()
        conn.commit()
        for uuid, owner, locked_by, created, started in jobs:
            params = {
                "uuid": uuid,
                "owner": owner,
                "locked_by": locked_by,
                "created": created,
                "started": started,
                "log_uuid": new_uuid(uuid[:5], LOG_INFIX),
                "message": MESSAGE,
                "properties": json.dumps({"text": MESSAGE}),
            }
            with conn.transaction():
                for statement in SQL_PER_ROW:
                    conn.execute(statement, params)
        return time.monotonic() - began, len(jobs)


def floor(lab, name, threshold, tuned=False):
    """(seconds, jobs) of the bare update; `tuned`: with the settings the command raises for
    its GIN index merges, and the merge that leaves pending timed too."""
    from plugins.module_utils._cleanup.batch import BULK_SETTINGS_KB  # pylint: disable=import-outside-toplevel

    with psycopg.connect(**lab.connection(name)) as conn:
        began = time.monotonic()
        for setting, kilobytes in BULK_SETTINGS_KB if tuned else ():
            conn.execute("SELECT set_config(%s, %s, true)", (setting, "%dkB" % kilobytes))
        count = conn.execute(
            "UPDATE jobs SET state = 'Failed' WHERE state = 'Running' AND started_at < %s", (threshold,)
        ).rowcount
        if tuned:
            conn.execute("SELECT gin_clean_pending_list('jobs_trgm_text_search_idx'::regclass)")
        conn.commit()
        return time.monotonic() - began, count


CONTENDERS = {
    "a": "arvados-fail-jobs (set-based, batches of {batch_size})",
    "b": "per-row transactions, {sample} jobs",
    "c": "floor: bare UPDATE jobs SET state",
    "d": "floor with the command's GIN and work_mem settings, its merge timed",
    "r": "arvados-fail-jobs --retry (requeued, tasks deleted, batches of {batch_size})",
    "p": "arvados-fail-jobs through psycopg2 (set-based, batches of {batch_size})",
    "e": "the same writes as plain SQL, one transaction",
}
# The contenders that write the same rows (plain_sql_cleanup.rows_left).
SAME_ROWS = "ape"
# The driver each command contender runs under (_database/driver.py: psycopg 3 wherever it is
# installed, unless told otherwise).
COMMAND_DRIVERS = {"a": "psycopg", "r": "psycopg", "p": "psycopg2"}
DEFAULT_CONTENDERS = "abcde"


def checkpoint(lab):
    """Start each contender with no dirty pages left by the previous one's writes."""
    with superuser(lab) as conn:
        conn.execute("CHECKPOINT")


def server_counters(lab):
    """(WAL position, full-page images, checkpoints so far): what a contender made PostgreSQL write."""
    with superuser(lab) as conn:
        return conn.execute(
            "SELECT pg_current_wal_lsn(), (SELECT wal_fpi FROM pg_stat_wal),"
            " checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
        ).fetchone()


def wal_bytes(lab, start, end):
    with superuser(lab) as conn:
        return float(conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (end, start)).fetchone()[0])


class Measurement:
    """One contender's run on a fresh copy of the template."""

    def __init__(self, contender, round_no, seconds, jobs, wal, fpi, checkpoints):
        self.contender = contender
        self.round_no = round_no
        self.seconds = seconds
        self.jobs = jobs
        self.wal = wal
        self.fpi = fpi
        self.checkpoints = checkpoints

    @property
    def ms_per_job(self):
        return 1000.0 * self.seconds / max(self.jobs, 1)


class Shared:
    """What every contender of a run reads: the command's token set for (e), the first new
    log id, and the digests of the rows each contender left."""

    def __init__(self, lab, args, before):
        self.tokens = []
        if "e" in args.contenders:
            self.tokens = plain_sql_cleanup.tokens_the_command_expires(lab, TEMPLATE, before, MESSAGE)
        self.first_new_log = plain_sql_cleanup.first_new_log(lab, TEMPLATE)
        self.rows_left = {}
        # The peak RSS of each command run (the cleanups and the no-op reruns), in MiB.
        self.command_rss_mib = []


def run_contender(lab, contender, round_no, args, before, threshold, noops, shared):
    name = "bench_fj_%s" % contender
    clone(lab, name, TEMPLATE)
    warm(lab, name)
    qualifying = running_count(lab, name, threshold)
    checkpoint(lab)
    wal_start, fpi_start, checkpoints_start = server_counters(lab)
    if contender in COMMAND_DRIVERS:
        seconds, _out, rss_mib = run_command(
            lab, name, before, args.batch_size, ["--retry"] if contender == "r" else [], COMMAND_DRIVERS[contender]
        )
        shared.command_rss_mib.append(rss_mib)
        jobs = qualifying
    elif contender == "b":
        seconds, jobs = per_row_baseline(lab, name, threshold, args.sample)
    elif contender == "e":
        seconds, jobs = plain_sql_cleanup.plain_sql_cleanup(lab, name, threshold, shared.tokens, MESSAGE)
    elif contender == "c":
        seconds, jobs = floor(lab, name, threshold)
    else:
        seconds, jobs = floor(lab, name, threshold, tuned=True)
    wal_end, fpi_end, checkpoints_end = server_counters(lab)
    if contender in SAME_ROWS:
        shared.rows_left.setdefault(contender, set()).add(plain_sql_cleanup.rows_left(lab, name, shared.first_new_log))
    if contender == "a":
        analyze_cleaned_copy(lab, name)
        noop_wall, noop_out, rss_mib = run_command(lab, name, before, args.batch_size)
        shared.command_rss_mib.append(rss_mib)
        noop_engine, noop_changed = engine_only_noop(lab, name, before)
        # The default reads the whole table (full_scan); issue 40's P3 set its targets on the
        # read by index, which --no-full-scan keeps.
        index_wall, _out, _rss = run_command(lab, name, before, args.batch_size, extra=["--no-full-scan"])
        noops.append((noop_wall, noop_engine, noop_changed, noop_out.strip().replace("\n", "; "), index_wall))
    if not args.keep:
        drop(lab, name)
    measurement = Measurement(
        contender,
        round_no,
        seconds,
        jobs,
        wal_bytes(lab, wal_start, wal_end),
        fpi_end - fpi_start,
        checkpoints_end - checkpoints_start,
    )
    print(
        "round %d (%s): %d jobs in %.2f s, %.3f ms per job, WAL %.0f MiB (%d full pages), "
        "%d checkpoint(s)"
        % (
            round_no,
            contender,
            jobs,
            seconds,
            measurement.ms_per_job,
            measurement.wal / 2**20,
            measurement.fpi,
            measurement.checkpoints,
        ),
        flush=True,
    )
    return measurement


def round_orders(rounds, contenders=DEFAULT_CONTENDERS):
    """Each round starts with the next contender, so none is always first or last."""
    order = list(contenders)
    return [order[i % len(order) :] + order[: i % len(order)] for i in range(rounds)]


def same_rows(shared):
    digests = set().union(*shared.rows_left.values()) if shared.rows_left else set()
    return len(digests) <= 1


def report_same_rows(shared):
    if len(shared.rows_left) > 1 or any(len(d) > 1 for d in shared.rows_left.values()):
        print(
            "same rows left by %s: %s"
            % (", ".join("(%s)" % c for c in sorted(shared.rows_left)), "yes" if same_rows(shared) else "NO")
        )
    return same_rows(shared)


def report(measurements, noops, args, qualifying, load, shared):
    by_contender = {c: [m for m in measurements if m.contender == c] for c in args.contenders}
    medians = {c: statistics.median(m.ms_per_job for m in ms) for c, ms in by_contender.items()}
    labels = {c: label.format(batch_size=args.batch_size, sample=args.sample) for c, label in CONTENDERS.items()}
    print()
    if load is not None:
        print("load: %.1f s (COPY %.1f s, indexes %.1f s)" % (load.total, load.copy, load.index))
    print(
        "cluster: %d jobs, %d Running before the threshold, %d tasks per job; %d round(s)"
        % (args.jobs, qualifying, args.tasks, args.rounds)
    )
    print()
    print("| contender | jobs | ms per job, median | min - max | WAL per job | full pages per job | checkpoints |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for contender, runs in by_contender.items():
        per_job = [m.ms_per_job for m in runs]
        print(
            "| (%s) %s | %d | %.3f | %.3f - %.3f | %.1f KiB | %.2f | %s |"
            % (
                contender,
                labels[contender],
                runs[0].jobs,
                medians[contender],
                min(per_job),
                max(per_job),
                statistics.median(m.wal / m.jobs for m in runs) / 1024.0,
                statistics.median(m.fpi / m.jobs for m in runs),
                ", ".join(str(m.checkpoints) for m in runs),
            )
        )
    print()
    if set("abcd") <= set(args.contenders):
        print(
            "medians: (a) is %.1f times faster per job than (b), %.2f times the floor (c) and "
            "%.2f times the tuned floor (d)"
            % (medians["b"] / medians["a"], medians["a"] / medians["c"], medians["a"] / medians["d"])
        )
    for label, summary in computed_ratios(measurements, args.contenders).items():
        print(
            "(%s) / (%s): median of the rounds %.2f (ratio of the medians %.2f); within each round: %s"
            % (
                label[0],
                label[2],
                summary["median"],
                summary["of_medians"],
                ", ".join("%.2f" % r for r in summary["rounds"]),
            )
        )
    print("peak RSS of the commands: %.0f MiB" % max(shared.command_rss_mib, default=0.0))
    if noops:
        print(
            "no-op rerun: command %s s (process start included), engine %s s; changed=%s;"
            " command with --no-full-scan %s s"
            % (
                ", ".join("%.3f" % n[0] for n in noops),
                ", ".join("%.3f" % n[1] for n in noops),
                ", ".join(str(n[2]) for n in noops),
                ", ".join("%.3f" % n[4] for n in noops),
            )
        )
        print(noops[-1][3])


# The comparisons, (top)/(bottom), each computed when both contenders ran.
RATIOS = ("a/e", "p/e", "b/a", "a/c", "a/d")


def per_round(measurements, contender):
    """`contender`'s ms per job, in round order."""
    return [m.ms_per_job for m in sorted(measurements, key=lambda m: m.round_no) if m.contender == contender]


def computed_ratios(measurements, contenders):
    return {
        label: ratio_summary(per_round(measurements, label[0]), per_round(measurements, label[2]))
        for label in RATIOS
        if label[0] in contenders and label[2] in contenders
    }


def json_payload(measurements, noops, args, qualifying, shared):
    """Everything bench.summary reads: the raw numbers and the ratios printed."""
    return {
        "benchmark": "fail_jobs_bench",
        "sizes": {
            "jobs": args.jobs,
            "running": args.running,
            "qualifying": qualifying,
            "tasks": args.tasks,
            "sample": args.sample,
            "batch_size": args.batch_size,
            "rounds": args.rounds,
        },
        "ms_per_job": {c: per_round(measurements, c) for c in args.contenders},
        "ratios": computed_ratios(measurements, args.contenders),
        "same_rows": {"compared": sorted(shared.rows_left), "same": same_rows(shared)},
        "peak_rss_mib": max(shared.command_rss_mib, default=None),
        "noop": {
            "command_s": [n[0] for n in noops],
            "engine_s": [n[1] for n in noops],
            "changed": [n[2] for n in noops],
            "command_index_s": [n[4] for n in noops],
        },
    }


def template_threshold(lab):
    """(`before` for the command, the same instant): the 10 latest-started Running jobs of
    the template are exempt, the others qualify."""
    with psycopg.connect(**lab.connection(TEMPLATE)) as conn:
        threshold = conn.execute(
            "SELECT min(started_at) FROM (SELECT started_at FROM jobs WHERE state = 'Running' "
            "ORDER BY started_at DESC LIMIT 10) s"
        ).fetchone()[0]
    before = "@%d" % int((threshold - datetime(1970, 1, 1)).total_seconds())
    return before, datetime(1970, 1, 1) + timedelta(seconds=int(before[1:]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000000)
    parser.add_argument("--running", type=int, default=100000)
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--sample", type=int, default=10000, help="jobs the per-row baseline does")
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1000, help="the command's batch_size")
    parser.add_argument(
        "--rounds", type=int, default=3, help="times each contender runs, interleaved (the report gives medians)"
    )
    parser.add_argument(
        "--contenders",
        default=DEFAULT_CONTENDERS,
        help="which to run, of %s (r: the command with --retry; p: the command through psycopg2); default %s"
        % ("".join(CONTENDERS), DEFAULT_CONTENDERS),
    )
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the per-contender databases")
    parser.add_argument(
        "--json-out", metavar="FILE", help="write the raw numbers and the ratios to FILE (bench.summary)"
    )
    parser.add_argument(
        "--prepare-only", action="store_true", help="only generate the template database (slow: minutes for 1M jobs)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1, not %d" % args.rounds)
    unknown = sorted(set(args.contenders) - set(CONTENDERS))
    if unknown or not args.contenders:
        parser.error("--contenders takes letters of %s, not %r" % ("".join(CONTENDERS), args.contenders))

    lab = labctl.lab_settings()
    now = datetime.utcnow().replace(microsecond=0)
    boot_time = now - timedelta(hours=1)
    load = build_template(lab, args, boot_time, now)
    if args.prepare_only:
        if load is not None:
            print("load: %.1f s (COPY %.1f s, indexes %.1f s)" % (load.total, load.copy, load.index))
        return 0
    before, threshold = template_threshold(lab)
    qualifying = running_count(lab, TEMPLATE, threshold)

    measurements, noops = [], []
    shared = Shared(lab, args, before)
    for round_no, order in enumerate(round_orders(args.rounds, args.contenders), start=1):
        for contender in order:
            measurements.append(run_contender(lab, contender, round_no, args, before, threshold, noops, shared))
    report(measurements, noops, args, qualifying, load, shared)
    write_json(args.json_out, json_payload(measurements, noops, args, qualifying, shared))
    return 0 if report_same_rows(shared) else 1


if __name__ == "__main__":
    sys.exit(main())
