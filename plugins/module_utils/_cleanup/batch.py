# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One batch's transaction: lock, re-check, change the jobs, revoke their tokens, write
the log rows; and the run's one budget of waiting on locks, which the batches spend."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Set

from .._common.uuids import system_user_uuid
from .._database.driver import SQLSTATE_LOCK_TIMEOUT, Connection, connection_lost, sqlstate_of
from .logs import TokenUpdate, insert_logs
from .options import CleanupOptions
from .result import BatchOutcome
from .serialized import LoadedTexts, is_data_exception
from .sql import (
    READ_TABLES,
    SQL_BATCH_JOBS,
    SQL_COUNT_TASKS,
    SQL_DELETE_TASKS,
    SQL_FAIL_JOBS,
    SQL_FAIL_UNRUNNABLE,
    SQL_LOCK_JOBS,
    SQL_LOCK_TASKS,
    SQL_REQUEUE_JOBS,
    SQL_REVOKE_TOKENS,
    SQL_SET_LOCAL,
    SQL_SETTINGS_KB,
    TASK_TABLE,
    TOKEN_TABLE,
    WRITTEN_TABLES,
    BatchJob,
)
from .tokens import TokenOwners, TokenPlan, lock_tokens, plan_tokens

# After its tables are locked a batch waits on no row (SKIP LOCKED), but a few locks
# PostgreSQL takes itself remain: the queue lock of a commit that notifies, a unique index
# entry another transaction is inserting. They are held for moments; this bounds them, and
# a batch that meets the bound is set aside whole like one whose table was locked.
ROW_PHASE_LOCK_TIMEOUT_MS = 500
# lock_timeout is an int of milliseconds.
MAX_LOCK_TIMEOUT_MS = 2147483647


# The jobs' trigram search index is a GIN index: new entries go to a pending list, merged
# into the index when the list outgrows gin_pending_list_limit (4 MB by default), so with
# the default every batch merges. Each merge rewrites thousands of index pages, and each
# page is written whole to the WAL again after every checkpoint, a WAL that brings the
# next checkpoint sooner: on a million-job table that was a third of the run. Batches but
# the last let the list grow and merge rarely (work_mem is a merge's memory); the last one
# has the server's own limit again, so its first insert merges what the run left pending
# and the API server's next write does not inherit the merge. Settings are only raised,
# and only for the batch's transaction.
BULK_SETTINGS_KB = (("gin_pending_list_limit", 262144), ("work_mem", 65536))
LAST_BATCH_KEEPS = ("gin_pending_list_limit",)


def bulk_settings(server_kb: Dict[str, int], last_batch: bool) -> Dict[str, str]:
    """The settings (name -> value) a writing batch raises, given the server's, in kB."""
    raised: Dict[str, str] = {}
    for name, wanted in BULK_SETTINGS_KB:
        if last_batch and name in LAST_BATCH_KEEPS:
            continue
        if name in server_kb and server_kb[name] < wanted:
            raised[name] = "%dkB" % wanted
    return raised


class LockBudget:
    """The run's one allowance of `row_lock_wait` seconds for waiting on locks: spent by
    every wait for a table's lock and by the tries again of locked jobs, never renewed
    per batch or per pass."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self.spent = 0.0
        self.clock = clock

    def remaining(self) -> float:
        return max(0.0, self.seconds - self.spent)

    def spend(self, seconds: float) -> None:
        self.spent += max(0.0, seconds)

    def lock_timeout_ms(self) -> int:
        """What is left as PostgreSQL's lock_timeout: at least 1 ms, as 0 means no bound."""
        return min(MAX_LOCK_TIMEOUT_MS, max(1, int(self.remaining() * 1000)))


