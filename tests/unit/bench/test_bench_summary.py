"""bench/summary.py and bench/results.py: the ratios, the targets and the table, from fake
numbers (no benchmark runs, no time is asserted)."""

from __future__ import annotations

import json
import math

import pytest

from bench import results, summary


def fake_ratio(median, top=2.0, bottom=1.0):
    return {
        "rounds": [median],
        "median": median,
        "of_medians": top / bottom,
        "top_median": top,
        "bottom_median": bottom,
    }


def passing_results():
    """What the four benchmarks write when every target holds."""
    return {
        "P2": {
            "ratios": {
                "a/e": fake_ratio(1.1),
                "p/e": fake_ratio(1.2),
                "b/a": fake_ratio(8.5),
                "a/c": fake_ratio(2.0),
            },
            "same_rows": {"compared": ["a", "e", "p"], "same": True},
            "peak_rss_mib": 70.0,
            "noop": {
                "command_s": [0.3, 0.2, 0.21],
                "engine_s": [0.03] * 3,
                "changed": [False] * 3,
                "command_index_s": [0.2, 0.18, 0.19],
            },
        },
        "P6": {"ratios": {"a/b": fake_ratio(1.25)}},
        "P5": {
            "contenders": {
                "live": {"p99_during_before": fake_ratio(1.8, 0.009, 0.005), "seconds_per_100000_jobs": [540.0, 560.0]}
            }
        },
        "P3": {
            "ratios": {"engine/plain, cold": fake_ratio(1.15)},
            "seconds": {"engine_index_cold": [0.08, 0.09, 0.12]},
        },
    }


def by_comparison(rows):
    return {row.comparison: row for row in rows}


def test_ratio_summary_pairs_rounds_and_takes_the_median_of_their_ratios():
    ratio = results.ratio_summary([3.0, 10.0, 4.0], [1.0, 2.0, 4.0])
    assert ratio["rounds"] == [3.0, 5.0, 1.0]
    assert ratio["median"] == 3.0
    # The ratio of the medians differs: 4 / 2.
    assert ratio["of_medians"] == 2.0
    assert (ratio["top_median"], ratio["bottom_median"]) == (4.0, 2.0)


@pytest.mark.parametrize("tops, bottoms", [([], []), ([1.0, 2.0], [1.0])])
def test_ratio_summary_refuses_rounds_that_do_not_pair(tops, bottoms):
    with pytest.raises(ValueError):
        results.ratio_summary(tops, bottoms)


def test_write_json_leaves_the_whole_file_and_no_partial_one(tmp_path):
    target = tmp_path / "out.json"
    results.write_json(str(target), {"ratio": 1.5})
    assert json.loads(target.read_text()) == {"ratio": 1.5}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    results.write_json(None, {"ignored": True})


@pytest.mark.parametrize(
    "target, value, holds",
    [
        (summary.Target("<=", 1.2), 1.2, True),
        (summary.Target("<=", 1.2), 1.21, False),
        (summary.Target(">=", 8), 8.0, True),
        (summary.Target(">=", 8), 7.9, False),
        (summary.Target("<=", 1.2), None, False),
        (summary.Target("<=", 1.2), math.nan, False),
    ],
)
def test_target_holds_at_its_limit_and_never_without_a_number(target, value, holds):
    assert target.holds(value) is holds


def test_target_shows_its_limit_or_its_label():
    assert str(summary.Target("<=", 1.2)) == "≤ 1.2"
    assert str(summary.Target(">=", 8)) == "≥ 8"
    assert str(summary.Target(">=", 1, "yes")) == "yes"
    assert str(summary.Target("<=", 100, unit="MiB")) == "≤ 100 MiB"


def test_every_row_holds_on_passing_numbers():
    rows = summary.all_rows(passing_results())
    assert [row.number for row in rows] == ["P2"] * 6 + ["P6"] + ["P5"] * 2 + ["P3"] * 4
    assert summary.all_hold(rows)
    # (a)/(c) is shown for reference: no target, judged neither way.
    assert [row.comparison for row in rows if row.holds is None] == [
        "(a) / (c) a bare UPDATE (for reference)",
        "no-op, warm: the command, process start included (for reference)",
    ]


def test_a_row_past_its_target_fails_the_whole():
    data = passing_results()
    data["P2"]["ratios"]["a/e"] = fake_ratio(1.3)
    rows = summary.all_rows(data)
    assert by_comparison(rows)["(a) the command / (e) the same writes as plain SQL"].holds is False
    assert not summary.all_hold(rows)


