"""Which relations take a cleanup's WAL: each contender of fail_jobs_bench run once on a
fresh copy of its template, its WAL kept (wal_keep_size raised for the run, then reset)
and read back with pg_waldump, every record counted against the relation of its first
block, full-page images against the relation of each block written whole.

Issue 40 asks where the command's time goes beside the floor (e); the bench says (a)
writes more WAL, nearly all of it full pages. This says whose pages, so that the next
change aims at a relation and an access order, not at the total.

    .venv/bin/python -m bench.wal_by_relation                       # (a) and (e)
    .venv/bin/python -m bench.wal_by_relation --contenders a --code-dir ../other-tree
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import fail_jobs_bench, plain_sql_cleanup  # noqa: E402 pylint: disable=wrong-import-position
from bench.waldump import Tally, tally_records  # noqa: E402 pylint: disable=wrong-import-position
from lab import labctl  # noqa: E402 pylint: disable=wrong-import-position

PG_WALDUMP = "/usr/lib/postgresql/15/bin/pg_waldump"


def relation_names(lab, name: str) -> dict[str, str]:
    """File node -> relation name (a table's TOAST and indexes named after it)."""
    with psycopg.connect(**lab.connection(name)) as conn:
        rows = conn.execute(
            "SELECT pg_relation_filenode(c.oid)::text, c.relname || COALESCE(' (toast of ' || o.relname || ')', '')"
            " FROM pg_class c LEFT JOIN pg_class o ON o.reltoastrelid = c.oid"
            " WHERE pg_relation_filenode(c.oid) IS NOT NULL"
        ).fetchall()
    return dict(rows)


def wal_dir(lab) -> Path:
    with fail_jobs_bench.superuser(lab) as conn:
        return Path(conn.execute("SHOW data_directory").fetchone()[0]) / "pg_wal"


def keep_wal(lab, size: str) -> None:
    with fail_jobs_bench.superuser(lab) as conn:
        if size:
            conn.execute("ALTER SYSTEM SET wal_keep_size = %s" % psycopg.sql.Literal(size).as_string(conn))
        else:
            conn.execute("ALTER SYSTEM RESET wal_keep_size")
        conn.execute("SELECT pg_reload_conf()")


def run_one(lab, contender: str, args, before: str, threshold) -> tuple[float, int, str, str, str]:
    """(seconds, jobs, start LSN, end LSN, the copy's name) of one contender on a fresh copy."""
    name = "bench_wal_%s" % contender
    fail_jobs_bench.clone(lab, name, fail_jobs_bench.TEMPLATE)
    fail_jobs_bench.warm(lab, name)
    jobs = fail_jobs_bench.running_count(lab, name, threshold)
    fail_jobs_bench.checkpoint(lab)
    start = fail_jobs_bench.server_counters(lab)[0]
    began = time.monotonic()
    if contender == "a":
        argv, env, options_file = fail_jobs_bench.command_line(
            lab, name, before, args.batch_size, code_dir=Path(args.code_dir).resolve()
        )
        child = subprocess.run(argv, cwd=args.code_dir, env=env, capture_output=True, text=True, check=False)
        Path(options_file).unlink()
        if child.returncode != 0:
            raise SystemExit("arvados-fail-jobs failed: %s" % child.stderr.strip())
    else:
        tokens = plain_sql_cleanup.tokens_the_command_expires(
            lab, fail_jobs_bench.TEMPLATE, before, fail_jobs_bench.MESSAGE
        )
        began = time.monotonic()
        plain_sql_cleanup.plain_sql_cleanup(lab, name, threshold, tokens, fail_jobs_bench.MESSAGE)
    seconds = time.monotonic() - began
    end = fail_jobs_bench.server_counters(lab)[0]
    return seconds, jobs, str(start), str(end), name


def dump(lab, start: str, end: str) -> Tally:
    with subprocess.Popen(
        [PG_WALDUMP, "-p", str(wal_dir(lab)), "-s", start, "-e", end],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as waldump:
        return tally_records(waldump.stdout)


def report(contender: str, seconds: float, jobs: int, tally: Tally, names: dict[str, str], top: int) -> None:
    total_bytes = sum(c.get("bytes", 0) for c in tally.values())
    total_fpw = sum(c.get("full_pages", 0) for c in tally.values())
    print(
        "(%s): %d jobs in %.1f s; WAL %.0f MiB, %.1f KiB a job; %d full pages, %.2f a job"
        % (
            contender,
            jobs,
            seconds,
            total_bytes / 2**20,
            total_bytes / 1024.0 / max(jobs, 1),
            total_fpw,
            total_fpw / max(jobs, 1),
        )
    )
    print("  %-58s %12s %10s %12s" % ("relation", "records", "MiB", "full pages"))
    ranked = sorted(tally.items(), key=lambda item: -item[1].get("bytes", 0))
    for node, counts in ranked[:top]:
        label = names.get(node.split()[0], node)
        if " " in node and not node.startswith("("):
            label += " (%s)" % node.split()[1]
        print(
            "  %-58s %12d %10.1f %12d"
            % (label[:58], counts.get("records", 0), counts.get("bytes", 0) / 2**20, counts.get("full_pages", 0))
        )
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contenders", default="ae", help="of a (the command) and e (plain SQL); default ae")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--code-dir", default=str(REPO), help="the tree whose command (a) runs")
    parser.add_argument("--keep-size", default="32GB", help="wal_keep_size during the runs")
    parser.add_argument("--top", type=int, default=25, help="relations shown per contender")
    args = parser.parse_args(argv)
    lab = labctl.lab_settings()
    if fail_jobs_bench.database_comment(lab, fail_jobs_bench.TEMPLATE) is None:
        parser.error("no template: run python -m bench.fail_jobs_bench --prepare-only first")
    before, threshold = fail_jobs_bench.template_threshold(lab)
    keep_wal(lab, args.keep_size)
    try:
        for contender in args.contenders:
            seconds, jobs, start, end, name = run_one(lab, contender, args, before, threshold)
            names = relation_names(lab, name)
            report(contender, seconds, jobs, dump(lab, start, end), names, args.top)
            fail_jobs_bench.drop(lab, name)
    finally:
        keep_wal(lab, "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
