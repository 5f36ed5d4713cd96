# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A result as one line of JSON, in pieces: the text of ``json.dumps(value,
sort_keys=True, default=str)``, byte for byte, without ever holding all of it.

Why: on the 1M-job benchmark the watch's result is 105,500 orphans, 51 MB of JSON; built
whole by ``json.dumps`` it was the watch's peak heap (148 MiB against the read's 97.7,
bench/README.md). ``json.dump`` and ``JSONEncoder.iterencode`` stream, but in Python's pure
Python encoder, several times slower than the C one that ``json.dumps`` (without
``indent``) uses. So the big lists are encoded here a slice at a time by the C encoder,
and the dicts around them key by key: the memory is one slice's text, the speed the C
encoder's.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, Set

# Entries per slice of a list: about 500 bytes each in a reconcile result, so some
# 0.5 MB of text at a time, and 100 C encoder calls for 100,000 orphans.
SLICE_ITEMS = 1000
# json.dumps' own separators on one line.
ITEM_SEPARATOR = ", "
KEY_SEPARATOR = ": "


def json_pieces(value: Any, slice_items: int = SLICE_ITEMS) -> Iterator[str]:
    """The pieces whose concatenation is ``json.dumps(value, sort_keys=True,
    default=str)``. A circular reference raises ValueError, as json's does."""
    if slice_items < 1:
        raise ValueError("slice_items must be at least 1, not %r" % slice_items)
    encoder = json.JSONEncoder(sort_keys=True, default=str)
    return _pieces(value, encoder, slice_items, set())


def _pieces(value: Any, encoder: json.JSONEncoder, slice_items: int, markers: Set[int]) -> Iterator[str]:
    # json's own checks, in its order: a str (or subclass) is never a container to it, a
    # dict subclass is a dict, a tuple a list; anything else it encodes whole.
    if isinstance(value, dict) and value and all(isinstance(key, str) for key in value):
        yield from _guarded(value, markers, _dict_pieces(value, encoder, slice_items, markers))
    elif isinstance(value, (list, tuple)) and len(value) > slice_items:
        yield from _guarded(value, markers, _list_pieces(value, encoder, slice_items))
    else:
        # Non-str keys (json turns 1, 2.5, True, None into strings and sorts the original
        # keys) and small containers: the C encoder as json.dumps calls it.
        yield encoder.encode(value)


def _guarded(container: Any, markers: Set[int], pieces: Iterator[str]) -> Iterator[str]:
    """The container's pieces, refusing a container inside itself as json.dumps does (it
    would otherwise recurse until RecursionError)."""
    marker = id(container)
    if marker in markers:
        raise ValueError("Circular reference detected")
    markers.add(marker)
    try:
        yield from pieces
    finally:
        markers.discard(marker)


def _dict_pieces(
    value: Dict[str, Any], encoder: json.JSONEncoder, slice_items: int, markers: Set[int]
) -> Iterator[str]:
    yield "{"
    for index, key in enumerate(sorted(value)):
        yield (ITEM_SEPARATOR if index else "") + encoder.encode(key) + KEY_SEPARATOR
        yield from _pieces(value[key], encoder, slice_items, markers)
    yield "}"


def _list_pieces(value: Any, encoder: json.JSONEncoder, slice_items: int) -> Iterator[str]:
    yield "["
    for start in range(0, len(value), slice_items):
        if start:
            yield ITEM_SEPARATOR
        # A slice's "[a, b]" without its brackets: its items, as json.dumps separates them.
        yield encoder.encode(value[start : start + slice_items])[1:-1]
    yield "]"
