"""arvados_fail_jobs beside a live API server, and its no-op run from a cold cache (issue 11).

Latency (default): on a fresh copy of the 1M-job template of `bench.fail_jobs_bench`
(100,000 jobs `Running`), a steady API-like load runs before and during each contender's
cleanup of the 100,000 jobs, side by side in one run:

- job update: `UPDATE jobs SET modified_at = now() WHERE uuid = ...` of a finished job
  the cleanup never touches (modified_at is indexed: the update is not HOT and inserts into
  every index of jobs, the trigram one included, as an API update does);
- job read: `SELECT * FROM jobs WHERE uuid = ...` of such a job;
- log update and log read: the same on `logs` rows (20,000 are added to the copy first);

each `--rate` times a second on a connection of its own. For each kind and phase (before,
during) the report gives p50, p99 and max, with the cleanup's own time beside it, and the
oldest snapshot of the cleanup's sessions (`backend_xmin` in `pg_stat_activity`, sampled
every 0.1 s): its age in transactions and how long one `backend_xmin` stayed. Per phase it
also prints what the API-like sessions waited for when seen busy (wait events), the
machine's CPU time by kind and the server's checkpoints, buffer writes and WAL a second.

Contenders: `today` (the command at --today-commit, the code before this change),
`boot` (`--live false`), `live` (`--live true`), and `live` with settings joined by `+`
(see contender_settings): pause=<s>, batch=<jobs>, server=<setting>:<value>. By default
`live` (the adaptive pace, fail_jobs_pace) against `batch=100+pause=2` (the fixed live
default before it), rounds alternating. Each contender's line says the load average as it
ended and the pace the command reported; the summary gives each p99 during the run against
its own "before" and against the median "before" of all runs (the machine's noise shared).

No-op (`--noop`): the command's engine on a copy after a full cleanup, with the operating
system's cache dropped and PostgreSQL restarted before each run (needs root), by the index
on finished_at (the default) and by the whole table (`full_scan`), and warm.

    .venv/bin/python -m bench.fail_jobs_bench --prepare-only    # the template, once
    .venv/bin/python -m bench.fail_jobs_live_bench --rounds 3 --during-seconds 120
    .venv/bin/python -m bench.fail_jobs_live_bench --noop --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

import psycopg
from psycopg import sql

from bench.fail_jobs_bench import (
    TEMPLATE,
    analyze_cleaned_copy,
    checkpoint,
    clone,
    command_line,
    database_comment,
    drop,
    running_count,
    template_threshold,
    warm,
)
from bench.results import ratio_summary, write_json
from lab import labctl
from plugins.module_utils._cleanup.sql import ORDER_BY_START, SQL_RUNNING, WHERE_ALL

REPO = Path(__file__).resolve().parent.parent
KINDS = ("job update", "job read", "log update", "log read")
LOG_ROWS = 20000
# The first columns of /proc/stat's cpu line.
CPU_TIMES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
SQL = {
    "job update": "UPDATE jobs SET modified_at = now() AT TIME ZONE 'UTC' WHERE uuid = %s",
    "job read": "SELECT * FROM jobs WHERE uuid = %s",
    "log update": "UPDATE logs SET modified_at = now() AT TIME ZONE 'UTC' WHERE uuid = %s",
    "log read": "SELECT * FROM logs WHERE uuid = %s",
}


def add_log_rows(conn):
    conn.execute(
        "INSERT INTO logs (id, uuid, owner_uuid, object_uuid, event_type, summary, properties, "
        "created_at, updated_at, modified_at, event_at) "
        "SELECT nextval('logs_id_seq'), 'zzzzz-57u5n-bench' || lpad(g::text, 10, '0'), "
        "'zzzzz-tpzed-000000000000000', 'zzzzz-8i9sb-bench' || lpad(g::text, 10, '0'), "
        "'bench', 'bench', '{}', now(), now(), now(), now() FROM generate_series(1, %s) g",
        (LOG_ROWS,),
    )


def targets(conn):
    jobs = [r[0] for r in conn.execute("SELECT uuid FROM jobs WHERE state <> 'Running' ORDER BY md5(uuid) LIMIT 5000")]
    logs = [r[0] for r in conn.execute("SELECT uuid FROM logs ORDER BY md5(uuid) LIMIT 5000")]
    return {"job update": jobs, "job read": jobs[::-1], "log update": logs, "log read": logs[::-1]}


class Load(threading.Thread):
    """One kind of API request at a steady rate; latencies by phase."""

    def __init__(self, lab, name, kind, uuids, rate, phase):
        super().__init__(daemon=True)
        self.conn = psycopg.connect(**lab.connection(name), autocommit=True, application_name="bench-api")
        self.kind, self.uuids, self.interval, self.phase = kind, uuids, 1.0 / rate, phase
        self.samples = {}
        self.stop = threading.Event()

    def run(self):
        due = time.monotonic()
        i = 0
        while not self.stop.is_set():
            began = time.monotonic()
            cursor = self.conn.execute(SQL[self.kind], (self.uuids[i % len(self.uuids)],))
            if cursor.description:
                cursor.fetchall()
            self.samples.setdefault(self.phase[0], []).append(time.monotonic() - began)
            i += 1
            due += self.interval
            self.stop.wait(max(0.0, due - time.monotonic()))
        self.conn.close()


class SnapshotWatch(threading.Thread):
    """The cleanup's sessions' backend_xmin (the largest age, and the longest one lived), and
    by phase what the API-like sessions were doing when seen busy: the wait event, or "CPU"
    (on a core or waiting for one), counted over the samples."""

    def __init__(self, lab, name, phase):
        super().__init__(daemon=True)
        self.conn = psycopg.connect(**lab.superuser_connection(name), autocommit=True)
        self.name, self.phase = name, phase
        self.max_age = 0
        self.seen = {}
        self.waits = {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            now = time.monotonic()
            for app, pid, xmin, age, wait in self.conn.execute(
                "SELECT application_name, pid, backend_xmin::text, age(backend_xmin), "
                "coalesce(wait_event_type || ':' || wait_event, 'CPU') FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid() AND ((application_name = 'arvados-fail-jobs' "
                "AND backend_xmin IS NOT NULL) OR (application_name = 'bench-api' AND state = 'active'))",
                (self.name,),
            ):
                if app == "bench-api":
                    counts = self.waits.setdefault(self.phase[0], {})
                    counts[wait] = counts.get(wait, 0) + 1
                    continue
                self.max_age = max(self.max_age, age)
                first, _last = self.seen.get((pid, xmin), (now, now))
                self.seen[(pid, xmin)] = (first, now)
            self.stop.wait(0.1)
        self.conn.close()

    @property
    def longest(self):
        return max([last - first for first, last in self.seen.values()] or [0.0])


def machine_counters(lab, name):
    """The machine's CPU time by kind (/proc/stat, in ticks) and the server's write counters:
    taken at each phase's start and end, their differences say what the phase cost."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    cpu = dict(zip(CPU_TIMES, map(int, fields[: len(CPU_TIMES)]), strict=True))
    with psycopg.connect(**lab.superuser_connection(name), autocommit=True) as conn:
        (bgwriter,) = conn.execute(
            "SELECT json_build_object('checkpoints', checkpoints_timed + checkpoints_req, "
            "'backend buffer writes', buffers_backend, 'backend fsyncs', buffers_backend_fsync, "
            "'bgwriter buffer writes', buffers_clean, 'checkpoint buffer writes', buffers_checkpoint) "
            "FROM pg_stat_bgwriter"
        ).fetchone()
        # WAL by its position, exact at once; pg_stat_wal's counters wait for a session's
        # next report (up to a minute, or never for a session cut short).
        (wal,) = conn.execute(
            "SELECT json_build_object('WAL MB', pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0') / 1048576.0, "
            "'WAL full-page images', wal_fpi, 'WAL buffers full', wal_buffers_full, 'WAL syncs', wal_sync) "
            "FROM pg_stat_wal"
        ).fetchone()
    return {**cpu, **bgwriter, **wal}


