# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""A cancel call's messages as they come, each client's latest error, and the failure
that ends the call."""

from __future__ import annotations

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.log import CallLog
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import CancelRequest
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock

JOB = "zzzzz-8i9sb-000000000000001"


def call_log(**options):
    clock = FakeClock()
    return CallLog(CancelRequest(names=[JOB], **options), clock), clock


def test_each_clients_errors_are_written_at_most_once_per_log_interval():
    log, clock = call_log(log_interval=30.0)
    log.failed("squeue", "down", "squeue failed: down")
    log.failed("scancel", "down", "scancel of 1 job(s) failed: down")
    clock.sleep(29.0)
    log.failed("squeue", "still down", "squeue failed: still down")
    clock.sleep(1.0)
    log.failed("squeue", "down again", "squeue failed: down again")
    assert log.messages == ["squeue failed: down", "scancel of 1 job(s) failed: down", "squeue failed: down again"]


def test_the_result_names_the_latest_error_of_each_client_squeue_first():
    log, _clock = call_log()
    log.failed("scancel", "refused")
    log.failed("squeue", "timed out")
    assert log.slurm_error() == "timed out; refused" and log.messages == []
    log.succeeded("squeue")
    assert log.last_error("squeue") == "" and log.slurm_error() == "refused"


def test_notes_are_kept_in_order():
    log, _clock = call_log()
    log.note("one")
    log.failed("squeue", "e", "two")
    log.note("three")
    assert log.messages == ["one", "two", "three"]


def test_the_first_permanent_failure_ends_the_call_with_its_settings():
    log, _clock = call_log(scancel_path="/opt/slurm/bin/scancel", clusters="c1")
    log.note_permanent("")
    assert log.permanent == ""
    log.note_permanent("scancel refused its command line: bad")
    log.note_permanent("squeue exited with status 1 and printed nothing")
    assert log.permanent == (
        "scancel refused its command line: bad (scancel_path=/opt/slurm/bin/scancel, clusters=c1); not tried again"
    )
