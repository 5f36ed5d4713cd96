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

With `--psycopg2`, (a) also runs through psycopg2 (database_driver's psycopg2 path: no pipeline,
the live records fetched whole) as (a2), and the report says by how much it is slower.

With `--watch` (issue 24), the watch against the module, given the same options (the lab
database by its config.yml, `settle` 0, the rest the defaults, so one `scontrol` too):
(m) arvados_reconcile_info's read, `run_reconcile` as the module calls it; (w) the
`arvados-recovery-watch` command's steps in-process as its main() runs them (options
file, the read, the gauges rendered and the .prom file written atomically, the JSON
result written atomically), each timed; (x) the command itself as a child process, wall
time and peak RSS (GNU time's). `--keep-prom FILE` copies the last .prom file (w) wrote.

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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from functools import partial
from pathlib import Path

import psycopg
from psycopg import sql

from bench.fail_jobs_bench import database_comment
from bench.results import ratio_summary, write_json
from lab import datagen, labctl
from lab.files import render_arvados_config, write_private_file
from plugins.module_utils._common import uuids
from plugins.module_utils._database import driver as database_driver
from plugins.module_utils._reconcile import watch_cli
from plugins.module_utils._reconcile.db import LIVE_CHUNK_ROWS, SQL_LIVE, DatabaseReader, make_read_only
from plugins.module_utils._reconcile.engine import CONTAINERS, JOBS
from plugins.module_utils._reconcile.run import ReconcileOptions, Reconciler, SlurmLister, run_reconcile
from plugins.module_utils._slurm.queue import JOB_NODES_LISTING, client_environment, squeue_command
from plugins.module_utils._slurm.runner import SubprocessRunner, SystemClock

PREFIX = "zzzzz"
SCANCEL_CHUNK = 500
REPO_ROOT = Path(__file__).resolve().parents[1]


def superuser(lab):
    return psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True)


def database_name(args) -> str:
    if args.jobs_from:
        return "bench_reconcile_%s_%d_%d" % (args.jobs_from, args.containers, args.live_containers)
    return "bench_reconcile_%d_%d_%d_%d" % (args.jobs, args.running, args.containers, args.live_containers)


def exists(lab, name: str) -> bool:
    with superuser(lab) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def up_to_date(lab, args, name: str) -> bool:
    """Whether `name` can be reused. One made from --jobs-from carries its source's comment
    (fail_jobs_bench writes its sizes there): a source rebuilt at other sizes (make bench,
    then make bench-full) makes it stale, which its name alone would not tell."""
    if not exists(lab, name):
        return False
    return not args.jobs_from or database_comment(lab, name) == database_comment(lab, args.jobs_from)


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
        comment = database_comment(lab, args.jobs_from)
        with superuser(lab) as conn:
            conn.execute(sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(name), sql.Literal(comment)))
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
    connector = database_driver.load_driver({database_driver.DRIVER_ENV: driver})
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
    argv = squeue_command(options().squeue_path, listing=JOB_NODES_LISTING)
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


class WatchFiles:
    """What the module and the watch are given: the lab database named by a config.yml
    (0600, as on a dispatcher host), in an options file the watch reads as the role's
    unit has it read; and where the watch writes its .prom file and its JSON result."""

    def __init__(self, lab, name: str, directory: Path):
        self.config = directory / "config.yml"
        write_private_file(self.config, render_arvados_config(lab, lab.db_password(), dbname=name))
        self.params = {"config_file": str(self.config), "cluster_prefix": PREFIX, "settle": 0, "db_wait": 0}
        self.options = directory / "watch.json"
        write_private_file(self.options, json.dumps(self.params))
        self.metrics = directory / "arvados_recovery.prom"
        self.result = directory / "result.json"

    def argv(self, metrics: Path, result: Path) -> list[str]:
        """The role's unit's command line (roles/recovery_watch/templates)."""
        return ["--options-file", str(self.options), "--metrics-file", str(metrics), "--json", str(result)]