def counter_report(start, end, seconds):
    """What one phase cost, per second of it."""
    ticks = {key: end[key] - start[key] for key in CPU_TIMES}
    total = sum(ticks.values()) or 1
    shares = ", ".join("%s %.0f%%" % (key, 100.0 * value / total) for key, value in ticks.items() if value)
    rates = ", ".join("%s %.1f/s" % (key, (end[key] - start[key]) / seconds) for key in start if key not in ticks)
    return "cpu: %s; server: %s" % (shares, rates)


def today_tree(commit):
    """The command as it was at `commit`, in a directory of its own."""
    directory = Path(tempfile.mkdtemp(prefix="fail-jobs-today-"))
    archive = subprocess.run(["git", "archive", commit, "plugins"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def contender_settings(contender):
    """(the command's flags, server settings {name: value}) of a contender: today, boot, live,
    or live with settings joined by '+': pause=<seconds> (--batch-pause), batch=<jobs>
    (--batch-size), server=<setting>:<value> (what an operator could change on the server,
    and the run itself cannot: wal_compression, for one, is the superuser's; set for the
    whole server for this contender's time only); for example pause=0.1+batch=200."""
    if contender == "today":
        return [], {}
    if contender == "boot":
        return ["--live", "false"], {}
    flags, server = ["--live", "true"], {}
    for setting in contender.split("+"):
        name, _, value = setting.partition("=")
        if name == "pause":
            flags += ["--batch-pause", value]
        elif name == "batch":
            flags += ["--batch-size", value]
        elif name == "server":
            key, _, wanted = value.partition(":")
            server[key] = wanted
        elif setting != "live":
            raise SystemExit("unknown contender setting %r in %r" % (setting, contender))
    return flags, server


def apply_server_settings(lab, name, settings):
    """ALTER SYSTEM for these settings (a value None: RESET), then a reload, or a restart of
    the lab's PostgreSQL when one of them takes effect only so (shared_buffers, for one)."""
    with psycopg.connect(**lab.superuser_connection(name), autocommit=True) as conn:
        for key, value in settings.items():
            if value is None:
                conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(key)))
            else:
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(key), sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")
        at_restart = conn.execute(
            "SELECT name FROM pg_settings WHERE name = ANY(%s) AND context = 'postmaster'", (list(settings),)
        ).fetchall()
    if at_restart:
        labctl.stop_postgres(lab, labctl.live_record(lab, "postgresql"))
        labctl.write_record(lab, "postgresql", labctl.start_postgres(lab))


