"""bench/waldump.py's count of pg_waldump's lines, on lines PostgreSQL 15's
pg_waldump printed on the lab (a non-HOT update, a vacuum's visibility map, a commit)."""

from __future__ import annotations

from bench.waldump import tally_records

LINES = [
    "rmgr: Heap        len (rec/tot):     73/  6949, tx:     201210, lsn: 1D/354447A8, prev 1D/354427E0, "
    "desc: UPDATE off 32 xmax 201210 flags 0x00 ; new off 29 xmax 0, "
    "blkref #0: rel 1663/5/1555784 blk 58 FPW, blkref #1: rel 1663/5/1555784 blk 2",
    "rmgr: Heap        len (rec/tot):    283/   283, tx:     201210, lsn: 1D/35449FD0, prev 1D/35448020, "
    "desc: UPDATE off 30 xmax 201210 flags 0x00 ; new off 30 xmax 0, "
    "blkref #0: rel 1663/5/1555784 blk 58, blkref #1: rel 1663/5/1555784 blk 5",
    "rmgr: Heap2       len (rec/tot):     64/  8256, tx:          0, lsn: 1D/35475810, prev 1D/354757E8, "
    "desc: VISIBLE cutoff xid 201209 flags 0x01, "
    "blkref #0: rel 1663/5/1555784 fork vm blk 0 FPW, blkref #1: rel 1663/5/1555784 blk 0",
    "rmgr: Btree       len (rec/tot):     64/    64, tx:     201204, lsn: 1D/2F851FD0, prev 1D/2F851F00, "
    "desc: INSERT_LEAF off 241, blkref #0: rel 1663/1555730/2662 blk 2",
    "rmgr: Transaction len (rec/tot):     34/    34, tx:     201210, lsn: 1D/354757E8, prev 1D/354757A8, "
    "desc: COMMIT 2026-12-04 19:05:59.095388 UTC",
    "pg_waldump: error: error in WAL record at 1D/35477868: invalid record length",
]


def test_records_count_against_their_first_block_and_full_pages_against_each_block():
    tally = tally_records(LINES)

    assert tally["1555784"] == {"records": 2, "bytes": 6949 + 283, "full_pages": 1}
    assert tally["1555784 vm"] == {"records": 1, "bytes": 8256, "full_pages": 1}
    assert tally["2662"] == {"records": 1, "bytes": 64}
    assert tally["(no block) Transaction"] == {"records": 1, "bytes": 34}
    assert len(tally) == 4