def contender_module(lab, name: str, env, traced: bool, files: WatchFiles) -> dict[str, object]:
    if traced:
        tracemalloc.start()
    began = time.monotonic()
    result = run_reconcile(files.params, environ=env)
    wall = time.monotonic() - began
    return {"wall": wall, "peak_mib": traced_peak_mib(traced), "counts": result["counts"]}


def contender_watch(lab, name: str, env, traced: bool, files: WatchFiles) -> dict[str, object]:
    """watch_cli.main()'s steps, each timed: the read is the same run_reconcile as (m)'s."""
    read_seconds: list[float] = []

    def timed_read(params):
        began = time.monotonic()
        try:
            return run_reconcile(params, environ=env)
        finally:
            read_seconds.append(time.monotonic() - began)

    if traced:
        tracemalloc.start()
    began = time.monotonic()
    params = watch_cli.gather_params(watch_cli.build_parser().parse_args(files.argv(files.metrics, files.result)))
    result = watch_cli.watch(params, read=timed_read)
    prom_written = time.monotonic()
    watch_cli.write_json(result, str(files.result), None)
    wall = time.monotonic() - began
    return {
        "wall": wall,
        "peak_mib": traced_peak_mib(traced),
        "counts": result["counts"],
        "read_s": read_seconds[0],
        "prom_s": prom_written - began - read_seconds[0],
        "json_s": wall - (prom_written - began),
        "prom_bytes": files.metrics.stat().st_size,
        "json_bytes": files.result.stat().st_size,
    }


def contender_command(lab, name: str, env, traced: bool, files: WatchFiles) -> dict[str, object]:
    """The command as the role's timer runs it: interpreter start-up and imports included.
    Its peak RSS comes from GNU time, a small parent: Linux starts a child's ru_maxrss from
    its parent's peak across fork and exec, so this benchmark's own RSS would mask it."""
    scratch = files.metrics.parent
    usage = scratch / "command.time"
    argv = [
        "/usr/bin/time",
        "-f",
        "%M",
        "-o",
        str(usage),
        sys.executable,
        "-m",
        "plugins.module_utils._reconcile.watch_cli",
    ]
    argv += files.argv(scratch / "command.prom", scratch / "command.json")
    began = time.monotonic()
    subprocess.run(argv, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, timeout=300, check=True)
    wall = time.monotonic() - began
    return {"wall": wall, "peak_mib": None, "rss_mib": int(usage.read_text().split()[-1]) / 1024}


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
    parser.add_argument(
        "--watch", action="store_true", help="run (m) the module's read, (w) the watch and (x) its command too"
    )
    parser.add_argument("--keep-prom", metavar="FILE", help="with --watch: copy the last .prom file (w) wrote to FILE")
    parser.add_argument("--json", action="store_true", help="print the raw numbers as JSON too")
    parser.add_argument(
        "--json-out", metavar="FILE", help="write the raw numbers and the ratios to FILE (bench.summary)"
    )
    args = parser.parse_args(argv)

    lab = labctl.lab_settings()
    env = dict(os.environ, **lab.exports())
    name = database_name(args)
    load = {}
    if args.rebuild or not up_to_date(lab, args, name):
        print("generating %s" % name, flush=True)
        load = build(lab, args, name)
        print("loaded: %s" % json.dumps({k: round(v, 1) for k, v in load.items()}), flush=True)
    names = slurm_names(lab, name, args.slurm_jobs, args.seed)
    began = time.monotonic()
    job_ids: list[str] = []
    contenders = {"reconcile": contender_reconcile, "floor": contender_floor, "streamed": contender_floor_streamed}
    if args.psycopg2:
        contenders["reconcile_psycopg2"] = contender_reconcile_psycopg2
    scratch = tempfile.TemporaryDirectory(prefix="reconcile-bench-")
    if args.watch:
        files = WatchFiles(lab, name, Path(scratch.name))
        for label, contender in (("module", contender_module), ("watch", contender_watch)):
            contenders[label] = partial(contender, files=files)
        contenders["command"] = partial(contender_command, files=files)
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
        if args.watch and args.keep_prom:
            shutil.copyfile(files.metrics, args.keep_prom)
    finally:
        cancel(env, job_ids)
        scratch.cleanup()
    report(args, rounds, load)
    if args.watch:
        report_watch(rounds)
    if args.json:
        print(json.dumps({"load": load, "rounds": rounds}, indent=1, default=str))
    write_json(args.json_out, json_payload(args, rounds, load))
    return 0


