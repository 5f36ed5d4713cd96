# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The engine's own rules, without a run: which of squeue's names are the cluster's, which
Slurm job is stray, which candidate its re-read confirms. The run that applies them is
test_run.py's."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.engine import (
    CONTAINERS,
    JOBS,
    REREAD_CHUNK_ROWS,
    Candidates,
    VersionsText,
    stray_reason,
    unconfirmed,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.queue import SlurmJob
from tests.unit.plugins.module_utils._reconcile.conftest import (
    CTR_A,
    JOB_A,
    JOB_B,
    JOB_C,
    OTHER,
    P,
    container,
    job,
    line,
    parse_listing,
)

# -- parsing ------------------------------------------------------------------------------


def test_only_exact_uuid_names_of_the_cluster_are_kept():
    listing = parse_listing(
        "\n".join(
            [
                line("1", JOB_A),
                line("2", CTR_A),
                line("3", OTHER),
                line("4", JOB_A + "x"),
                line("5", "zzzzz-xvhdp-aaaaaaaaaaaaaaa"),
                line("6", "ZZZZZ-8i9sb-aaaaaaaaaaaaaaa"),
                line("7", JOB_B, state="CANCELLED"),
                "CLUSTER: east",
                "",
            ]
        ),
        P,
        (JOBS, CONTAINERS),
    )
    assert sorted(listing.by_name) == sorted([JOB_A, CTR_A])
    assert listing.other_clusters == 1
    assert listing.names(JOBS) == [JOB_A]


def test_a_name_holding_the_separator_still_parses():
    listing = parse_listing("9|PENDING|bob||a|b\n", P, (JOBS,))
    assert listing.count() == 0
    assert parse_listing(line("9", JOB_A, nodes="c[1-3],d4"), P, (JOBS,)).by_name[JOB_A] == [
        SlurmJob("9", "RUNNING", "crunch", "c[1-3],d4", JOB_A)
    ]


def test_kinds_not_asked_for_are_ignored():
    listing = parse_listing(line("1", JOB_A) + "\n" + line("2", CTR_A), P, (CONTAINERS,))
    assert list(listing.by_name) == [CTR_A]


# -- strays -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, record, stray",
    [
        (JOBS, job(JOB_A, "Running"), False),
        (JOBS, job(JOB_A, "Queued"), False),
        (JOBS, job(JOB_A, "Complete"), True),
        (JOBS, job(JOB_A, "Failed"), True),
        (JOBS, job(JOB_A, "Cancelled"), True),
        (CONTAINERS, container(CTR_A, "Running"), False),
        (CONTAINERS, container(CTR_A, "Locked"), False),
        # 2.7.4 and 3.2.1 sdk/go/dispatch/dispatch.go: the tracker closes on Queued, and
        # services/crunch-dispatch-slurm/crunch-dispatch-slurm.go runContainer then cancels.
        (CONTAINERS, container(CTR_A, "Queued"), True),
        (CONTAINERS, container(CTR_A, "Running", priority=0), True),
        (CONTAINERS, container(CTR_A, "Complete"), True),
        (CONTAINERS, container(CTR_A, "Cancelled"), True),
    ],
)
def test_which_slurm_jobs_are_stray(kind, record, stray):
    assert (stray_reason(kind, record) is not None) == stray


def test_a_candidate_is_confirmed_only_with_the_version_of_its_first_read():
    first = {JOB_C: "5", JOB_A: "5", JOB_B: "5"}
    # JOB_B was updated (another version), JOB_C is gone: only JOB_A is confirmed.
    assert unconfirmed(first, [[(JOB_B, "6")], [(JOB_A, "5")]]) == {JOB_B, JOB_C}
    assert unconfirmed(first, [[(JOB_C, "5"), (JOB_B, "5")], [(JOB_A, "5")]]) == set()
    # A row read again that was no candidate (its Slurm job was listed) confirms nothing.
    assert unconfirmed({JOB_A: "5"}, [[(JOB_B, "5")]]) == {JOB_A}
    assert first == {JOB_C: "5", JOB_A: "5", JOB_B: "5"}


def _candidates(rows, taken_out=()):
    """A Candidates filled as the first read fills it: rows of (UUID, version, finished)
    in Record's field order, then the listed ones taken out (OrphanSearch)."""
    found = Candidates()
    found.add_rows(
        [(uuid, "Running", None, None, None, finished, False, 600.0, version) for uuid, version, finished in rows]
    )
    for uuid in taken_out:
        del found[uuid]
    return found


def test_the_first_read_keeps_its_unfinished_rows_in_order_and_its_finished_ones_apart():
    found = _candidates([(JOB_C, "5", False), (JOB_A, "6", True), (JOB_B, "7", False)])
    assert found == {JOB_C: "5", JOB_A: "6", JOB_B: "7"}
    assert (found.read_uuids, found.read_versions, found.inconsistent) == ([JOB_C, JOB_B], ["5", "7"], [JOB_A])


