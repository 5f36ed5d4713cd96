# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""CleanupOptions: its defaults, its values checked by CLEANUP_OPTIONS' table on creation
(before anything is read or written), the log message's limits and the job UUIDs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.before import Before
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import (
    CLEANUP_OPTIONS,
    DEFAULT_FAIL_MESSAGE,
    DEFAULT_LOCK_WAIT,
    DEFAULT_RETRY_MESSAGE,
    DEFAULT_ROW_LOCK_WAIT,
    JOB_STATE_FAILED,
    MAX_SUMMARY_BYTES,
    UNRUNNABLE_NOTE,
    CleanupOptions,
    check_job_uuids,
    check_summary,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import DISPATCH_ATTEMPT_SUMMARY
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.option_bounds import (
    MAX_BATCH_SIZE,
    MAX_PG_TIMEOUT_SECONDS,
)

JOB = "zzzzz-8i9sb-%015d"


def test_the_defaults():
    options = CleanupOptions()
    assert options.before is None and options.db_before is None
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
        ({"batch_size": MAX_BATCH_SIZE + 1}, "option batch_size must be at most %d" % MAX_BATCH_SIZE),
        ({"row_lock_wait": MAX_PG_TIMEOUT_SECONDS * 2}, "option row_lock_wait must be at most"),
        ({"live": "sometimes"}, "option live must be auto, true or false"),
        ({"batch_pause": float("nan")}, "option batch_pause must be a finite number"),
    ],
)
def test_a_bad_value_is_refused_on_creation(given, message):
    with pytest.raises(RecoveryError, match="^" + message):
        CleanupOptions(**given)


def test_an_empty_message_is_none_given():
    assert CleanupOptions(message="").message == DEFAULT_FAIL_MESSAGE
    assert CleanupOptions(message=None, retry=True).message == DEFAULT_RETRY_MESSAGE


def test_the_threshold_goes_to_the_database_as_naive_utc():
    instant = datetime(2026, 12, 4, 10, 30, tzinfo=timezone(timedelta(hours=2)))
    options = CleanupOptions(before=Before(instant, "given", "2026-12-04T10:30+02:00"))
    assert options.db_before == datetime(2026, 12, 4, 8, 30)


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


def test_a_refusal_names_the_first_ten_bad_uuids():
    check_job_uuids([JOB % 1, JOB % 2])
    with pytest.raises(RecoveryError) as refused:
        CleanupOptions(uuids=["x%d" % n for n in range(12)])
    # The first ten of the UUIDs sorted, not all twelve.
    assert str(refused.value) == (
        "not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): 'x0', 'x1', 'x10', 'x11', 'x2', 'x3', 'x4', 'x5', 'x6', 'x7'"
    )


@pytest.mark.parametrize(
    "batch_size, message",
    [
        (0, "option batch_size must be at least 1, got 0"),
        (-1, "option batch_size must be at least 1, got -1"),
        (True, "option batch_size must be of type int, got True"),
        ("5", "option batch_size must be of type int, got '5'"),
        (2.5, "option batch_size must be of type int, got 2.5"),
    ],
)
def test_batch_size_must_be_a_positive_integer(batch_size, message):
    with pytest.raises(RecoveryError) as raised:
        CleanupOptions(batch_size=batch_size)
    assert str(raised.value) == message


def test_negative_lock_wait_and_blank_message_are_refused():
    with pytest.raises(RecoveryError, match="option lock_wait must be at least 0, got -1.0"):
        CleanupOptions(lock_wait=-1)
    with pytest.raises(RecoveryError, match="message must not be empty"):
        CleanupOptions(message="  \n ")


def test_uuids_must_be_job_uuids_and_are_deduplicated_and_sorted():
    options = CleanupOptions(uuids=[JOB % 2, JOB % 1, JOB % 2])
    assert options.uuids == [JOB % 1, JOB % 2]
    container = "zzzzz-dz642-000000000000001"
    with pytest.raises(RecoveryError) as raised:
        CleanupOptions(uuids=[JOB % 1, container, "zzzzz-8i9sb-short", JOB % 3 + "\n"])
    assert str(raised.value) == (
        "not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): %r, 'zzzzz-8i9sb-short', %r" % (JOB % 3 + "\n", container)
    )


def test_default_messages_and_target_state_follow_retry():
    assert CleanupOptions().message == DEFAULT_FAIL_MESSAGE
    assert CleanupOptions().target_state == "Failed"
    assert CleanupOptions(retry=True).message == DEFAULT_RETRY_MESSAGE
    assert CleanupOptions(retry=True).target_state == "Queued"
    assert CleanupOptions(retry=True, message="mine").message == "mine"
