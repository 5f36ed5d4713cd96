"""Every comparison of issue 40 in one run and one table (`make bench`, `make bench-full`).

Runs, one after the other on the lab (`lab/labctl.py start`), each benchmark with
`--json-out`, reads what each wrote, and prints one markdown table: per comparison what
was measured, its floor, their ratio, the target and whether it holds; above it the date
(UTC), the load average before and after, the commit and the sizes. Exit status 0 when
every row holds, 1 otherwise (everything is printed either way).

    .venv/bin/python -m bench.summary          # quick sizes: a few minutes
    .venv/bin/python -m bench.summary --full   # the issue's sizes: 1,000,000 jobs (an hour or more)

Each benchmark's own output goes to a log in `--log-dir` (a new temporary directory
unless given), whose path is printed: the table says whether, the logs say why.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# The benchmarks' arguments at each size. P2 runs first: it builds the template
# (bench_fail_jobs_template) that P6, P5 and P3 read.
SIZES = {
    "quick": {
        "P2": ["--jobs", "20000", "--running", "2000", "--sample", "1000", "--rounds", "3"],
        "P6": ["--containers", "20000", "--live-containers", "2000", "--slurm-jobs", "500", "--rounds", "5"],
        # 20 s before each run at 10 requests a second: 200 samples for the p99 before.
        "P5": ["--rounds", "2", "--before-seconds", "20"],
        "P3": ["--rounds", "3"],
    },
    "full": {
        "P2": ["--jobs", "1000000", "--running", "100000", "--sample", "10000", "--rounds", "3"],
        "P6": ["--containers", "100000", "--live-containers", "10000", "--slurm-jobs", "5000", "--rounds", "5"],
        "P5": ["--rounds", "2", "--before-seconds", "20"],
        "P3": ["--rounds", "3"],
    },
}

# (key, module, the arguments every size shares): (a), (b), (c), (e) and (p) are what
# P2's targets compare; P5 runs the live default alone, the target being about it.
BENCHMARKS = (
    ("P2", "bench.fail_jobs_bench", ["--contenders", "abcep"]),
    ("P6", "bench.reconcile_bench", ["--jobs-from", "bench_fail_jobs_template"]),
    ("P5", "bench.fail_jobs_live_bench", ["--contenders", "live"]),
    ("P3", "bench.fail_jobs_live_bench", ["--noop"]),
)


@dataclass(frozen=True)
class Target:
    """`ratio` (or the measured value, for a row without a floor) `op` `limit`."""

    op: str
    limit: float
    # Shown in place of "≤ limit" where the value is a yes (1) or a no (0).
    label: str = ""
    # The limit's unit, for a row judged on its value (a ratio has none).
    unit: str = ""

    def holds(self, value: float | None) -> bool:
        if value is None or value != value:  # not measured, or NaN
            return False
        return value <= self.limit if self.op == "<=" else value >= self.limit

    def __str__(self) -> str:
        return self.label or ("%s %g %s" % ("≤" if self.op == "<=" else "≥", self.limit, self.unit)).strip()


@dataclass(frozen=True)
class Row:
    number: str
    comparison: str
    measured: str
    floor: str
    ratio: float | None
    target: Target | None
    # The value judged when the row has no ratio (a time, a size in MiB), else None.
    value: float | None = None

    @property
    def holds(self) -> bool | None:
        """None for a row shown for reference, with no target."""
        if self.target is None:
            return None
        return self.target.holds(self.ratio if self.ratio is not None else self.value)


def ratio_row(number, comparison, ratio, unit, target, scale=1.0) -> Row:
    """A row from a benchmark's ratio_summary (bench/results.py), or "not measured";
    `scale` turns its medians into `unit`'s (1000: seconds shown as ms)."""
    if ratio is None:
        return Row(number, comparison, "not measured", "", None, target)
    return Row(
        number,
        comparison,
        unit % (scale * ratio["top_median"]),
        unit % (scale * ratio["bottom_median"]),
        ratio["median"],
        target,
    )


def value_row(number, comparison, value, unit, target) -> Row:
    """A row judged on its value alone (no floor): a time, a size."""
    measured = "not measured" if value is None else unit % value
    return Row(number, comparison, measured, "", None, target, value)


def median(values):
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def p2_rows(data) -> list[Row]:
    ratios = (data or {}).get("ratios", {})
    same = (data or {}).get("same_rows", {})
    compared = same.get("compared", [])
    same_ok = bool(same.get("same")) and set("ape") <= set(compared)
    ms = "%.3f ms/job"
    return [
        ratio_row("P2", "(a) the command / (e) the same writes as plain SQL", ratios.get("a/e"), ms, Target("<=", 1.2)),
        ratio_row("P2", "(p) the command under psycopg2 / (e)", ratios.get("p/e"), ms, Target("<=", 1.2)),
        ratio_row("P2", "(b) per-row transactions / (a) the command", ratios.get("b/a"), ms, Target(">=", 8)),
        ratio_row("P2", "(a) / (c) a bare UPDATE (for reference)", ratios.get("a/c"), ms, None),
        Row(
            "P2",
            "(a), (p), (e) left the same rows",
            ("yes" if same_ok else "NO") if data else "not measured",
            "",
            None,
            Target(">=", 1, "yes"),
            1.0 if same_ok else 0.0,
        ),
        value_row(
            "P2", "peak RSS of the command", (data or {}).get("peak_rss_mib"), "%.0f MiB", Target("<=", 100, unit="MiB")
        ),
    ]