@pytest.mark.parametrize(
    "chunks, expected",
    [
        # The same rows in the same order, in other chunks: every candidate confirmed.
        ([[(JOB_C, "5")], [(OTHER, "1"), (JOB_B, "5")]], set()),
        ([[(JOB_C, "5"), (OTHER, "1"), (JOB_B, "5")]], set()),
        # A new live row after them changes nothing.
        ([[(JOB_C, "5"), (OTHER, "1")], [(JOB_B, "5"), (JOB_A, "1")]], set()),
        # Updated: the rest compared one by one, what came before still confirmed.
        ([[(JOB_C, "5")], [(OTHER, "1"), (JOB_B, "6")]], {JOB_B}),
        ([[(JOB_C, "6")], [(OTHER, "1"), (JOB_B, "5")]], {JOB_C}),
        # Gone, or in another order.
        ([[(JOB_C, "5")], [(OTHER, "1")]], {JOB_B}),
        ([[(JOB_B, "5"), (OTHER, "1"), (JOB_C, "5")]], set()),
        ([], {JOB_C, JOB_B}),
    ],
)
def test_a_re_read_in_the_first_read_s_order_confirms_the_same_as_one_compared_row_by_row(chunks, expected):
    # OTHER was read with its Slurm job listed: no candidate, yet read again by the scan.
    found = _candidates([(JOB_C, "5", False), (OTHER, "1", False), (JOB_B, "5", False)], taken_out=[OTHER])
    assert unconfirmed(found, chunks) == expected
    assert unconfirmed(dict(found), chunks) == expected
    # The same rows as the scan gives them, two texts: the same answer.
    texts = [_texts([pair for chunk in chunks for pair in chunk])] if chunks else []
    assert unconfirmed(found, texts) == expected
    assert unconfirmed(dict(found), texts) == expected


def _texts(pairs):
    return VersionsText(",".join(pair[0] for pair in pairs), ",".join(pair[1] for pair in pairs))


def test_texts_that_spell_the_first_read_confirm_it_whole_and_then_the_rows_read_by_uuid():
    found = _candidates([(JOB_C, "5", False), (JOB_A, "6", True), (JOB_B, "7", False)])
    scanned = _texts([(JOB_C, "5"), (JOB_B, "7")])
    assert found.read_texts() == (",".join((JOB_C, JOB_B)), "5,7")
    assert scanned.spells(*found.read_texts(), 2)
    assert unconfirmed(found, [scanned]) == {JOB_A}
    assert unconfirmed(found, [scanned, [(JOB_A, "6")]]) == set()
    assert unconfirmed(found, [scanned, [(JOB_A, "8")]]) == {JOB_A}


def test_texts_give_their_rows_in_chunks_when_they_differ_from_the_first_read():
    uuids = ["zzzzz-8i9sb-%015d" % n for n in range(REREAD_CHUNK_ROWS + 1)]
    texts = _texts([(uuid, "5") for uuid in uuids])
    chunks = list(texts.pair_chunks())
    assert [len(chunk) for chunk in chunks] == [REREAD_CHUNK_ROWS, 1]
    assert chunks[1] == [(uuids[-1], "5")]
    assert texts.spells(",".join(uuids), ",".join(["5"] * len(uuids)), len(uuids))
    assert not texts.spells(",".join(uuids), ",".join(["5"] * REREAD_CHUNK_ROWS + ["6"]), len(uuids))
    assert not texts.spells(",".join(uuids[1:]), ",".join(["5"] * REREAD_CHUNK_ROWS), len(uuids) - 1)


def test_a_uuid_with_a_comma_confirms_nothing_read_as_text():
    # Arvados makes no such UUID; were there one, its texts could not be split row by row.
    odd = JOB_A + ",x"
    found = _candidates([(odd, "5", False), (JOB_B, "5", False)])
    texts = _texts([(odd, "5"), (JOB_B, "5")])
    assert not texts.spells(*found.read_texts(), 2)
    assert list(texts.pair_chunks()) == []
    assert unconfirmed(found, [texts]) == {odd, JOB_B}
    # Read as rows, the same UUID is confirmed as any other.
    assert unconfirmed(found, [[(odd, "5"), (JOB_B, "5")]]) == set()


def test_a_candidate_read_live_with_finished_at_set_is_confirmed_only_by_its_own_re_read():
    # The scan of the unfinished rows cannot see JOB_A; its version comes read by UUID, after.
    found = _candidates([(JOB_C, "5", False), (JOB_A, "6", True), (JOB_B, "7", False)])
    scanned = [[(JOB_C, "5"), (JOB_B, "7")]]
    assert unconfirmed(found, scanned) == {JOB_A}
    assert unconfirmed(found, scanned + [[(JOB_A, "6")]]) == set()
    assert unconfirmed(found, scanned + [[(JOB_A, "8")]]) == {JOB_A}