def run_latency(lab, args, contender, before, threshold, today_dir):
    name = "bench_fj_live"
    clone(lab, name, TEMPLATE)
    with psycopg.connect(**lab.connection(name), autocommit=True) as conn:
        add_log_rows(conn)
        chosen = targets(conn)
    flags, settings = contender_settings(contender)
    # Before the cache is warmed: a setting may restart the server.
    apply_server_settings(lab, name, settings)
    warm(lab, name)
    jobs = running_count(lab, name, threshold)
    checkpoint(lab)
    phase = ["before"]
    loads = [Load(lab, name, kind, chosen[kind], args.rate, phase) for kind in KINDS]
    # The watch polls pg_stat_activity ten times a second from this process: started with
    # the loads, so that "before" and "during" pay the same for it.
    watch = SnapshotWatch(lab, name, phase)
    for thread in loads + [watch]:
        thread.start()
    counters = [machine_counters(lab, name)]
    time.sleep(args.before_seconds)
    counters.append(machine_counters(lab, name))
    code_dir = today_dir if contender == "today" else REPO
    argv, env, options_file = command_line(lab, name, before, None, code_dir, flags)
    # Its progress lines say the pace it chose (the contenders of this tree).
    if contender != "today":
        argv.remove("--quiet")
    phase[0] = "during"
    began = time.monotonic()
    # `python -m` puts the working directory first on sys.path: the code's own tree.
    child = subprocess.Popen(argv, cwd=code_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _out, err = child.communicate(timeout=args.during_seconds)
    except subprocess.TimeoutExpired:
        # Cut short (--during-seconds): the run is safe to stop at any instant.
        child.terminate()
        _out, err = child.communicate()
        child.returncode = 0
    elapsed = time.monotonic() - began
    counters.append(machine_counters(lab, name))
    phase[0] = "after"
    watch.stop.set()
    for load in loads:
        load.stop.set()
    for thread in loads + [watch]:
        thread.join()
    apply_server_settings(lab, name, dict.fromkeys(settings))
    os.unlink(options_file)
    if child.returncode != 0:
        raise SystemExit("%s failed: %s" % (contender, err.strip()))
    done = jobs - running_count(lab, name, threshold)
    paces = [line.split("pace: ", 1)[1] for line in err.splitlines() if "pace: " in line]
    drop(lab, name)
    # A run cut short is reported as the time the whole cleanup would take at its pace.
    seconds = elapsed * jobs / max(done, 1)
    row = {
        "contender": contender,
        "settings": " ".join(flags) or "(the command's defaults)",
        "seconds": seconds,
        "jobs": jobs,
        "xmin_age": watch.max_age,
        "xmin_longest": watch.longest,
        "pace": paces[-1] if paces else "",
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }
    for load in loads:
        for phase_name in ("before", "during"):
            row[(load.kind, phase_name)] = sorted(load.samples.get(phase_name, []))
    print(
        "%s: %d jobs in %.1f s (%d done in the run); oldest snapshot %d xids, %.1f s; job update p99 %.0f -> %.0f ms; "
        "load %s; pace %s"
        % (
            contender,
            jobs,
            seconds,
            done,
            watch.max_age,
            watch.longest,
            1000 * pct(row[("job update", "before")], 99),
            1000 * pct(row[("job update", "during")], 99),
            row["load"],
            row["pace"] or "-",
        ),
        flush=True,
    )
    for phase_name, start, end, length in (
        ("before", counters[0], counters[1], args.before_seconds),
        ("during", counters[1], counters[2], elapsed),
    ):
        busy = watch.waits.get(phase_name, {})
        total = sum(busy.values()) or 1
        print(
            "  %s: API sessions seen busy %d times: %s"
            % (
                phase_name,
                sum(busy.values()),
                ", ".join(
                    "%s %.0f%%" % (wait, 100.0 * n / total) for wait, n in sorted(busy.items(), key=lambda kv: -kv[1])
                ),
            )
        )
        print("  %s: %s" % (phase_name, counter_report(start, end, length)), flush=True)
    return row


def pct(samples, p):
    if not samples:
        return float("nan")
    return samples[min(len(samples) - 1, int(round(p / 100.0 * (len(samples) - 1))))]


def report_latency(rows):
    print()
    print(
        "| contender | cleanup s | oldest snapshot (xids / s) | kind | before p50 / p99 / max ms "
        "| during p50 / p99 / max ms | p99 during / before |"
    )
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for row in rows:
        for kind in KINDS:
            before, during = row[(kind, "before")], row[(kind, "during")]
            print(
                "| %s | %.1f | %d / %.1f | %s | %s | %s | %.2f |"
                % (
                    row["contender"],
                    row["seconds"],
                    row["xmin_age"],
                    row["xmin_longest"],
                    kind,
                    triple(before),
                    triple(during),
                    pct(during, 99) / pct(before, 99),
                )
            )
    print()
    # The "before" windows are short and the machine shared: each run's own is noisy, so
    # the p99 during a run is also set against the median "before" of all of them.
    pooled = statistics.median(pct(r[("job update", "before")], 99) for r in rows)
    print("median job update p99 before, all runs: %.1f ms" % (1000 * pooled))
    print(
        "| contender | command line options it ran | cleanup s for 100,000 jobs, median | job update p99 "
        "during / before, median | p99 during / median before | load (1, 5, 15 min) at each end | pace (last round) |"
    )
    print("| --- | --- | ---: | ---: | ---: | --- | --- |")
    for contender in dict.fromkeys(r["contender"] for r in rows):
        mine = [r for r in rows if r["contender"] == contender]
        per_100k = [r["seconds"] * 100000 / max(r["jobs"], 1) for r in mine]
        print(
            "| %s | %s | %.0f (%s) | %.2f (%s) | %.2f (%s) | %s | %s |"
            % (
                contender,
                mine[0]["settings"],
                statistics.median(per_100k),
                ", ".join("%.0f" % s for s in per_100k),
                statistics.median(ratio(r) for r in mine),
                ", ".join("%.2f" % ratio(r) for r in mine),
                statistics.median(pct(r[("job update", "during")], 99) / pooled for r in mine),
                ", ".join("%.2f" % (pct(r[("job update", "during")], 99) / pooled) for r in mine),
                "; ".join(r["load"] for r in mine),
                mine[-1]["pace"] or "-",
            )
        )


def ratio(row):
    return pct(row[("job update", "during")], 99) / pct(row[("job update", "before")], 99)


def triple(samples):
    return "%.1f / %.1f / %.1f" % (
        1000 * pct(samples, 50),
        1000 * pct(samples, 99),
        1000 * (samples[-1] if samples else float("nan")),
    )


# -- the no-op run from a cold cache ------------------------------------------------------


def cold(lab):
    """The operating system's page cache dropped and PostgreSQL restarted (its cache too)."""
    record = labctl.live_record(lab, "postgresql")
    labctl.stop_postgres(lab, record)
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    labctl.write_record(lab, "postgresql", labctl.start_postgres(lab))


def engine_noop(lab, name, before, full_scan):
    sys.path.insert(0, str(REPO))
    from plugins.module_utils._cleanup.run import run_fail_jobs  # pylint: disable=import-outside-toplevel

    params = {
        "config_file": str(lab.config_yml),
        "db_name": name,
        "cancel_slurm_jobs": False,
        "before": before,
        "full_scan": full_scan,
        "live": False,
    }
    began = time.monotonic()
    result = run_fail_jobs(params, keep_uuids=False)
    return time.monotonic() - began, result["changed"]


def plain_sql_noop(lab, name):
    """The floor of the no-op: the default's read of the Running jobs (the whole table, as
    Arvados' fail_jobs reads it) as plain SQL, its connection included as the engine's is."""
    began = time.monotonic()
    with psycopg.connect(**lab.connection(name)) as conn:
        conn.execute(SQL_RUNNING.format(where=WHERE_ALL, order=ORDER_BY_START)).fetchall()
    # A read changes nothing: (seconds, changed) as engine_noop returns them.
    return time.monotonic() - began, False


# (key in the JSON, label, how to run it, cold cache): the default reads the whole table
# (full_scan, issue 41), the index on finished_at is the operator's faster option.
NOOP_RUNS = (
    ("engine_full_scan_cold", "engine, whole table (full_scan, the default), cold", True, True),
    ("plain_sql_cold", "plain SQL, the same read, cold (the floor)", None, True),
    ("engine_index_cold", "engine, index on finished_at, cold", False, True),
    ("engine_full_scan_warm", "engine, whole table (full_scan, the default), warm", True, False),
    ("plain_sql_warm", "plain SQL, the same read, warm", None, False),
    ("engine_index_warm", "engine, index on finished_at, warm", False, False),
)


def run_noop(lab, args, before, threshold):
    name = "bench_fj_noop"
    if args.keep and cleaned_copy_exists(lab, name, threshold):
        print("reusing %s" % name, flush=True)
    else:
        clone(lab, name, TEMPLATE)
        argv, env, options_file = command_line(lab, name, before, None, extra=["--live", "false"])
        subprocess.run(argv, cwd=REPO, env=env, check=True, capture_output=True)
        os.unlink(options_file)
        analyze_cleaned_copy(lab, name)
    # Once untimed: the process's first run imports modules (PyYAML, ...) that later
    # runs, and a boot's command, have loaded before the engine starts.
    engine_noop(lab, name, before, False)
    times = {}
    for _round in range(args.rounds):
        for key, label, full_scan, cold_cache in NOOP_RUNS:
            if cold_cache:
                cold(lab)
            noop = (
                partial(plain_sql_noop, lab, name)
                if full_scan is None
                else partial(engine_noop, lab, name, before, full_scan)
            )
            if not cold_cache:
                # Warm is what this very read finds in the caches after itself: the run before
                # it may have been a cold one that read other pages (the index's).
                noop()
            seconds, changed = noop()
            assert not changed
            times.setdefault(key, []).append(seconds)
            print("%s: %.3f s" % (label, seconds), flush=True)
    if not args.keep:
        drop(lab, name)
    print()
    print("| no-op run | median s | runs |")
    print("| --- | ---: | --- |")
    for key, label, _full_scan, _cold in NOOP_RUNS:
        values = times[key]
        print("| %s | %.3f | %s |" % (label, statistics.median(values), ", ".join("%.3f" % v for v in values)))
    cold_ratio = ratio_summary(times["engine_full_scan_cold"], times["plain_sql_cold"])
    print("engine / plain SQL, cold: median of the rounds %.2f" % cold_ratio["median"])
    return {
        "benchmark": "fail_jobs_live_bench",
        "mode": "noop",
        "sizes": {"rounds": args.rounds, "template": database_comment(lab, TEMPLATE)},
        "seconds": times,
        "ratios": {"engine/plain, cold": cold_ratio},
    }


def cleaned_copy_exists(lab, name, threshold):
    try:
        return running_count(lab, name, threshold) == 0
    except psycopg.OperationalError:
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=float, default=10.0, help="requests per second of each kind")
    parser.add_argument("--before-seconds", type=float, default=20.0)
    parser.add_argument(
        "--contenders",
        default="live,batch=100+pause=2",
        help="comma-separated: today, boot, live, or live's settings joined by + (pause=<s>, batch=<jobs>)",
    )
    parser.add_argument("--today-commit", default="79df00b")
    parser.add_argument(
        "--during-seconds",
        type=float,
        default=None,
        help="stop each cleanup after this long; its time is then the whole cleanup's at its pace",
    )
    parser.add_argument("--noop", action="store_true", help="the cold no-op runs instead")
    parser.add_argument("--keep", action="store_true", help="--noop: keep the cleaned copy, and reuse one kept before")
    parser.add_argument(
        "--json-out", metavar="FILE", help="write the raw numbers and the ratios to FILE (bench.summary)"
    )
    args = parser.parse_args(argv)
    lab = labctl.lab_settings()
    before, threshold = template_threshold(lab)
    if args.noop:
        write_json(args.json_out, run_noop(lab, args, before, threshold))
        return 0
    contenders = args.contenders.split(",")
    # The tree at --today-commit only when `today` runs: it is a copy of plugins/ to remove.
    today_dir = today_tree(args.today_commit) if "today" in contenders else None
    rows = []
    for round_no in range(args.rounds):
        order = contenders[round_no % len(contenders) :] + contenders[: round_no % len(contenders)]
        for contender in order:
            rows.append(run_latency(lab, args, contender, before, threshold, today_dir))
    report_latency(rows)
    write_json(args.json_out, latency_payload(lab, args, rows))
    return 0


def latency_payload(lab, args, rows):
    """Everything bench.summary reads, by contender: the job update's p99 before and during
    each round, their ratios, and each cleanup's time projected to 100,000 jobs."""
    contenders = {}
    for contender in dict.fromkeys(r["contender"] for r in rows):
        mine = [r for r in rows if r["contender"] == contender]
        contenders[contender] = {
            "settings": mine[0]["settings"],
            "seconds": [r["seconds"] for r in mine],
            "jobs": [r["jobs"] for r in mine],
            "seconds_per_100000_jobs": [r["seconds"] * 100000 / max(r["jobs"], 1) for r in mine],
            "p99_during_before": ratio_summary(
                [pct(r[("job update", "during")], 99) for r in mine],
                [pct(r[("job update", "before")], 99) for r in mine],
            ),
        }
    return {
        "benchmark": "fail_jobs_live_bench",
        "mode": "latency",
        "sizes": {"rounds": args.rounds, "rate": args.rate, "template": database_comment(lab, TEMPLATE)},
        "contenders": contenders,
    }


if __name__ == "__main__":
    sys.exit(main())
