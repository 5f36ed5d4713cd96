"""What each benchmark writes for `bench.summary` (`--json-out FILE`): its raw numbers and
the ratios it computed, so that the summary judges the numbers the benchmark printed and
never recomputes them its own way."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def ratio_summary(tops: list[float], bottoms: list[float]) -> dict[str, object]:
    """`tops` over `bottoms`, paired by round (the same index).

    "median" is the median of the per-round ratios, the one the summary judges: the two
    sides of a round ran minutes apart under the same load, so each round's ratio cancels
    the machine's drift that the medians of each side taken apart would keep.
    "of_medians" is there for comparison with older reports."""
    if not tops or len(tops) != len(bottoms):
        raise ValueError("ratio_summary needs rounds paired one to one, not %d and %d" % (len(tops), len(bottoms)))
    rounds = [top / bottom for top, bottom in zip(tops, bottoms, strict=True)]
    return {
        "rounds": rounds,
        "median": statistics.median(rounds),
        "of_medians": statistics.median(tops) / statistics.median(bottoms),
        "top_median": statistics.median(tops),
        "bottom_median": statistics.median(bottoms),
    }


def write_json(path: str | None, payload: dict[str, object]) -> None:
    """Written whole to a temporary name and renamed, so that a reader never sees half of it."""
    if not path:
        return
    target = Path(path)
    partial = target.with_name(target.name + ".part")
    partial.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    partial.replace(target)
