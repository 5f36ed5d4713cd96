"""Fill an Arvados-shaped database with a realistic cluster.

Row generation (``ClusterGenerator``) is pure and streaming: it yields one
``Row`` at a time and keeps only per-running-job facts, so unit tests check
rows without a database and 1,000,000 jobs load in constant memory.
``load_cluster`` streams those rows into PostgreSQL with COPY (one
connection per table, all fed from the single pass) and, for large loads,
drops the indexes of ``schema/indexes.sql`` first and rebuilds them after.

The cluster:
- users: the system user ``<prefix>-tpzed-000000000000000``, users who run
  jobs and idle users who never do;
- finished jobs (Complete/Failed/Cancelled) with real portable data hashes,
  each with the dispatcher's token, expired when the job finished;
- Running jobs, most started before ``boot_time`` and some after it, each with
  the token the dispatcher made: ``api_client_id = 0``, no expiry, owned by the
  ``is_locked_by_uuid`` user, created between the job's ``created_at`` and
  ``started_at``.  Running jobs' windows never overlap, so every token belongs
  to at most one job;
- around each running job, tokens that a cleanup must never touch, each
  differing from the job's token in one respect (see ``DECOY_KINDS``);
- Queued jobs, and job tasks for every job that started.

Command line: ``python -m lab.datagen --help`` (connection from libpq's PG*
variables, e.g. after ``eval "$(lab/labctl.py env)"``, or ``--dsn``).

This file is the command line and the generator's Python interface (``__all__``). The
parts: ``cluster_rows.py`` (ClusterSpec, ClusterGenerator, the rows, containers in bulk,
boot time), ``loader.py`` (COPY, the indexes, load_cluster, load_containers) and
``cluster_jobs.py`` (Slurm jobs named after the Running jobs).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    # "python -m lab.datagen" from another directory still finds the shared code.
    sys.path.insert(0, str(REPO_ROOT))

from lab.cluster_jobs import (  # noqa: E402
    lab_conninfo,
    sbatch_command,
    slurm_environment,
    submit_slurm_jobs,
)
from lab.cluster_rows import (  # noqa: E402
    API_CLIENT_TOKEN,
    CLUSTER_TABLES,
    CONTAINER_TOKEN,
    DECOY_KINDS,
    DEFER_INDEXES_FROM_JOBS,
    EPOCH,
    EXPIRED_TOKEN,
    FINISHED_JOB_TOKEN,
    FINISHED_STATES,
    INDEXES_2017_SQL,
    JOB_TOKEN,
    OTHER_USER_TOKEN,
    OUTSIDE_WINDOW_TOKEN,
    SCHEMA_INDEXES,
    UNSTARTED_JOB_TOKEN,
    ClusterGenerator,
    ClusterSpec,
    Summary,
    container_rows,
    host_boot_time,
    parse_time,
    portable_data_hash,
    utc_now,
)
from lab.loader import (  # noqa: E402
    LoadTimings,
    _rebuild_order,
    index_definitions,
    load_cluster,
    load_containers,
)

# What tests, benchmarks, the demo and Molecule use, wherever it lives.
__all__ = [
    "API_CLIENT_TOKEN",
    "CLUSTER_TABLES",
    "CONTAINER_TOKEN",
    "ClusterGenerator",
    "ClusterSpec",
    "DECOY_KINDS",
    "EPOCH",
    "EXPIRED_TOKEN",
    "FINISHED_JOB_TOKEN",
    "FINISHED_STATES",
    "INDEXES_2017_SQL",
    "JOB_TOKEN",
    "OTHER_USER_TOKEN",
    "OUTSIDE_WINDOW_TOKEN",
    "Summary",
    "UNSTARTED_JOB_TOKEN",
    "_rebuild_order",
    "build_parser",
    "container_rows",
    "format_report",
    "host_boot_time",
    "index_definitions",
    "lab_conninfo",
    "load_cluster",
    "load_containers",
    "main",
    "parse_time",
    "portable_data_hash",
    "sbatch_command",
    "slurm_environment",
    "submit_slurm_jobs",
    "utc_now",
]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lab.datagen", description="Fill an Arvados-shaped database with a generated cluster."
    )
    parser.add_argument(
        "--dsn",
        default=None,
        help="libpq connection string (default: the PG* environment if PGHOST is set, else the local lab's database)",
    )
    parser.add_argument("--prefix", default="zzzzz", help="cluster prefix (default zzzzz)")
    parser.add_argument("--jobs", type=int, default=200, help="all jobs (default 200)")
    parser.add_argument("--running", type=int, default=20, help="Running jobs (default 20)")
    parser.add_argument("--queued", type=int, default=10, help="Queued jobs (default 10)")
    parser.add_argument("--tasks-per-job", type=int, default=2, help="tasks of each started job (default 2)")
    parser.add_argument("--users", type=int, default=10, help="ordinary users (default 10)")
    parser.add_argument("--idle-users", type=int, default=2, help="of those, users who run no job (default 2)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument(
        "--boot-time", default="btime", help="'btime' (this host's boot, default), '@EPOCH' or ISO 8601 UTC"
    )
    parser.add_argument(
        "--running-after-boot", type=int, default=1, help="Running jobs started after the boot time (default 1)"
    )
    parser.add_argument("--running-unstarted", type=int, default=0, help="Running jobs with no started_at (default 0)")
    parser.add_argument(
        "--running-span-hours",
        type=float,
        default=24 * 7,
        help="Running jobs started within this many hours before boot (default 168)",
    )
    parser.add_argument("--no-decoys", action="store_true", help="no untouchable tokens around the running jobs")
    parser.add_argument("--no-finished-job-tokens", action="store_true", help="no (expired) tokens for finished jobs")
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--defer-indexes",
        dest="defer_indexes",
        action="store_true",
        default=None,
        help="drop indexes.sql's indexes, rebuild after the load (default from %d jobs)" % DEFER_INDEXES_FROM_JOBS,
    )
    group.add_argument("--keep-indexes", dest="defer_indexes", action="store_false")
    parser.add_argument(
        "--schema",
        choices=sorted(SCHEMA_INDEXES),
        default="current",
        help="the target's schema, whose indexes.sql a deferred-index load "
        "drops and rebuilds: current (lab/schema, default) or 2017 "
        "(lab/schema/2017)",
    )
    parser.add_argument(
        "--replace", action="store_true", help="empty the cluster tables first (else they must be empty)"
    )
    parser.add_argument(
        "--slurm-jobs",
        type=int,
        default=0,
        help="submit a Slurm job named after each of up to N running jobs (default 0)",
    )
    parser.add_argument(
        "--slurm-sleep", type=int, default=3600, help="how long those Slurm jobs sleep, seconds (default 3600)"
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--max-listed", type=int, default=20, help="list at most this many running job uuids (default 20)"
    )
    return parser


def spec_from_args(args: argparse.Namespace) -> ClusterSpec:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    return ClusterSpec(
        boot_time=parse_time(args.boot_time),
        now=utc_now(),
        prefix=args.prefix,
        jobs=args.jobs,
        running=args.running,
        queued=args.queued,
        running_after_boot=args.running_after_boot,
        running_unstarted=args.running_unstarted,
        tasks_per_job=args.tasks_per_job,
        users=args.users,
        idle_users=args.idle_users,
        seed=seed,
        running_span=timedelta(hours=args.running_span_hours),
        decoys=not args.no_decoys,
        finished_job_tokens=not args.no_finished_job_tokens,
    )


def format_report(summary: Summary, timings: LoadTimings, max_listed: int) -> str:
    lines = [
        "cluster %s, seed %d, boot time %sZ" % (summary.prefix, summary.seed, summary.boot_time.isoformat()),
        "rows: " + ", ".join("%s %d" % item for item in sorted(summary.rows.items())),
        "jobs by state: " + ", ".join("%s %d" % item for item in sorted(summary.jobs_by_state.items())),
        "tokens by kind: " + ", ".join("%s %d" % item for item in sorted(summary.tokens_by_kind.items())),
        "running before boot: %d, after boot: %d, without started_at: %d"
        % (len(summary.running_before_boot), len(summary.running_after_boot), len(summary.running_unstarted)),
    ]
    for label, items in (
        ("before boot", summary.running_before_boot),
        ("after boot", summary.running_after_boot),
        ("without started_at", summary.running_unstarted),
    ):
        shown = items[:max_listed]
        if shown:
            more = " (+%d more)" % (len(items) - len(shown)) if len(items) > len(shown) else ""
            lines.append("  %s: %s%s" % (label, " ".join(shown), more))
    if summary.slurm_jobs:
        lines.append("slurm jobs submitted: %d" % len(summary.slurm_jobs))
    lines.append(
        "time: total %.1f s, copy %.1f s, indexes %.1f s (%s), analyze %.1f s, "
        "peak RSS %.0f MiB"
        % (
            timings.total,
            timings.copy,
            timings.index,
            "deferred" if timings.deferred_indexes else "kept",
            timings.analyze,
            peak_rss_mib(),
        )
    )
    return "\n".join(lines)


def _psycopg_error() -> type:
    try:
        import psycopg
    except ImportError:
        return RuntimeError
    return psycopg.Error


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        spec = spec_from_args(args)
        conninfo = lab_conninfo() if args.dsn is None else args.dsn
        summary, timings = load_cluster(
            conninfo,
            spec,
            defer_indexes=args.defer_indexes,
            replace=args.replace,
            indexes_sql=SCHEMA_INDEXES[args.schema],
        )
        if args.slurm_jobs:
            summary.slurm_jobs = submit_slurm_jobs(summary.running_uuids, args.slurm_jobs, args.slurm_sleep)
    except (ValueError, RuntimeError, OSError, _psycopg_error()) as error:
        print("datagen: %s" % error, file=sys.stderr)
        return 1
    if args.json:
        report = summary.to_dict()
        report["timings"] = vars(timings)
        report["peak_rss_mib"] = round(peak_rss_mib(), 1)
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        print(format_report(summary, timings, args.max_listed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
