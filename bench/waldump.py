"""Counting pg_waldump's lines: records, bytes and full-page images per relation file node
(bench.wal_by_relation), apart from the benchmark so that its tests import nothing else."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable

# "rmgr: Btree  len (rec/tot):  64/ 8256, tx: ..., desc: ..., blkref #0: rel 1663/16384/2696 blk 1 FPW"
_RECORD = re.compile(r"^rmgr: (\S+)\s+len \(rec/tot\):\s*\d+/\s*(\d+),")
_BLOCK = re.compile(r"blkref #\d+: rel \d+/\d+/(\d+)(?: fork (\w+))? blk \d+( FPW)?")

Tally = dict[str, dict[str, int]]


def tally_records(lines: Iterable[str]) -> Tally:
    """Per relation file node (and fork), and per resource manager: records, their bytes,
    and the full pages their blocks carry."""
    by_node: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in lines:
        record = _RECORD.match(line)
        if not record:
            continue
        blocks = _BLOCK.findall(line)
        rmgr, size = record.group(1), int(record.group(2))
        first = _node(blocks[0]) if blocks else "(no block) " + rmgr
        by_node[first]["records"] += 1
        by_node[first]["bytes"] += size
        for block in blocks:
            if block[2]:
                by_node[_node(block)]["full_pages"] += 1
    return {node: dict(counts) for node, counts in by_node.items()}


def _node(block: tuple[str, str, str]) -> str:
    filenode, fork, _fpw = block
    return filenode if not fork or fork == "main" else "%s %s" % (filenode, fork)