class BatchTransaction:
    """One batch's transaction on `conn` (autocommit off): committed whole, or, in check
    mode, the same reads and no write, rolled back."""

    def __init__(
        self,
        conn: Connection,
        options: CleanupOptions,
        lock_budget: LockBudget,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.conn = conn
        self.options = options
        self.lock_budget = lock_budget
        self.clock = clock
        # The server's BULK_SETTINGS_KB, read by the first writing batch.
        self._server_kb: Optional[Dict[str, int]] = None
        # Read by the run before its first batch when more follow (_cleanup.tokens).
        self.token_owners: Optional[TokenOwners] = None
        # Called before each writing batch's COMMIT (the run's pace looks then), and the
        # COMMIT's own seconds: the WAL flush an API commit meeting it waits for.
        self.before_commit: Optional[Callable[[], None]] = None
        self.commit_seconds = 0.0
        self._start_batch()

    def _start_batch(self) -> None:
        # The batch's serialized texts the audit rows' SQL does not load itself; the tokens
        # it last tried to expire, where to look for them.
        self.loaded = LoadedTexts()
        self._expiring_token_ids: List[int] = []
        # 0 until the batch commits: a batch rolled back tells the pace nothing.
        self.commit_seconds = 0.0

    def run(self, uuids: List[str], last: bool) -> Optional[BatchOutcome]:
        """The batch's outcome, committed (in check mode rolled back); None when a table's
        lock was not had within the run's lock budget, the batch then rolled back. `last`:
        the batch keeps the server's gin_pending_list_limit (BULK_SETTINGS_KB). A batch whose
        audit properties meet a serialized text PostgreSQL cannot parse is done again with
        that text kept as text (_cleanup.audit_rows)."""
        self._start_batch()
        while True:
            try:
                return self._run_once(uuids, last)
            except BaseException as error:
                if not self._may_be_unparsable_text(error):
                    raise
                # The jobs' texts are found first; the tokens' once the batch gets that far.
                if not self.loaded.keep_unparsable(self.conn, uuids, self._expiring_token_ids):
                    raise

    def _may_be_unparsable_text(self, error: BaseException) -> bool:
        """Whether the write failed on a value (a data exception) in a run that builds
        audit properties, on a connection still there to look with."""
        return (
            is_data_exception(error)
            and self.options.audit_logs
            and not self.options.check_mode
            and not connection_lost(self.conn)
        )

    def _run_once(self, uuids: List[str], last: bool) -> Optional[BatchOutcome]:
        try:
            if self.options.check_mode:
                self.lock_tables_read()
            else:
                self.lock_tables()
                self.raise_bulk_settings(last)
            outcome = self.write(uuids)
            if self.options.check_mode:
                self.conn.rollback()
            else:
                self._commit()
        except BaseException as error:
            if not connection_lost(self.conn):
                self.conn.rollback()
            if sqlstate_of(error) != SQLSTATE_LOCK_TIMEOUT:
                raise
            return None
        return outcome

    def _commit(self) -> None:
        if self.before_commit is not None:
            self.before_commit()
        started = self.clock()
        self.conn.commit()
        self.commit_seconds = self.clock() - started

    def lock_tables(self) -> None:
        """Lock the tables the batch writes and reads before it holds any row, waiting at
        most what is left of the run's lock budget, and spending it; then bound the locks
        PostgreSQL itself takes later (ROW_PHASE_LOCK_TIMEOUT_MS)."""
        written = list(WRITTEN_TABLES)
        read: List[str] = []
        if self.options.revoke_tokens:
            written.append(TOKEN_TABLE)
            read.extend(READ_TABLES)
        if self.options.retry:
            written.append(TASK_TABLE)
        # Ints and the collection's own table names formatted by Python: SET and LOCK
        # take no bound parameters.
        self.conn.execute("SET LOCAL lock_timeout = %d" % self.lock_budget.lock_timeout_ms())
        started = self.clock()
        try:
            self.conn.execute("LOCK TABLE %s IN ROW EXCLUSIVE MODE" % ", ".join(written))
            if read:
                self.conn.execute("LOCK TABLE %s IN ACCESS SHARE MODE" % ", ".join(read))
        finally:
            self.lock_budget.spend(self.clock() - started)
        self.conn.execute("SET LOCAL lock_timeout = %d" % ROW_PHASE_LOCK_TIMEOUT_MS)

    def lock_tables_read(self) -> None:
        """Check mode: lock the tables its reads read, in the ACCESS SHARE mode the reads
        take anyway, within what is left of the run's lock budget, and spending it: behind
        an ACCESS EXCLUSIVE lock (a migration) the batch is then set aside as a real run's
        is, never waited for past row_lock_wait."""
        read = ["jobs"]
        if self.options.revoke_tokens:
            read += [TOKEN_TABLE] + list(READ_TABLES)
        self.conn.execute("SET LOCAL lock_timeout = %d" % self.lock_budget.lock_timeout_ms())
        started = self.clock()
        try:
            self.conn.execute("LOCK TABLE %s IN ACCESS SHARE MODE" % ", ".join(read))
        finally:
            self.lock_budget.spend(self.clock() - started)
        self.conn.execute("SET LOCAL lock_timeout = %d" % ROW_PHASE_LOCK_TIMEOUT_MS)

    def raise_bulk_settings(self, last: bool) -> None:
        """Raise, for this batch's transaction, the settings BULK_SETTINGS_KB explains."""
        if self._server_kb is None:
            names = [name for name, _kb in BULK_SETTINGS_KB]
            self._server_kb = dict(self.conn.execute(SQL_SETTINGS_KB, {"names": names}).fetchall())
        raised = bulk_settings(self._server_kb, last)
        if raised:
            self.conn.execute(SQL_SET_LOCAL, {"names": list(raised), "values": list(raised.values())})

    def write(self, uuids: List[str]) -> BatchOutcome:
        """All of one batch's statements, in the transaction run() ends."""
        if self.options.check_mode:
            return self.predict(uuids)
        opts = self.options
        params = self._params(uuids)
        rows = self.conn.execute(SQL_LOCK_JOBS, params).fetchall()
        locked = [BatchJob(*row[:-1]) for row in rows]
        yaml_jobs = set(row[0] for row in rows if row[-1])
        tokens = plan_tokens(self.conn, opts, locked, uuids, self.token_owners) if opts.revoke_tokens else TokenPlan()
        held, yaml_tokens = lock_tokens(self.conn, tokens.to_revoke)
        set_aside = set(tokens.set_aside_for(held, locked))
        if opts.retry:
            set_aside.update(
                self._jobs_with_held_tasks([j.uuid for j in locked if j.uuid not in set_aside and j.run_as])
            )
        params["uuids"] = [job.uuid for job in locked if job.uuid not in set_aside]
        yaml_kept = sorted(yaml_jobs.intersection(params["uuids"])) if opts.audit_logs else []
        if yaml_kept:
            self.loaded.load_yaml(self.conn, uuids=yaml_kept)
            params.update(self.loaded.params())
        jobs: List[BatchJob] = []
        unrunnable: List[BatchJob] = []
        if params["uuids"] and opts.retry:
            jobs = self._jobs(SQL_REQUEUE_JOBS, params)
            unrunnable = self._jobs(SQL_FAIL_UNRUNNABLE, params)
        elif params["uuids"]:
            jobs = self._jobs(SQL_FAIL_JOBS, params)
        ended = jobs + unrunnable
        outcome = self._outcome(uuids, ended, unrunnable, set_aside)
        if not ended:
            return outcome
        outcome = tokens.report(ended, outcome)
        expired: List[TokenUpdate] = []
        if outcome.tokens:
            self._expiring_token_ids = tokens.ids(outcome.tokens)
            yaml_expiring = sorted(yaml_tokens.intersection(self._expiring_token_ids)) if opts.audit_logs else []
            if yaml_expiring:
                self.loaded.load_yaml(self.conn, token_ids=yaml_expiring)
            revoked = self.conn.execute(SQL_REVOKE_TOKENS, self._audit_params({"ids": self._expiring_token_ids}))
            expired = [TokenUpdate(*row) for row in revoked]
            outcome = outcome._replace(tokens=[token.uuid for token in expired])
        if opts.retry and outcome.done:
            self.conn.execute(SQL_DELETE_TASKS, {"uuids": outcome.done})
        logs = insert_logs(self.conn, opts.message, jobs, unrunnable, expired, opts.audit_logs)
        return outcome._replace(logs=logs)

    def predict(self, uuids: List[str]) -> BatchOutcome:
        """Check mode: what write() would do, read without a lock or a write."""
        opts = self.options
        jobs = self._jobs(SQL_BATCH_JOBS, self._params(uuids))
        unrunnable = [job for job in jobs if opts.retry and job.run_as is None]
        outcome = self._outcome(uuids, jobs, unrunnable, set())
        if jobs and opts.revoke_tokens:
            outcome = plan_tokens(self.conn, opts, jobs, uuids, self.token_owners).report(jobs, outcome)
        return outcome

    @staticmethod
    def _outcome(
        uuids: Iterable[str], ended: Iterable[BatchJob], unrunnable: Iterable[BatchJob], set_aside: Set[str]
    ) -> BatchOutcome:
        unrunnable_set = set(job.uuid for job in unrunnable)
        done = [job.uuid for job in ended if job.uuid not in unrunnable_set]
        ended_set = set(job.uuid for job in ended)
        skipped = [u for u in uuids if u not in ended_set and u not in set_aside]
        return BatchOutcome(done, skipped, not_requeued=sorted(unrunnable_set), set_aside=sorted(set_aside))

    def _params(self, uuids: List[str]) -> Dict[str, Any]:
        return self._audit_params(
            {
                "uuids": uuids,
                "before": self.options.db_before,
                "system_user": system_user_uuid(uuids[0][:5]),
            }
        )

    def _audit_params(self, params: Dict[str, Any]) -> Dict[str, Any]:
        """`params` and what the statements that build audit properties take."""
        params.update(audit=bool(self.options.audit_logs), **self.loaded.params())
        return params

    def _jobs(self, statement: str, params: Dict[str, Any]) -> List[BatchJob]:
        return [BatchJob(*row) for row in self.conn.execute(statement, params).fetchall()]

    def _jobs_with_held_tasks(self, uuids: List[str]) -> List[str]:
        """Those of `uuids` with a task another transaction holds: the tasks of the others
        are locked for this batch, to be deleted."""
        if not uuids:
            return []
        counts = dict(self.conn.execute(SQL_COUNT_TASKS, {"uuids": uuids}).fetchall())
        for (job_uuid,) in self.conn.execute(SQL_LOCK_TASKS, {"uuids": uuids}).fetchall():
            counts[job_uuid] -= 1
        return sorted(job_uuid for job_uuid, left in counts.items() if left > 0)