def json_payload(args, rounds, load) -> dict[str, object]:
    """Everything bench.summary reads. The ratios leave out each contender's last round,
    the traced one (tracemalloc slows it)."""
    walls = {contender: [r["wall"] for r in runs[:-1]] for contender, runs in rounds.items()}
    return {
        "benchmark": "reconcile_bench",
        "sizes": {
            "jobs": args.jobs_from or args.jobs,
            "running": None if args.jobs_from else args.running,
            "containers": args.containers,
            "live_containers": args.live_containers,
            "slurm_jobs": args.slurm_jobs,
            "rounds": args.rounds,
        },
        "load": load,
        "rounds": rounds,
        "ratios": {
            "a/b": ratio_summary(walls["reconcile"], walls["floor"]),
            "a/c": ratio_summary(walls["reconcile"], walls["streamed"]),
        },
    }


def report_watch(rounds) -> None:
    (*module, module_traced), (*watch, watch_traced) = rounds["module"], rounds["watch"]
    command = rounds["command"][:-1]
    assert watch[0]["counts"] == module[0]["counts"] == rounds["reconcile"][0]["counts"]
    print("\nthe watch against arvados_reconcile_info's read (same options, one scontrol each)")
    print("| contender | wall s, median (min-max) | read s | .prom s | JSON s | peak heap MiB | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    print(
        "| (m) arvados_reconcile_info's read (run_reconcile) | %s | | | | %.1f | |"
        % (spread([r["wall"] for r in module]), module_traced["peak_mib"])
    )
    print(
        "| (w) the watch in-process: read, .prom, JSON | %s | %s | %s | %s | %.1f | |"
        % tuple(
            [spread([r[key] for r in watch]) for key in ("wall", "read_s", "prom_s", "json_s")]
            + [watch_traced["peak_mib"]]
        )
    )
    print(
        "| (x) the command, a child process | %s | | | | | %s |"
        % (spread([r["wall"] for r in command]), spread([r["rss_mib"] for r in command]))
    )
    for label, values in (
        ("(w) read / (m)", [w["read_s"] / m["wall"] for w, m in zip(watch, module, strict=True)]),
        (
            "(w) read + .prom / (m)",
            [(w["read_s"] + w["prom_s"]) / m["wall"] for w, m in zip(watch, module, strict=True)],
        ),
        ("(w) whole / (m)", [w["wall"] / m["wall"] for w, m in zip(watch, module, strict=True)]),
        ("(x) / (m)", [x["wall"] / m["wall"] for x, m in zip(command, module, strict=True)]),
    ):
        print(
            "%s per round: %s; median %.2fx"
            % (label, ", ".join("%.2f" % ratio for ratio in values), statistics.median(values))
        )
    print(".prom %d bytes, JSON %d bytes" % (watch[0]["prom_bytes"], watch[0]["json_bytes"]))


def psycopg2_version(rounds) -> str:
    if "reconcile_psycopg2" not in rounds:
        return ""
    return ", " + database_driver.load_driver({database_driver.DRIVER_ENV: "psycopg2"}).describe()


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
                " (target 1.3x, issue 40)" if label == "(a)/(b)" else "",
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
