# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""scancel's command line per kind of request, its time limit, and what its output says of
each job."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.scancel import (
    CANCEL,
    KIND_ORDER,
    REMOVE_PENDING,
    SIGNAL,
    TERMINATE,
    read_scancel,
    scancel_argv,
    scancel_command,
    scancel_time_limit,
)


def test_clusters_come_before_the_ids():
    assert scancel_command("scancel", ["5"], "east,west", None, False) == ["scancel", "--clusters=east,west", "5"]


def test_scancel_takes_ids_after_its_options():
    assert scancel_command("scancel", ["5", "6_2"], None, None, False) == ["scancel", "5", "6_2"]
    assert scancel_command("scancel", ["5"], None, "TERM", True) == ["scancel", "--signal=TERM", "--batch", "5"]
    assert scancel_command("scancel", ["5"], None, None, False, only_pending=True, ctld=True) == [
        "scancel",
        "--ctld",
        "--state=PENDING",
        "5",
    ]


DENIED = "scancel: error: Kill job error on job id %s: Access/permission denied\n"
MISMATCH = "scancel: error: Kill job error on job id %s: Job state RUNNING != filter state PENDING: Cannot signal job\n"


@pytest.mark.parametrize(
    "kind, ctld, argv",
    [
        (CANCEL, False, ["scancel", "1", "2"]),
        (REMOVE_PENDING, False, ["scancel", "--state=PENDING", "1", "2"]),
        (TERMINATE, False, ["scancel", "--signal=TERM", "--batch", "1", "2"]),
        (SIGNAL, False, ["scancel", "--signal=USR1", "1", "2"]),
        (CANCEL, True, ["scancel", "--ctld", "1", "2"]),
        (TERMINATE, True, ["scancel", "--ctld", "--signal=TERM", "--batch", "1", "2"]),
    ],
)
def test_each_kind_of_request_has_its_command_line(kind, ctld, argv):
    assert scancel_argv("scancel", kind, ["1", "2"], None, ctld, signal="USR1") == argv


def test_signal_and_batch_belong_to_signal_requests_only():
    assert scancel_argv("/s/scancel", SIGNAL, ["7"], "c1,c2", False, "HUP", True) == [
        "/s/scancel",
        "--clusters=c1,c2",
        "--signal=HUP",
        "--batch",
        "7",
    ]
    assert scancel_argv("scancel", CANCEL, ["7"], None, False, "HUP", True) == ["scancel", "7"]


def test_pending_jobs_are_removed_first_and_signals_come_last():
    assert KIND_ORDER == (REMOVE_PENDING, CANCEL, TERMINATE, SIGNAL)


@pytest.mark.parametrize(
    "job_count, time_left, one_request, limit",
    [
        (1, 100.0, False, 10.0),
        (10, 100.0, False, 10.0),
        (11, 100.0, False, 20.0),
        (500, 100.0, False, 100.0),  # 50 rounds of ten requests, cut at the call's deadline
        (500, 3.0, False, 10.0),  # never less than one request's bound
        (500, 100.0, True, 10.0),  # one request for all
    ],
)
def test_the_time_limit_grows_with_the_rounds_of_ten_requests(job_count, time_left, one_request, limit):
    assert scancel_time_limit(job_count, 10.0, time_left, one_request) == limit


def test_what_exited_0_on_the_per_job_path_refused_nothing():
    assert read_scancel(True, DENIED % "1", ["1", "2"], one_request=False) == ({}, set())


def test_the_per_job_path_names_the_ids_slurm_denied_to_this_user():
    assert read_scancel(False, DENIED % "2" + DENIED % "9", ["1", "2"], one_request=False) == ({}, {"2"})


def test_a_denial_naming_no_id_denies_the_whole_call():
    stderr = "scancel: error: Access/permission denied\n"
    assert read_scancel(False, stderr, ["1", "2"], one_request=False) == ({}, {"1", "2"})


def test_one_request_names_each_job_slurm_did_not_take_but_not_one_that_started():
    stderr = DENIED % "1" + MISMATCH % "2" + "scancel: error: Kill job error on job id 3: Job can not be altered now\n"
    refused, denied = read_scancel(True, stderr, ["1", "2", "3"], one_request=True)
    assert refused == {"1": "Access/permission denied", "3": "Job can not be altered now"}
    assert denied == {"1"}


def test_a_failed_one_request_is_read_as_a_failed_call():
    refused, denied = read_scancel(False, "scancel: error: Unable to contact slurm controller\n", ["1"], True)
    assert refused == {} and denied == set()