def p6_rows(data) -> list[Row]:
    ratio = (data or {}).get("ratios", {}).get("a/b")
    return [ratio_row("P6", "(a) the reconcile read / (b) one squeue + one query", ratio, "%.3f s", Target("<=", 1.3))]


def p5_rows(data) -> list[Row]:
    live = (data or {}).get("contenders", {}).get("live", {})
    ratio = live.get("p99_during_before")
    pace = median(live.get("seconds_per_100000_jobs", []))
    return [
        ratio_row("P5", "API job-update p99 during the live default / before", ratio, "%.1f ms", Target("<=", 2), 1000),
        value_row(
            "P5",
            "the live default's pace, projected to 100,000 jobs",
            None if pace is None else pace / 60.0,
            "%.1f min",
            Target("<=", 10, unit="min"),
        ),
    ]


def p3_rows(noop, p2) -> list[Row]:
    """The default no-op reads every Running job (full_scan): its floor is the same read as
    plain SQL, 0.27 s warm on the million-job template, above the issue's 0.25 s, which was
    set on the read by index (`--no-full-scan`); both are shown, each judged on its own."""
    ratio = (noop or {}).get("ratios", {}).get("engine/plain, cold")
    index_cold = median((noop or {}).get("seconds", {}).get("engine_index_cold", []))
    p2_noop = (p2 or {}).get("noop", {})
    command = median(p2_noop.get("command_s", []))
    command_index = median(p2_noop.get("command_index_s", []))
    return [
        ratio_row("P3", "no-op, cold: the engine / the same read as plain SQL", ratio, "%.3f s", Target("<=", 1.2)),
        value_row("P3", "no-op, cold, --no-full-scan: the engine", index_cold, "%.3f s", Target("<=", 0.1, unit="s")),
        value_row(
            "P3",
            "no-op, warm, --no-full-scan: the command, process start included",
            command_index,
            "%.3f s",
            Target("<=", 0.25, unit="s"),
        ),
        value_row("P3", "no-op, warm: the command, process start included (for reference)", command, "%.3f s", None),
    ]


def all_rows(results) -> list[Row]:
    """The table's rows from each benchmark's JSON (None where it wrote none)."""
    return (
        p2_rows(results.get("P2"))
        + p6_rows(results.get("P6"))
        + p5_rows(results.get("P5"))
        + p3_rows(results.get("P3"), results.get("P2"))
    )


def cell_ratio(row: Row) -> str:
    return "" if row.ratio is None else "%.2f" % row.ratio


def cell_holds(row: Row) -> str:
    return {None: "(reference)", True: "yes", False: "**NO**"}[row.holds]


def table(rows: list[Row]) -> str:
    lines = [
        "| # | comparison | measured | floor | ratio | target | holds |",
        "| --- | --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        lines.append(
            "| %s | %s | %s | %s | %s | %s | %s |"
            % (
                row.number,
                row.comparison,
                row.measured,
                row.floor,
                cell_ratio(row),
                "" if row.target is None else str(row.target),
                cell_holds(row),
            )
        )
    return "\n".join(lines)


def all_hold(rows: list[Row]) -> bool:
    return all(row.holds is not False for row in rows)


def header(started: datetime, load_before, load_after, commit: str, size: str, seconds: float) -> str:
    return "%s UTC, commit %s, %s sizes (%s); load average %s before, %s after; %.0f s" % (
        started.strftime("%Y-%m-%d %H:%M"),
        commit,
        size,
        sizes_text(size),
        "/".join("%.2f" % v for v in load_before),
        "/".join("%.2f" % v for v in load_after),
        seconds,
    )


def sizes_text(size: str) -> str:
    return "; ".join("%s %s" % (key, " ".join(argv)) for key, argv in SIZES[size].items())


def commit_id() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def run_benchmark(key, module, argv, log_dir: Path):
    """Runs one benchmark; its JSON, or None when it wrote none (it failed: see its log).
    Its exit status alone decides nothing: P2 exits 1 on different rows, and says so in
    its JSON too."""
    out = log_dir / ("%s.json" % key)
    log = log_dir / ("%s.log" % key)
    print("%s: python -m %s %s (log %s)" % (key, module, " ".join(argv), log), file=sys.stderr, flush=True)
    with log.open("w") as handle:
        subprocess.run(
            [sys.executable, "-m", module] + argv + ["--json-out", str(out)],
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return json.loads(out.read_text()) if out.exists() else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--full", action="store_true", help="the issue's sizes (1,000,000 jobs: an hour or more) in place of quick ones"
    )
    parser.add_argument("--log-dir", help="where each benchmark's output and JSON go (default: a new temporary one)")
    args = parser.parse_args(argv)
    size = "full" if args.full else "quick"
    log_dir = Path(args.log_dir or tempfile.mkdtemp(prefix="bench-summary-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    started, load_before, began = datetime.now(UTC), os.getloadavg(), time.monotonic()
    results = {
        key: run_benchmark(key, module, shared + SIZES[size][key], log_dir) for key, module, shared in BENCHMARKS
    }
    rows = all_rows(results)
    print(header(started, load_before, os.getloadavg(), commit_id(), size, time.monotonic() - began))
    print()
    print(table(rows))
    print()
    print("logs and JSON: %s" % log_dir)
    return 0 if all_hold(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
