# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.queue import (
    FINISHED_STATES,
    JOB_LISTING,
    JOB_NODES_LISTING,
    LEAVING_STATES,
    MAX_NAME_FILTER_CHARS,
    PENDING_STATES,
    RUNNING_STATES,
    QueueEntry,
    SlurmJob,
    client_environment,
    has_header,
    parse_squeue,
    read_listing,
    select_requested,
    squeue_command,
)

A = "zzzzz-8i9sb-aaaaaaaaaaaaaaa"
B = "zzzzz-8i9sb-bbbbbbbbbbbbbbb"
SQUEUE_BASE = ["squeue", "--all", "--array", "--format=%i|%T|%u|%j"]


def test_names_alone_are_filtered_by_squeue_in_one_call():
    assert squeue_command("squeue", [A, B], [], None) == SQUEUE_BASE + ["--name=%s,%s" % (A, B)]


def test_with_job_ids_the_whole_queue_is_listed_because_squeue_would_and_the_filters():
    assert squeue_command("squeue", [A], ["12"], None) == SQUEUE_BASE
    assert squeue_command("squeue", [], ["12", "13"], None) == SQUEUE_BASE


def test_a_name_list_too_long_for_one_argument_falls_back_to_the_whole_queue():
    names = ["zzzzz-8i9sb-%015d" % number for number in range(MAX_NAME_FILTER_CHARS // 27 + 1)]
    assert squeue_command("squeue", names, [], None) == SQUEUE_BASE


def test_clusters_go_to_both_commands():
    assert squeue_command("/usr/bin/squeue", [A], [], "east")[-2:] == ["--clusters=east", "--name=" + A]


def test_parse_keeps_a_name_holding_the_separator_and_skips_cluster_headers():
    stdout = "CLUSTER: east\n12|RUNNING|crunch|%s\n13_4|PENDING|bob|odd|name\n\n" % A
    assert parse_squeue(stdout) == [
        QueueEntry("12", "RUNNING", "crunch", A),
        QueueEntry("13_4", "PENDING", "bob", "odd|name"),
    ]


def test_parse_splits_lines_on_newline_only():
    stdout = "12|RUNNING|crunch|odd\x1cname\n13|PENDING|crunch|%s\n" % A
    assert [entry.job_id for entry in parse_squeue(stdout)] == ["12", "13"]


def test_the_header_is_asked_for_and_skipped_where_the_listing_reads_it():
    stdout = "CLUSTER: east\nJOBID|STATE|USER|NAME\n12|RUNNING|crunch|%s\n" % A
    assert read_listing(stdout, JOB_LISTING) == parse_squeue(stdout) == [QueueEntry("12", "RUNNING", "crunch", A)]
    assert has_header(stdout) and not has_header("12|RUNNING|crunch|%s\n" % A)
    assert "--noheader" not in squeue_command("squeue", [A], [], None)


def test_the_nodes_listing_is_every_job_with_its_nodes_and_no_header():
    assert squeue_command("/usr/bin/squeue", listing=JOB_NODES_LISTING) == [
        "/usr/bin/squeue",
        "--noheader",
        "--all",
        "--array",
        "--format=%i|%T|%u|%N|%j",
    ]
    assert squeue_command("squeue", clusters="east", listing=JOB_NODES_LISTING)[-1] == "--clusters=east"


def test_the_nodes_listing_reads_nodes_with_commas_and_a_name_holding_the_separator():
    stdout = "CLUSTER: east\n9|RUNNING|crunch|c[1-3],d4|%s\r\n10|PENDING|bob||odd|name\n\n" % A
    assert read_listing(stdout, JOB_NODES_LISTING) == [
        SlurmJob("9", "RUNNING", "crunch", "c[1-3],d4", A),
        SlurmJob("10", "PENDING", "bob", "", "odd|name"),
    ]
    # A line of the other form is no job of this one.
    assert read_listing("12|RUNNING|crunch|%s\n" % A, JOB_NODES_LISTING) == []


@pytest.mark.parametrize(
    "requested, listed, selected",
    [
        ("12", "12", True),
        ("12", "12_3", True),
        ("12_3", "12_3", True),
        ("12_3", "12", False),
        ("1", "12_3", False),
        ("12_3", "12_30", False),
    ],
)
def test_a_bare_job_id_covers_the_tasks_of_its_array(requested, listed, selected):
    entry = QueueEntry(listed, "PENDING", "crunch", "array")
    assert select_requested([entry], [], [requested]) == ([entry] if selected else [])


def test_select_by_name_or_id_and_ignore_finished_jobs():
    entries = [
        QueueEntry("1", "RUNNING", "crunch", A),
        QueueEntry("2", "PENDING", "crunch", "other"),
        QueueEntry("3_1", "PENDING", "crunch", "array"),
        QueueEntry("4", "CANCELLED", "crunch", B),
        QueueEntry("5", "COMPLETING", "crunch", B),
    ]
    selected = select_requested(entries, [A, B], ["3"])
    assert [entry.job_id for entry in selected] == ["1", "3_1", "5"]


def test_state_groups():
    assert QueueEntry("1", "PENDING", "u", A).is_pending
    assert QueueEntry("1", "REQUEUE_HOLD", "u", A).is_pending
    assert not QueueEntry("1", "RUNNING", "u", A).is_pending
    assert QueueEntry("1", "COMPLETING", "u", A).is_leaving
    assert not QueueEntry("1", "COMPLETED", "u", A).is_queued
    assert QueueEntry("1", "SUSPENDED", "u", A).is_queued


def test_client_environment_forces_c_locale_and_drops_variables_that_change_the_clients():
    env = client_environment(
        {
            "SLURM_CONF": "/etc/slurm/lab.conf",
            "SQUEUE_NAMES": "x",
            "SCANCEL_STATE": "running",
            "LC_ALL": "de_DE",
            "PATH": "/bin",
        }
    )
    assert env == {"SLURM_CONF": "/etc/slurm/lab.conf", "LC_ALL": "C", "PATH": "/bin"}


def test_diff_lines_read_like_squeue():
    assert QueueEntry("12", "RUNNING", "crunch", A).as_line() == "12 %s RUNNING crunch" % A


# What job_state_string() in src/common/slurm_protocol_defs.c can print, read at each tag
# (`git show <tag>:src/common/slurm_protocol_defs.c`); squeue's %T prints it.
_STATES_22_05 = (
    "COMPLETING STAGE_OUT CONFIGURING RESIZING REQUEUED REQUEUE_FED REQUEUE_HOLD SPECIAL_EXIT STOPPED REVOKED "
    "RESV_DEL_HOLD SIGNALING PENDING RUNNING SUSPENDED COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED "
    "BOOT_FAIL DEADLINE OUT_OF_MEMORY"
).split()
SQUEUE_STATES_BY_RELEASE = {
    "slurm-20-11-9-1": _STATES_22_05 + ["REQUEUED_CRON"],
    # Unchanged through 23.11, 24.05, 24.11 and 25.05.
    "slurm-22-05-8-1": _STATES_22_05,
    "slurm-25-11-7-1": _STATES_22_05 + ["EXPEDITING"],
}
CLASSES = {
    "pending": PENDING_STATES,
    "running": RUNNING_STATES,
    "suspended": frozenset(("SUSPENDED",)),
    "leaving": LEAVING_STATES,
    "finished": FINISHED_STATES,
}


@pytest.mark.parametrize("release", sorted(SQUEUE_STATES_BY_RELEASE))
def test_every_state_squeue_prints_is_classed_once(release):
    classes_of = {
        state: [name for name, states in CLASSES.items() if state in states]
        for state in SQUEUE_STATES_BY_RELEASE[release]
    }
    assert {state: names for state, names in classes_of.items() if len(names) != 1} == {}


@pytest.mark.parametrize(
    "state, pending, suspended, leaving, queued",
    [
        # 25.11's expedited requeue: pending underneath, so scancel --state=PENDING takes it.
        ("EXPEDITING", True, False, False, True),
        ("REQUEUED_CRON", True, False, False, True),
        ("CONFIGURING", False, False, False, True),
        ("SIGNALING", False, False, False, True),
        ("STOPPED", False, False, False, True),
        ("SUSPENDED", False, True, False, True),
        ("STAGE_OUT", False, False, True, True),
        ("OUT_OF_MEMORY", False, False, False, False),
        # A name a later Slurm may add is taken for a running job's.
        ("SOME_NEW_FLAG", False, False, False, True),
    ],
)
def test_each_state_is_handled_as_its_base_state(state, pending, suspended, leaving, queued):
    entry = QueueEntry("1", state, "u", A)
    assert (entry.is_pending, entry.is_suspended, entry.is_leaving, entry.is_queued) == (
        pending,
        suspended,
        leaving,
        queued,
    )
