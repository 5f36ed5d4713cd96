# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""CleanupOptions: its defaults, its values checked by CLEANUP_OPTIONS' table on creation
(before anything is read or written), the log message's limits and the job UUIDs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import (
    CLEANUP_OPTIONS,
    DEFAULT_FAIL_MESSAGE,
    DEFAULT_LOCK_WAIT,
    DEFAULT_RETRY_MESSAGE,
    DEFAULT_ROW_LOCK_WAIT,
    JOB_STATE_FAILED,
    JOB_STATE_QUEUED,
    MAX_SUMMARY_BYTES,
    UNRUNNABLE_NOTE,
    CleanupOptions,
    check_job_uuids,
    check_summary,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import DISPATCH_ATTEMPT_SUMMARY
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.threshold import Threshold
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.option_bounds import (
    MAX_BATCH_SIZE,
    MAX_PG_TIMEOUT_SECONDS,
)

JOB = "zzzzz-8i9sb-0123456789abcde"
OTHER_JOB = "zzzzz-8i9sb-abcdefghij01234"


def test_the_defaults():
    options = CleanupOptions()
    assert options.threshold is None and options.db_threshold is None
    assert options.uuids is None
    assert (options.retry, options.revoke_tokens, options.check_mode, options.diff) == (False, True, False, False)
    assert options.message == DEFAULT_FAIL_MESSAGE
    assert options.target_state == JOB_STATE_FAILED
    assert options.batch_size is None and options.batch_pause is None
    assert (options.lock_wait, options.row_lock_wait) == (DEFAULT_LOCK_WAIT, DEFAULT_ROW_LOCK_WAIT)
    assert options.live == "auto"
    assert options.audit_logs is True and options.full_scan is True and options.keep_uuids is True


def test_the_table_holds_the_defaults_the_object_takes():
    assert CLEANUP_OPTIONS["lock_wait"].default == DEFAULT_LOCK_WAIT
    assert CLEANUP_OPTIONS["row_lock_wait"].default == DEFAULT_ROW_LOCK_WAIT
    assert CLEANUP_OPTIONS["live"].default == "auto"
    assert CLEANUP_OPTIONS["batch_size"].default is None
    assert CLEANUP_OPTIONS["batch_pause"].default is None


def test_retry_queues_and_has_its_own_message():
    options = CleanupOptions(retry=True)
    assert options.target_state == JOB_STATE_QUEUED
    assert options.message == DEFAULT_RETRY_MESSAGE
    assert CleanupOptions(retry=True, message="mine").message == "mine"


def test_uuids_are_kept_once_and_sorted():
    assert CleanupOptions(uuids=[OTHER_JOB, JOB, OTHER_JOB]).uuids == [JOB, OTHER_JOB]
    assert CleanupOptions(uuids=[]).uuids == []


def test_diff_keeps_the_uuids():
    assert CleanupOptions(keep_uuids=False).keep_uuids is False
    assert CleanupOptions(keep_uuids=False, diff=True).keep_uuids is True


def test_values_are_typed_and_checked_by_the_table():
    options = CleanupOptions(batch_size=500, lock_wait=2, live="yes", batch_pause=0)
    assert (options.batch_size, options.lock_wait, options.live, options.batch_pause) == (500, 2.0, True, 0.0)
    assert isinstance(options.lock_wait, float)
    with pytest.raises(RecoveryError, match="^option batch_size must be of type int"):
        CleanupOptions(batch_size="500")
    assert CleanupOptions(live="off").live is False
    assert CleanupOptions(live="AUTO").live == "auto"


@pytest.mark.parametrize(
    "given, message",
    [
        ({"batch_size": 0}, "option batch_size must be at least 1"),
        ({"batch_size": MAX_BATCH_SIZE + 1}, "option batch_size must be at most %d" % MAX_BATCH_SIZE),
        ({"lock_wait": -1.0}, "option lock_wait must be at least 0"),
        ({"row_lock_wait": MAX_PG_TIMEOUT_SECONDS * 2}, "option row_lock_wait must be at most"),
        ({"live": "sometimes"}, "option live must be auto, true or false"),
        ({"batch_pause": float("nan")}, "option batch_pause must be a finite number"),
    ],
)
def test_a_bad_value_is_refused_on_creation(given, message):
    with pytest.raises(RecoveryError, match="^" + message):
        CleanupOptions(**given)


def test_an_empty_message_is_refused():
    # An empty message is taken as none given (the default), one of blanks is refused.
    assert CleanupOptions(message="").message == DEFAULT_FAIL_MESSAGE
    with pytest.raises(RecoveryError, match="^message must not be empty$"):
        CleanupOptions(message="   ")


def test_the_threshold_goes_to_the_database_as_naive_utc():
    instant = datetime(2026, 12, 4, 10, 30, tzinfo=timezone(timedelta(hours=2)))
    options = CleanupOptions(threshold=Threshold(instant, "given", "2026-12-04T10:30+02:00"))
    assert options.db_threshold == datetime(2026, 12, 4, 8, 30)


def test_a_summary_up_to_the_index_bound_is_taken():
    check_summary("x" * MAX_SUMMARY_BYTES, retry=False)
    check_summary("x" * (MAX_SUMMARY_BYTES - len(UNRUNNABLE_NOTE)), retry=True)


def test_a_longer_summary_is_refused_with_its_size_in_bytes():
    with pytest.raises(
        RecoveryError, match="is %d bytes of UTF-8, more than the %d" % (MAX_SUMMARY_BYTES + 1, MAX_SUMMARY_BYTES)
    ):
        check_summary("x" * (MAX_SUMMARY_BYTES + 1), retry=False)
    # Two bytes a character: half as many characters reach the bound.
    with pytest.raises(RecoveryError, match="is %d bytes" % (MAX_SUMMARY_BYTES + 2)):
        CleanupOptions(message="é" * (MAX_SUMMARY_BYTES // 2 + 1))


def test_retry_counts_the_note_of_a_job_failed_instead():
    note = len(UNRUNNABLE_NOTE.encode("utf-8"))
    message = "x" * (MAX_SUMMARY_BYTES - note + 1)
    check_summary(message, retry=False)
    with pytest.raises(
        RecoveryError, match="more than the %d .* with retry .*a %d-byte note" % (MAX_SUMMARY_BYTES - note, note)
    ):
        check_summary(message, retry=True)


def test_a_message_that_reads_as_a_dispatch_attempt_is_refused():
    with pytest.raises(RecoveryError, match="must not start with"):
        CleanupOptions(message=DISPATCH_ATTEMPT_SUMMARY + " by hand")


def test_a_message_postgresql_cannot_store_is_refused():
    with pytest.raises(RecoveryError, match="log_message"):
        CleanupOptions(message="nul \x00 byte")


def test_job_uuids_only():
    check_job_uuids([JOB, OTHER_JOB])
    with pytest.raises(RecoveryError, match=r"^not Arvados job UUIDs \(<prefix>-8i9sb-<15 chars>\): "):
        check_job_uuids([JOB, "zzzzz-dz642-0123456789abcde"])
    with pytest.raises(RecoveryError) as refused:
        CleanupOptions(uuids=["x%d" % n for n in range(12)])
    # The first ten (of the UUIDs sorted) are named, not all twelve.
    assert str(refused.value).endswith(": 'x0', 'x1', 'x10', 'x11', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7'")