def test_the_judged_ratio_is_the_median_of_the_rounds_not_that_of_the_medians():
    data = passing_results()
    data["P6"]["ratios"]["a/b"] = dict(fake_ratio(1.25), of_medians=1.5)
    (row,) = summary.p6_rows(data["P6"])
    assert row.ratio == 1.25 and row.holds


def test_same_rows_holds_only_when_a_p_and_e_were_compared_and_matched():
    data = passing_results()
    assert summary.p2_rows(data["P2"])[4].holds
    data["P2"]["same_rows"] = {"compared": ["a", "e"], "same": True}
    assert summary.p2_rows(data["P2"])[4].measured == "NO"
    assert summary.p2_rows(data["P2"])[4].holds is False
    data["P2"]["same_rows"] = {"compared": ["a", "e", "p"], "same": False}
    assert summary.p2_rows(data["P2"])[4].holds is False


def test_values_without_a_floor_are_judged_on_themselves():
    data = passing_results()
    data["P2"]["peak_rss_mib"] = 120.0
    data["P5"]["contenders"]["live"]["seconds_per_100000_jobs"] = [900.0]
    data["P2"]["noop"]["command_index_s"] = [0.3, 0.3, 0.2]
    data["P3"]["seconds"]["engine_index_cold"] = [0.2, 0.11, 0.05]
    rows = by_comparison(summary.all_rows(data))
    assert rows["peak RSS of the command"].measured == "120 MiB"
    assert rows["peak RSS of the command"].holds is False
    pace = rows["the live default's pace, projected to 100,000 jobs"]
    assert (pace.measured, pace.holds) == ("15.0 min", False)
    assert rows["no-op, warm, --no-full-scan: the command, process start included"].holds is False
    assert rows["no-op, cold, --no-full-scan: the engine"].holds is False


def test_p5_shows_the_p99s_in_milliseconds():
    (row, _pace) = summary.p5_rows(passing_results()["P5"])
    assert (row.measured, row.floor, row.ratio) == ("9.0 ms", "5.0 ms", 1.8)


def test_a_benchmark_that_wrote_nothing_is_not_measured_and_does_not_hold():
    rows = summary.all_rows({})
    judged = [row for row in rows if row.target is not None]
    assert all(row.measured == "not measured" and row.holds is False for row in judged)
    assert not summary.all_hold(rows)


def test_table_has_one_line_per_row_and_seven_cells_each():
    rows = summary.all_rows(passing_results())
    lines = summary.table(rows).splitlines()
    assert lines[0] == "| # | comparison | measured | floor | ratio | target | holds |"
    assert len(lines) == 2 + len(rows)
    assert all(line.count("|") == 8 for line in lines)
    assert (
        "| P6 | (a) the reconcile read / (b) one squeue + one query | 2.000 s | 1.000 s | 1.25 | ≤ 1.3 | yes |" in lines
    )


def test_a_failing_row_is_marked_in_the_table():
    data = passing_results()
    data["P6"]["ratios"]["a/b"] = fake_ratio(1.6)
    assert "| 1.60 | ≤ 1.3 | **NO** |" in summary.table(summary.p6_rows(data["P6"]))


def test_median_of_even_and_odd_counts():
    assert summary.median([3.0, 1.0, 2.0]) == 2.0
    assert summary.median([4.0, 1.0]) == 2.5
    assert summary.median([]) is None


@pytest.mark.parametrize("data, status", [(passing_results(), 0), ({}, 1)])
def test_main_prints_the_table_and_exits_by_whether_all_hold(monkeypatch, capsys, tmp_path, data, status):
    calls = []

    def fake_run(key, module, argv, log_dir):
        calls.append((key, module, argv))
        return data.get(key)

    monkeypatch.setattr(summary, "run_benchmark", fake_run)
    monkeypatch.setattr(summary, "commit_id", lambda: "abc1234")
    assert summary.main(["--log-dir", str(tmp_path)]) == status
    out = capsys.readouterr().out
    assert "commit abc1234, quick sizes" in out
    assert out.count("\n| P") == 13
    assert [key for key, _module, _argv in calls] == ["P2", "P6", "P5", "P3"]
    # P2 runs the contenders its targets compare, at the quick sizes.
    assert calls[0][2][:2] == ["--contenders", "abcep"] and "20000" in calls[0][2]


def test_full_uses_the_issue_sizes():
    assert "1000000" in summary.SIZES["full"]["P2"]
    assert set(summary.SIZES["full"]) == set(summary.SIZES["quick"]) == {"P2", "P6", "P5", "P3"}
