"""Issue 34, Medium 6: a table lock met outside the batches is waited for within
`row_lock_wait`, not for ever.

The trial of the issue: `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE` held by another session
(as a migration holds it) for 40 s; `--row-lock-wait 5 --lock-wait 5` took 42.5 s (39.5 s
with `--check`), waiting silently in the listing's cursor while it held the advisory lock.
Here the lock is held until the run has ended: the command and the module, real and check
mode, must stop within `row_lock_wait` plus a margin, name the option, the table and the
session that holds it, and change nothing (a pg_dump of the whole database, taken once the
lock is let go, is the one taken before).
"""

from __future__ import annotations

import time

import pytest

from tests.integration import fail_jobs_helpers as h
from tests.integration.test_arvados_fail_jobs_command import before_flag, one_line_reason, options

ROW_LOCK_WAIT = 3.0
# The command's or ansible-playbook's start-up and the checks before the listing, on a
# 2-core host that runs other tests meanwhile. Without the bound the run waits until the
# holder lets go, which this test does only after the run has ended (the run's own timeout).
MARGIN = 12.0


class TableHolder:
    """A session holding `LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE` until closed."""

    def __init__(self, fresh_db):
        self.conn = fresh_db.connect(application_name="migration-in-test")
        self.conn.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
        self.pid = self.conn.info.backend_pid

    def close(self):
        self.conn.rollback()
        self.conn.close()


def assert_names_option_table_and_holder(message, holder):
    assert "a lock on table jobs was not had within row_lock_wait (3 s)" in message, message
    assert "pid %d (user arvados, application migration-in-test) holds ACCESS EXCLUSIVE on jobs" % holder.pid in (
        message
    ), message
    assert "while listing the Running jobs, nothing was changed" in message, message


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_the_command_stops_within_row_lock_wait_behind_a_held_table(fresh_db, lab_env, tmp_path, check, driver):
    # Under psycopg2 the failed DECLARE's cursor could not be closed, and that error
    # replaced the lock timeout's message: both drivers are run.
    lab_env = dict(lab_env, ARVADOS_RECOVERY_PG_DRIVER=driver)
    summary = h.load(fresh_db, running=6, running_after_boot=1)
    dump_before = h.pg_dump(fresh_db, lab_env)
    opts = options(fresh_db, tmp_path, row_lock_wait=ROW_LOCK_WAIT, lock_wait=ROW_LOCK_WAIT)
    holder = TableHolder(fresh_db)
    try:
        began = time.monotonic()
        completed = h.run_cli(
            lab_env, tmp_path, opts, before_flag(summary) + (["--check"] if check else []), timeout=90
        )
        elapsed = time.monotonic() - began
        reason = one_line_reason(completed)
        assert_names_option_table_and_holder(reason, holder)
    finally:
        holder.close()
    print("held table, command%s: %.1f s" % (" --check" if check else "", elapsed))
    assert elapsed < ROW_LOCK_WAIT + MARGIN, elapsed
    assert h.pg_dump(fresh_db, lab_env) == dump_before
    # The lock let go, the same options do the work at once: the advisory lock was released.
    if not check:
        result = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
        assert result["failed_jobs"] == sorted(summary.running_before_boot)


@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_the_module_stops_within_row_lock_wait_behind_a_held_table(fresh_db, lab_env, tmp_path, check):
    summary = h.load(fresh_db, running=6, running_after_boot=1)
    dump_before = h.pg_dump(fresh_db, lab_env)
    args = dict(
        options(fresh_db, tmp_path, row_lock_wait=ROW_LOCK_WAIT, lock_wait=ROW_LOCK_WAIT),
        before="@%d" % h.boot_epoch(summary),
    )
    holder = TableHolder(fresh_db)
    try:
        began = time.monotonic()
        result = h.run_module(lab_env, tmp_path, args, check=check)
        elapsed = time.monotonic() - began
        assert result.get("failed") is True, result
        assert_names_option_table_and_holder(result["msg"], holder)
    finally:
        holder.close()
    print("held table, module%s: %.1f s" % (" in check mode" if check else "", elapsed))
    assert elapsed < ROW_LOCK_WAIT + MARGIN, elapsed
    assert h.pg_dump(fresh_db, lab_env) == dump_before
