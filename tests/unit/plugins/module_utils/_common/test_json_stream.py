# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""_common/json_stream.py: the pieces, joined, are json.dumps' text byte for byte, and no piece
holds more than a slice of a big list."""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import json
import tracemalloc

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.json_stream import json_pieces

REASON = "container is Cancelled and its Slurm job still runs: " * 6


class Colour(enum.IntEnum):
    RED = 1


class Opaque:
    def __str__(self):
        return "opaque <%d>" % 7


def orphans(count):
    return [
        {"uuid": "zzzzz-8i9sb-%015d" % number, "state": "Running", "priority": number, "reason": REASON}
        for number in range(count)
    ]


VALUES = [
    None,
    True,
    0,
    -12,
    2**70,
    1.5,
    float("nan"),
    float("inf"),
    "",
    "plain",
    'ünïcödé ✓ \U0001f600 "quoted" \\ \n\t\x00',
    [],
    {},
    (),
    [[]],
    {"": {}},
    {"b": 1, "a": 2, "ä": 3, "A": 4, "10": 5, "9": 6},
    {"orphaned_jobs": orphans(2500), "counts": {"jobs": 2500}, "empty": [], "none": None},
    {"nested": {"deeper": {"list": orphans(1001), "tuple": tuple(range(3003))}}},
    [orphans(3), {"z": [1, [2, [3, {"y": "ÿ"}]]]}],
    list(range(2000)),
    [[number, str(number)] for number in range(1500)],
    # Not JSON: default=str, where json would call it, at every depth.
    {"when": datetime.datetime(2026, 12, 3, 22, 5), "amount": decimal.Decimal("1.10"), "set": {3}},
    [Opaque()] * 1200,
    {"opaque": Opaque(), "bytes": b"\xff", "colour": Colour.RED},
    # json turns these keys into strings and sorts the original keys.
    {1: "one", 2: "two", 10: "ten"},
    {True: 1, False: 2},
    {2.5: "x", 1.5: "y"},
    {"inner": {3: [1, 2], 1: {"a": orphans(2)}}},
    # A dict or list subclass is a dict or a list to json.
    collections.OrderedDict([("z", 1), ("a", orphans(1200))]),
    collections.defaultdict(list, {"k": list(range(1001))}),
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
@pytest.mark.parametrize("slice_items", [1, 2, 7, 1000])
def test_the_pieces_joined_are_json_dumps_text_byte_for_byte(value, slice_items):
    expected = json.dumps(value, sort_keys=True, default=str)
    assert "".join(json_pieces(value, slice_items=slice_items)) == expected


def test_the_default_slice_too_is_byte_for_byte():
    value = {"orphaned_jobs": orphans(3500), "orphaned_containers": orphans(999), "msg": "é"}
    joined = "".join(json_pieces(value))
    assert joined == json.dumps(value, sort_keys=True, default=str)
    assert json.loads(joined) == value


def test_a_big_list_comes_a_slice_at_a_time():
    pieces = list(json_pieces({"orphaned_jobs": orphans(2500)}, slice_items=1000))
    biggest = max(len(piece) for piece in pieces)
    whole = len(json.dumps(orphans(2500)))
    assert biggest < whole / 2
    assert sum(1 for piece in pieces if REASON in piece) == 3


def test_the_heap_holds_a_slice_not_the_whole_text():
    value = {"orphaned_jobs": orphans(20000)}
    whole = len(json.dumps(value, sort_keys=True, default=str))
    tracemalloc.start()
    try:
        written = sum(len(piece) for piece in json_pieces(value))
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == whole
    assert peak < whole / 5


def test_a_circular_reference_fails_as_json_dumps_does():
    looped = {"a": {}}
    looped["a"]["back"] = looped
    listed = list(range(5))
    listed.append(listed)
    for value in (looped, listed):
        with pytest.raises(ValueError, match="Circular reference"):
            json.dumps(value, sort_keys=True, default=str)
        with pytest.raises(ValueError, match="Circular reference"):
            "".join(json_pieces(value, slice_items=2))


def test_the_same_value_twice_is_no_circle():
    shared = orphans(3)
    value = {"first": shared, "second": shared, "third": [shared, shared]}
    assert "".join(json_pieces(value, slice_items=1)) == json.dumps(value, sort_keys=True, default=str)


def test_keys_json_cannot_sort_fail_as_json_dumps_does():
    with pytest.raises(TypeError):
        json.dumps({1: "a", "b": 2}, sort_keys=True)
    with pytest.raises(TypeError):
        "".join(json_pieces({"outer": {1: "a", "b": 2}}))


def test_a_slice_of_no_items_is_refused():
    with pytest.raises(ValueError, match="at least 1"):
        json_pieces([], slice_items=0)
