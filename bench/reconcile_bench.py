"""Benchmark of arvados_reconcile_info's read (issue 10), side by side in one run.

On a lab database of `--jobs` crunch v1 jobs (`--running` of them Running) and
`--containers` more containers (`--live-containers` Locked or Running), against
`--slurm-jobs` real, held (PENDING) Slurm jobs of the lab's Slurm, named after Running jobs,
live containers, finished containers and unknown UUIDs:

(a) the reconciliation's read, exactly as the module runs it (reconcile_run.Reconciler with
    the real squeue and database), `settle` 0 so no time is spent waiting: two squeue
    listings, one scan per kind of the live records (streamed in chunks where psycopg and
    libpq can), the re-read of the candidates, the set-based read of the names, the
    Dispatch lock;
(b) the floor the issue names: one `squeue --all` (the same command line) and one
    set-based query of the same rows (the live jobs and the live containers, fetched
    whole), measured together;
(c) (b) with its rows streamed in chunks as (a) reads them, to tell what (a) gains from
    the fetch alone.

With `--psycopg2`, (a) also runs through psycopg2 (pg_driver's psycopg2 path: no pipeline,
the live records fetched whole) as (a2), and the report says by how much it is slower.

Each round runs them in another order (`--rounds`, default 5); the report gives medians
and spreads, the squeue calls and SQL statements of (a), and the peak Python heap of each,
measured by tracemalloc in one more round each, not timed.

    .venv/bin/python -m bench.reconcile_bench                     # 1M jobs, 100k containers, 5000 Slurm jobs
    .venv/bin/python -m bench.reconcile_bench --jobs 100000 --running 10000 --containers 10000 \\
        --live-containers 1000 --slurm-jobs 500                    # a quick look

The generated database is kept as `bench_reconcile_<sizes>` and reused (`--rebuild`
makes it anew). The Slurm jobs this run submitted are cancelled, by id, at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from datetime import timedelta

import psycopg
from psycopg import sql

from lab import datagen, labctl
from plugins.module_utils import pg_driver, uuids
from plugins.module_utils.reconcile import CONTAINERS, JOBS, squeue_command
from plugins.module_utils.reconcile_db import LIVE_CHUNK_ROWS, SQL_LIVE, DatabaseReader, make_read_only
from plugins.module_utils.reconcile_run import ReconcileOptions, Reconciler, SlurmLister
from plugins.module_utils.slurm_queue import client_environment
from plugins.module_utils.slurm_runner import SubprocessRunner, SystemClock

PREFIX = "zzzzz"
SCANCEL_CHUNK = 500


def superuser(lab):
    return psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True)


def database_name(args) -> str:
    if args.jobs_from:
        return "bench_reconcile_%s_%d_%d" % (args.jobs_from, args.containers, args.live_containers)
    return "bench_reconcile_%d_%d_%d_%d" % (args.jobs, args.running, args.containers, args.live_containers)


def exists(lab, name: str) -> bool:
    with superuser(lab) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def build(lab, args, name: str) -> dict[str, float]:
    with superuser(lab) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {} OWNER arvados STRATEGY FILE_COPY").format(
                sql.Identifier(name), sql.Identifier(args.jobs_from or labctl.TEMPLATE_DATABASE)
            )
        )
    now = datagen.utc_now()
    conninfo = psycopg.conninfo.make_conninfo(**lab.connection(name))
    if args.jobs_from:
        # The jobs of another benchmark's database (bench.fail_jobs_bench's 1M-job template:
        # its tasks and tokens are never read here): only the containers are generated, in
        # place of the ones it has (one per Running job there).
        with psycopg.connect(conninfo, autocommit=True) as conn:
            conn.execute("TRUNCATE containers")
        began = time.monotonic()
        datagen.load_containers(conninfo, PREFIX, args.containers, args.live_containers, now, seed=args.seed)
        return {"containers_load_s": time.monotonic() - began}
    spec = datagen.ClusterSpec(
        boot_time=now - timedelta(minutes=30),
        now=now,
        jobs=args.jobs,
        running=args.running,
        queued=1000,
        running_after_boot=10,
        tasks_per_job=0,
        users=200,
        idle_users=20,
        seed=args.seed,
        finished_job_tokens=False,
        decoys=False,
    )
    began = time.monotonic()
    datagen.load_cluster(conninfo, spec, defer_indexes=True)
    jobs_loaded = time.monotonic()
    datagen.load_containers(conninfo, PREFIX, args.containers, args.live_containers, now, seed=args.seed)
    return {"jobs_load_s": jobs_loaded - began, "containers_load_s": time.monotonic() - jobs_loaded}


def slurm_names(lab, name: str, count: int, seed: int) -> list[str]:
    """Names for the Slurm jobs: half Running jobs, 40% live containers, 5% finished
    containers, 5% UUIDs the database does not have."""
    # Not Random(seed): the generator drew the containers' UUIDs from that very sequence, so
    # these "unknown" UUIDs were the first loaded containers.
    rng = random.Random("unknown UUIDs %d" % seed)
    with psycopg.connect(**lab.connection(name)) as conn:
        running = [
            row[0]
            for row in conn.execute(
                "SELECT uuid FROM jobs WHERE state = 'Running' ORDER BY uuid LIMIT %s", (count // 2,)
            )
        ]
        live = [
            row[0]
            for row in conn.execute(
                "SELECT uuid FROM containers WHERE state IN ('Locked', 'Running') ORDER BY uuid LIMIT %s",
                (count * 2 // 5,),
            )
        ]
        finished = [
            row[0]
            for row in conn.execute(
                "SELECT uuid FROM containers WHERE state = 'Complete' ORDER BY uuid LIMIT %s", (count // 20,)
            )
        ]
    unknown = [
        uuids.new_uuid(PREFIX, uuids.CONTAINER_INFIX, rng)
        for _ in range(count - len(running) - len(live) - len(finished))
    ]
    return running + live + finished + unknown


def submit_held(env, names: list[str], job_ids: list[str]) -> None:
    """sbatch each name, held; ids go into `job_ids` as they come, so that a failure
    midway still cancels what was submitted."""
    for job_name in names:
        completed = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--hold",
                "--job-name=" + job_name,
                "--output=/dev/null",
                "--chdir=/tmp",
                "--wrap",
                "exec sleep 3600",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        job_ids.append(completed.stdout.strip().split(";")[0])


def cancel(env, job_ids: list[str]) -> None:
    for start in range(0, len(job_ids), SCANCEL_CHUNK):
        subprocess.run(
            ["scancel"] + job_ids[start : start + SCANCEL_CHUNK], env=env, capture_output=True, timeout=120, check=False
        )


def options() -> ReconcileOptions:
    return ReconcileOptions.from_params({"cluster_prefix": PREFIX, "settle": 0})


def contender_reconcile(lab, name: str, env, traced: bool, driver: str = "psycopg") -> dict[str, object]:
    opts = options()
    connector = pg_driver.load_driver({pg_driver.DRIVER_ENV: driver})
    if traced:
        tracemalloc.start()
    began = time.monotonic()
    conn = connector.connect(**lab.connection(name))
    try:
        make_read_only(conn)
        result = Reconciler(
            opts,
            DatabaseReader(conn, opts.batch_size, opts.orphan_grace),
            SlurmLister(opts, SubprocessRunner(), env),
            SystemClock(),
        ).run()
    finally:
        conn.close()
    wall = time.monotonic() - began
    return {
        "wall": wall,
        "peak_mib": traced_peak_mib(traced),
        "squeue_calls": result["slurm"]["squeue_calls"],
        "statements": result["database_statements"],
        "counts": result["counts"],
        "listed": result["slurm"]["second_listing"],
        "evidence": result["evidence"],
        "squeue_s": result["seconds"]["squeue"],
        "database_s": result["seconds"]["database"],
    }


def contender_reconcile_psycopg2(lab, name: str, env, traced: bool) -> dict[str, object]:
    return contender_reconcile(lab, name, env, traced, driver="psycopg2")


def contender_floor_streamed(lab, name: str, env, traced: bool) -> dict[str, object]:
    return contender_floor(lab, name, env, traced, streamed=True)


def contender_floor(lab, name: str, env, traced: bool, streamed: bool = False) -> dict[str, object]:
    argv = squeue_command(options().squeue_path, None)
    grace = {"grace": options().orphan_grace}
    squeue_env = client_environment(env)
    if traced:
        tracemalloc.start()
    began = time.monotonic()
    listing = subprocess.run(argv, env=squeue_env, capture_output=True, text=True, timeout=60, check=True).stdout
    squeue_done = time.monotonic()
    with psycopg.connect(**lab.connection(name)) as conn:
        if streamed:
            rows = [
                list(conn.cursor().stream(SQL_LIVE[kind], grace, size=LIVE_CHUNK_ROWS)) for kind in (JOBS, CONTAINERS)
            ]
        else:
            rows = [conn.execute(SQL_LIVE[kind], grace).fetchall() for kind in (JOBS, CONTAINERS)]
    wall = time.monotonic() - began
    return {
        "wall": wall,
        "peak_mib": traced_peak_mib(traced),
        "squeue_s": squeue_done - began,
        "database_s": wall - (squeue_done - began),
        "rows": sum(len(part) for part in rows),
        "lines": listing.count("\n"),
    }


def traced_peak_mib(traced: bool) -> float | None:
    """The peak Python heap of a traced run, which then ends the tracing."""
    if not traced:
        return None
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20


def spread(values: list[float]) -> str:
    return "%.3f (%.3f-%.3f)" % (statistics.median(values), min(values), max(values))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--running", type=int, default=100_000)
    parser.add_argument("--containers", type=int, default=100_000)
    parser.add_argument("--live-containers", type=int, default=10_000)
    parser.add_argument("--slurm-jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument(
        "--jobs-from",
        metavar="DATABASE",
        help="copy the jobs of this lab database (for example bench_fail_jobs_template) instead of "
        "generating --jobs and --running; only the containers are generated",
    )
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--psycopg2", action="store_true", help="run (a) through psycopg2 too, as (a2)")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON too")
    args = parser.parse_args(argv)

    lab = labctl.lab_settings()
    env = dict(os.environ, **lab.exports())
    name = database_name(args)
    load = {}
    if args.rebuild or not exists(lab, name):
        print("generating %s" % name, flush=True)
        load = build(lab, args, name)
        print("loaded: %s" % json.dumps({k: round(v, 1) for k, v in load.items()}), flush=True)
    names = slurm_names(lab, name, args.slurm_jobs, args.seed)
    began = time.monotonic()
    job_ids: list[str] = []
    contenders = {"reconcile": contender_reconcile, "floor": contender_floor, "streamed": contender_floor_streamed}
    if args.psycopg2:
        contenders["reconcile_psycopg2"] = contender_reconcile_psycopg2
    rounds: dict[str, list[dict[str, object]]] = {contender: [] for contender in contenders}
    try:
        submit_held(env, names, job_ids)
        print("submitted %d held Slurm jobs in %.1f s" % (len(job_ids), time.monotonic() - began), flush=True)
        # Timed rounds run untraced: tracemalloc slows every allocation, and (a) allocates
        # more than (b), so tracing would tax it unevenly. One more traced round each
        # measures the heap.
        for number in range(args.rounds + 1):
            order = list(contenders)
            # Each round in another order, so that no contender always follows the same one.
            order = order[number % len(order) :] + order[: number % len(order)]
            for contender in order:
                rounds[contender].append(contenders[contender](lab, name, env, traced=number == args.rounds))
    finally:
        cancel(env, job_ids)
    report(args, rounds, load)
    if args.json:
        print(json.dumps({"load": load, "rounds": rounds}, indent=1, default=str))
    return 0


def psycopg2_version(rounds) -> str:
    if "reconcile_psycopg2" not in rounds:
        return ""
    return ", " + pg_driver.load_driver({pg_driver.DRIVER_ENV: "psycopg2"}).describe()


def table_row(label: str, timed: list[dict[str, object]], traced: dict[str, object], calls, statements) -> str:
    return "| %s | %s | %s | %s | %s | %s | %.1f |" % (
        label,
        spread([r["wall"] for r in timed]),
        spread([r["squeue_s"] for r in timed]),
        spread([r["database_s"] for r in timed]),
        calls,
        statements,
        traced["peak_mib"],
    )


def report(args, rounds, load) -> None:
    (*ours, ours_traced), (*floor, floor_traced) = rounds["reconcile"], rounds["floor"]
    *streamed, streamed_traced = rounds["streamed"]
    ratios = [a["wall"] / b["wall"] for a, b in zip(ours, floor, strict=True)]
    streamed_ratios = [a["wall"] / c["wall"] for a, c in zip(ours, streamed, strict=True)]
    print("drivers: psycopg %s%s" % (psycopg.__version__, psycopg2_version(rounds)))
    jobs = "the jobs of %s" % args.jobs_from if args.jobs_from else "%d jobs (%d Running)" % (args.jobs, args.running)
    print(
        "\n%s, %d more containers (%d live), %d held Slurm jobs, %d rounds"
        % (jobs, args.containers, args.live_containers, args.slurm_jobs, args.rounds)
    )
    print(
        "| contender | wall s, median (min-max) | squeue s | database s | squeue calls |"
        " SQL statements | peak heap MiB |"
    )
    print("|---|---|---|---|---|---|---|")
    print(table_row("(a) reconciliation read", ours, ours_traced, ours[0]["squeue_calls"], ours[0]["statements"]))
    print(table_row("(b) one squeue + one query", floor, floor_traced, 1, 2))
    print(table_row("(c) = (b), its rows streamed in chunks as (a) reads them", streamed, streamed_traced, 1, 2))
    if "reconcile_psycopg2" in rounds:
        *second, second_traced = rounds["reconcile_psycopg2"]
        print(
            table_row(
                "(a2) = (a) through psycopg2", second, second_traced, second[0]["squeue_calls"], second[0]["statements"]
            )
        )
        assert second[0]["counts"] == ours[0]["counts"], (second[0]["counts"], ours[0]["counts"])
        slower = [b["wall"] / a["wall"] for a, b in zip(ours, second, strict=True)]
        slower_db = [b["database_s"] / a["database_s"] for a, b in zip(ours, second, strict=True)]
        print(
            "(a2)/(a) per round: %s; median %.2fx (database part %.2fx)"
            % (", ".join("%.2f" % ratio for ratio in slower), statistics.median(slower), statistics.median(slower_db))
        )
    for label, values in (("(a)/(b)", ratios), ("(a)/(c)", streamed_ratios)):
        print(
            "%s per round: %s; median %.2fx%s"
            % (
                label,
                ", ".join("%.2f" % ratio for ratio in values),
                statistics.median(values),
                " (limit 1.5x)" if label == "(a)/(b)" else "",
            )
        )
    print(
        "(b) read %d rows and %d squeue lines; (a) found %s, evidence %s"
        % (floor[0]["rows"], floor[0]["lines"], ours[0]["counts"], ours[0]["evidence"])
    )
    if load:
        print("load: %s" % load)


if __name__ == "__main__":
    sys.exit(main())
