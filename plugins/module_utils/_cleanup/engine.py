# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fail or requeue the Arvados jobs a reboot left ``Running``, directly in PostgreSQL.

This is the engine behind the ``arvados_fail_jobs`` module and the ``arvados-fail-jobs``
command. It has no Ansible import: the caller hands it an open connection (_database.driver's), the
options, and optionally a function that makes the jobs' Slurm jobs absent.

How a run goes:

1. The ``Running`` jobs are listed (all of them, or by the index on ``finished_at``: see SQL_RUNNING):
   a list of a batch or less by one plain query (SQL_FIRST_PAGE), a longer one into a
   cursor the server keeps (WITH HOLD), fetched a batch at a time: no snapshot lives
   across batches and memory does not grow with the number of jobs.
2. Jobs that started at or after ``before`` are exempt and reported,
   never touched. A ``Running`` job with no ``started_at`` is an inconsistent row: without
   ``before`` it qualifies like every ``Running`` job; with ``before`` nothing shows that it
   started before that instant, so it is left alone. Either way it is reported as
   ``no_started_at``; to clean it up, name it in ``uuids`` and give no ``before``. Its token
   cannot be told from the user's other tokens, so none is revoked for it.
3. Per batch: the Slurm jobs named after the batch's job UUIDs are made absent first (a
   job must not go on running behind a ``Failed`` or re-``Queued`` row); then one
   transaction locks its tables (the only lock it may wait for, holding no row), locks
   the job rows, tokens and tasks it can (a job whose row, token or task another
   transaction holds is set aside and tried again after the other batches, while the
   run's one budget of ``row_lock_wait`` lasts), re-checks that each job is still
   ``Running`` and still qualifies (others are reported as skipped), revokes the jobs'
   tokens, updates the jobs, deletes their tasks (retry), inserts the ``logs`` rows and
   notifies ``logs`` listeners. Killing the process at any instant leaves every job
   either untouched or completely done; a rerun finishes the rest and changes nothing
   that is done. Before the first Slurm step the database user's privileges are checked
   against what a real run writes (check_privileges), in check mode too.
4. Check mode runs the same reads and no write, so it predicts the jobs, tokens and Slurm
   jobs a real run would touch (not which rows another transaction will hold locked).
5. Live (other sessions on the database, or ``live: true``), the batches merge the trigram
   index's pending list as it outgrows the server's limit, so that the API server's writes
   do not pay for the run's merges; at boot the run lets the list grow and merges it once.

A session-level advisory lock keeps two runs (the boot unit and a playbook) apart.

The parts, each in its own file: the statements (_cleanup.sql), the options
(_cleanup.options), the checks before any change and the advisory lock (_cleanup.checks),
one batch's transaction (_cleanup.batch), the jobs' tokens (_cleanup.tokens), the log
rows (_cleanup.logs) and the result (_cleanup.result). This file is the run: the
listing, the batches' pacing and the tries again of locked jobs.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime
from typing import Any, Callable, Dict, Generator, Iterable, Iterator, List, Optional, Tuple, TypeVar

from .._common.errors import RecoveryError
from .._database.driver import SQLSTATE_LOCK_TIMEOUT, Connection, connection_lost, sqlstate_of
from .._database.settings import APPLICATION_NAME
from .batch import BatchTransaction, LockBudget
from .before import EXEMPT, QUALIFIES, before_against, classify_running_job
from .checks import (
    BLOCKS_READS,
    check_primary,
    check_privileges,
    check_schema,
    lock_holders,
    lock_timeout_message,
    read_server_facts,
    release_advisory_lock,
    take_advisory_lock,
)
from .options import DEFAULT_BATCH_SIZE, CleanupOptions
from .pace import BatchSample, Pace
from .result import BatchOutcome, CleanupResult
from .sql import (
    LISTING_CURSOR,
    ORDER_BY_START,
    ORDER_BY_USER,
    READ_TABLES,
    SQL_FIRST_PAGE,
    SQL_OTHER_SESSIONS,
    SQL_OTHERS_WAITING,
    SQL_RUNNING,
    SQL_STILL_QUALIFYING,
    TASK_TABLE,
    TOKEN_TABLE,
    WHERE_ALL,
    WHERE_UNFINISHED,
    WHERE_UUIDS,
)
from .tokens import TokenOwners

Item = TypeVar("Item")

# The Slurm step: makes the Slurm jobs named after the uuids absent (check mode: says
# which it would), returns the Slurm engine's result.
CancelSlurm = Callable[[List[str], bool], Dict[str, Any]]


def with_last(items: Iterable[Item]) -> Iterator[Tuple[Item, bool]]:
    """(item, is_last) for each item, reading one item ahead."""
    iterator = iter(items)
    try:
        previous = next(iterator)
    except StopIteration:
        return
    for item in iterator:
        yield previous, False
        previous = item
    yield previous, True


# Seconds between the progress lines while locked jobs are waited for.
PROGRESS_WHILE_WAITING = 5.0


def _first(uuids: List[str], shown: int = 5) -> str:
    """A few UUIDs for a progress line, and how many more."""
    text = ", ".join(uuids[:shown])
    return text + (" and %d more" % (len(uuids) - shown) if len(uuids) > shown else "")


def held_by_other_users(uuids: List[str], slurm: Dict[str, Any]) -> List[Dict[str, str]]:
    """{uuid, job_id, user, state} for each Slurm job of another user than the Slurm step's
    (its option slurm_user) named after one of `uuids`: that job runs on, so the job it is
    named after must stay Running (a job is never failed while a Slurm job of its name is
    queued, whoever owns it)."""
    wanted = set(uuids)
    held = []
    for job in slurm.get("skipped_other_user") or ():
        if job.get("name") in wanted:
            held.append({"uuid": job["name"], "job_id": job["job_id"], "user": job["user"], "state": job["state"]})
    return sorted(held, key=lambda job: (job["uuid"], job["job_id"]))


def close_listing(cursor: Any, conn: Connection) -> None:
    """Close the listing's cursor. On a connection that died meanwhile the server dropped
    the cursor with the session, and closing fails: that failure is not raised, as the
    error that ended the run (or the listing) is the one to tell."""
    try:
        cursor.close()
    except Exception:  # pylint: disable=broad-except
        if not connection_lost(conn):
            raise


class JobCleaner:
    """Runs one cleanup on one open connection (_database.driver's), two for a long list.

    `conn` (autocommit off) reads the first page of the Running jobs and works through
    them a batch at a time, a transaction each. Only a list longer than a page needs
    `listing_conn` (switched to autocommit): it holds the list in a cursor WITH HOLD, a page
    fetched per batch (see LISTING_CURSOR). In place of `listing_conn`, `open_listing()`
    may return it when such a list is found: run_fail_jobs opens it only then.

    `cancel_slurm(uuids, check_mode)` makes the Slurm jobs named after `uuids` absent and
    returns the Slurm engine's result as a dict; it raises to stop the run before the
    batch touches the database. `progress(result)` is called after each batch and while
    locked jobs are waited for; `result.notes` then holds lines to say. `clock` and `sleep`
    pace the waits for locked jobs.
    """

    def __init__(
        self,
        conn: Connection,
        listing_conn: Connection,
        options: CleanupOptions,
        cancel_slurm: Optional[CancelSlurm] = None,
        progress: Optional[Callable[[CleanupResult], None]] = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        open_listing: Optional[Callable[[], Connection]] = None,
    ) -> None:
        self.conn = conn
        # Live (the API server up), the batches keep the server's limit: the API server's
        # writes to jobs insert into the same pending list with the server's limit, and the
        # first of them to find the list longer than that merges all of it inside its own
        # statement. A list the run had let grow would so be merged, at the run's cost, by
        # an API request. Measured (bench/README.md), that made the API's updates of jobs
        # wait for seconds; a third session merging beside the run (gin_clean_pending_list)
        # chased the list's tail for minutes with a snapshot open. At boot nobody else
        # writes and the run keeps the list to itself.
        self._keep_gin_limit = False
        self.listing_conn = listing_conn
        self._open_listing = open_listing
        self.options = options
        self.cancel_slurm = cancel_slurm
        self.progress = progress
        self.clock = clock
        self.sleep = sleep
        self.result = CleanupResult(options)
        # What the run is doing, for the message of a database error.
        self.step = "connecting"
        self._batch_under_way = False
        # Jobs found locked by another transaction, to be tried again after the others.
        self._deferred: List[str] = []
        # The run's one allowance for waiting on locks (row_lock_wait).
        self._lock_budget = LockBudget(options.row_lock_wait, clock)
        self.transaction = BatchTransaction(conn, options, self._lock_budget, clock)
        self.transaction.before_commit = self._others_waiting
        # The batches' size and pauses: fixed by the options, or steered live (_cleanup.pace).
        self.pace = Pace(options.batch_size, options.batch_pause, False, DEFAULT_BATCH_SIZE, options.check_mode)
        self.result.pace = self.pace
        self._waiting_seen = 0
        # The jobs of the batch under way whose Slurm step is done: if its transaction
        # fails they are Running without a Slurm job, and the error names them.
        self._slurm_done: List[str] = []
        # The locked jobs of a pass of tries again that its batches have not reached yet.
        self._retrying: List[str] = []

    def run(self) -> CleanupResult:
        try:
            return self._run()
        except Exception as error:
            if sqlstate_of(error) != SQLSTATE_LOCK_TIMEOUT or connection_lost(self.conn):
                raise
            raise RecoveryError(self._lock_timeout_text()) from None

    def _lock_timeout_text(self) -> str:
        """A statement outside a batch waited for a table's lock past row_lock_wait: the
        message names the option, the tables and the sessions that hold them."""
        self.conn.rollback()
        tables = ["jobs"] if self.step == "listing the Running jobs" else list(self._tables_read())
        holders = lock_holders(self.conn, tables, BLOCKS_READS)
        self.conn.rollback()
        return lock_timeout_message(
            "row_lock_wait", self.options.row_lock_wait, tables, holders, self.failure_context()
        )

    def _tables_read(self) -> List[str]:
        tables = ["jobs", "logs"]
        if self.options.revoke_tokens:
            tables += [TOKEN_TABLE] + list(READ_TABLES)
        if self.options.retry:
            tables.append(TASK_TABLE)
        return tables

    def _run(self) -> CleanupResult:
        self._check_and_lock()
        try:
            self._clean()
        finally:
            # A dead session has let go of its lock; trying to unlock it would only put
            # "the connection is lost" in place of the error that says why it died.
            if not connection_lost(self.conn):
                release_advisory_lock(self.conn)
        return self.result

    def _check_and_lock(self) -> None:
        """The session set up, the checks before any change, then the cleanup lock: outside
        a transaction, one round trip each, with no BEGIN and COMMIT around them (issue 40)."""
        opts = self.options
        self.conn.autocommit = True
        try:
            self.step = "setting up the session"
            self._set_up_session(self.conn)
            self.step = "checking the schema, the server and the privileges"
            facts = read_server_facts(self.conn, opts)
            check_schema(facts.columns)
            check_primary(facts.in_recovery)
            opts.before = before_against(opts.before, facts.now)
            check_privileges(facts, opts)
            self.step = "taking the cleanup lock (pg_try_advisory_lock)"
            take_advisory_lock(self.conn, opts.lock_wait)
        finally:
            # Not on a dead session: that would raise in place of the error that says why.
            if not connection_lost(self.conn):
                self.conn.autocommit = False

    def _clean(self) -> None:
        """The run under the cleanup lock: the listing, the batches, the tries again."""
        self.step = "looking for other sessions (live or at boot)"
        self.result.live = self._is_live()
        self._keep_gin_limit = self.result.live
        self.pace.set_live(self.result.live)
        self.step = "listing the Running jobs"
        # Closed here, not by the garbage collector: a generator left suspended by an
        # error would close its server-side cursor later, on a connection closed by
        # then, and Python would print that second error as "Exception ignored".
        with contextlib.closing(self._qualifying_batches()) as batches:
            for batch, last in with_last(batches):
                if not last:
                    self._judge_tokens_once()
                # The last batch merges the trigram index's pending list (see
                # BULK_SETTINGS_KB) even when some of its jobs are deferred: the tries
                # again run with the server's limit.
                started = self.clock()
                self._clean_batch(batch, last)
                self._observe_batch(len(batch), self.clock() - started)
                self._batch_done()
                self._notice_other_sessions()
                pause = self._batch_pause()
                if pause and not last:
                    self.sleep(pause)
                    self.pace.paused(pause)
        self.step = "trying the locked jobs again"
        self._retry_deferred()

    def _judge_tokens_once(self) -> None:
        """Before the first of several batches, who else could own the tokens the run may
        revoke (_cleanup.tokens.TokenOwners): one read instead of one a batch. Not when
        live: the API server and a dispatcher change jobs meanwhile, and a job of the run
        they put back in the queue (a tempfail) holds its token again, which only the
        batch's own look sees."""
        if not self.options.revoke_tokens or self.result.live or self.transaction.token_owners is not None:
            return
        self.step = "reading who else could own the jobs' tokens"
        self.conn.execute(self._lock_timeout_setting())
        self.transaction.token_owners = TokenOwners.read(self.conn, self.options)
        self.conn.rollback()

    def _set_up_session(self, conn: Connection) -> None:
        """The session's settings for the run, in one round trip (in a transaction, the
        caller commits it)."""
        # A generic plan, which psycopg's automatic preparing leads to after a few
        # batches, turns the token look-up into a slow one; custom plans see each batch.
        conn.prepare_threshold = None
        # jit: compiling these short queries costs more than it saves. lock_timeout: no
        # statement of the run waits for a lock longer than row_lock_wait, the checks
        # included (a batch sets its own, LOCAL, from what is left of the budget; the
        # listing's session is set up as it begins, from what is left then): the default,
        # 0, waits for ever, and did, 40 s behind a LOCK TABLE jobs, holding the advisory
        # lock (issue 34).
        conn.execute("SET jit = off; " + self._lock_timeout_setting())

    def _lock_timeout_setting(self) -> str:
        return "SET lock_timeout = %d" % self._lock_budget.lock_timeout_ms()

    def _listing_connection(self) -> Connection:
        if self.listing_conn is None and self._open_listing is not None:
            self.listing_conn = self._open_listing()
        return self.listing_conn

    def _notice_other_sessions(self) -> None:
        """With live=auto, a run that began alone turns live when others connect (the API
        server starting while a boot's run goes): from then on no API write finds a long
        pending list, once the next batch has merged it."""
        if self.options.live == "auto" and not self.result.live and self._is_live():
            self.result.live = self._keep_gin_limit = True
            self.transaction.token_owners = None
            self.pace.set_live(True)
            self._note("other sessions connected to the database: going on as live")

    def _batch_pause(self) -> float:
        """Seconds after the batch just done (Pace: check mode never pauses)."""
        return self.pace.pause()

    def _batch_size(self) -> int:
        return self.pace.batch_size()

    def _others_waiting(self) -> None:
        """Live, just before a batch commits (its WAL being flushed, its rows locked): how
        many other sessions wait for the WAL or a lock, the API's commits queued behind
        the run (Pace halves its rate then). Only sessions of the run's own database role
        show their wait events without pg_read_all_stats: Arvados' API server uses it."""
        self._waiting_seen = 0
        if self.pace.adaptive:
            row = self.conn.execute(SQL_OTHERS_WAITING, {"ours": APPLICATION_NAME}).fetchone()
            self._waiting_seen = row[0]

    def _observe_batch(self, jobs: int, seconds: float) -> None:
        self.pace.observe(BatchSample(jobs, seconds, self.transaction.commit_seconds, self._waiting_seen))

    def _is_live(self) -> bool:
        if self.options.live != "auto":
            return self.options.live
        others = self.conn.execute(SQL_OTHER_SESSIONS, {"ours": APPLICATION_NAME}).fetchone()[0]
        self.conn.rollback()
        return others > 0

    def _batch_done(self) -> None:
        self.result.batches += 1
        self._report()

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(self.result)
        del self.result.notes[:]

    def _note(self, text: str) -> None:
        if self.progress is not None:
            self.result.notes.append(text)

    def failure_context(self) -> str:
        """What a database error interrupted, and what of the work it left done: by name,
        the jobs whose Slurm jobs are gone while their rows still say Running."""
        stranded = self._without_slurm_job()
        if self._batch_under_way and stranded:
            return (
                "the batch under way was rolled back after its Slurm step, so %d job(s) now "
                "have no Slurm job and are still Running: %s; a rerun finishes them"
                % (len(stranded), ", ".join(stranded))
            )
        if self._batch_under_way:
            return "the batch under way was rolled back (a rerun finishes the work)"
        if stranded:
            return (
                "while %s, after %d batch(es) committed whole; %d job(s) have no Slurm job "
                "and are still Running: %s; a rerun finishes them"
                % (self.step, self.result.batches, len(stranded), ", ".join(stranded))
            )
        if self.result.batches:
            return "while %s, after %d batch(es) committed whole (a rerun finishes the work)" % (
                self.step,
                self.result.batches,
            )
        return "while %s, nothing was changed" % self.step

    def _stranded_note(self) -> str:
        """For an error that ends the run before the batch under way changed anything:
        the jobs set aside earlier, whose Slurm jobs are gone already."""
        stranded = self._without_slurm_job()
        if not stranded:
            return ""
        return (
            "; %d job(s) set aside earlier as locked have no Slurm job and are still "
            "Running: %s; a rerun finishes them" % (len(stranded), ", ".join(stranded))
        )

    def _without_slurm_job(self) -> List[str]:
        """The jobs whose Slurm step is done and whose rows no committed batch changed:
        the batch under way's and those set aside as locked."""
        if self.cancel_slurm is None or self.options.check_mode:
            return []
        return sorted(set(self._slurm_done) | set(self._deferred) | set(self._retrying))

    def _listing_query(self) -> Tuple[str, Dict[str, Any]]:
        opts = self.options
        if opts.uuids is not None:
            where = WHERE_UUIDS
        elif opts.full_scan:
            where = WHERE_ALL
        else:
            where = WHERE_UNFINISHED
        # Live, a batch reads its users' tokens itself: by user, few users a batch (SQL_RUNNING).
        order = ORDER_BY_USER if self.result.live else ORDER_BY_START
        return SQL_RUNNING.format(where=where, order=order), {"uuids": opts.uuids}

    def _running_jobs(self) -> Iterator[Tuple[str, Optional[datetime], Optional[datetime]]]:
        """(uuid, started_at, finished_at) of the Running jobs, a page at a time."""
        query, params = self._listing_query()
        size = self._batch_size()
        first = self._first_page(query, params, size)
        if len(first) <= size:
            yield from first
            return
        # More than a page: read through the listing's cursor, within what the wait above left.
        conn = self._listing_connection()
        conn.autocommit = True
        self._set_up_session(conn)
        yield from self._running_jobs_by_cursor(conn, query, params)

    def _first_page(
        self, query: str, params: Dict[str, Any], size: int
    ) -> List[Tuple[str, Optional[datetime], Optional[datetime]]]:
        """At most a page and one row, as a plain query on the working connection: a page or
        less is the whole list (a no-op rerun's), and the listing's connection is then never
        opened, a backend's start saved (issue 40, P3). In a transaction of its own, rolled
        back, so that its lock_timeout, what is left of the budget, stays its own."""
        conn = self.conn
        try:
            conn.execute("SET LOCAL lock_timeout = %d" % self._lock_budget.lock_timeout_ms())
            return self._listing_waits(
                lambda: conn.execute(SQL_FIRST_PAGE.format(running=query), dict(params, page_limit=size + 1)).fetchall()
            )
        finally:
            # Not on a dead session: that would raise in place of the error that says why.
            if not connection_lost(conn):
                conn.rollback()

    def _listing_waits(self, read: Callable[[], Item]) -> Item:
        """`read()`, whose wait behind an ACCESS EXCLUSIVE lock on jobs (a migration, a
        LOCK TABLE) spends the run's lock budget."""
        started = self.clock()
        try:
            return read()
        finally:
            self._lock_budget.spend(self.clock() - started)

    def _running_jobs_by_cursor(
        self, conn: Connection, query: str, params: Dict[str, Any]
    ) -> Iterator[Tuple[str, Optional[datetime], Optional[datetime]]]:
        cursor = conn.cursor(name=LISTING_CURSOR, withhold=True)
        declared = False
        try:
            # The query runs whole here (WITH HOLD, outside a transaction), and may wait
            # for a lock on jobs as the first page's query did.
            self._listing_waits(lambda: cursor.execute(query, params))
            declared = True
            while True:
                size = self._batch_size()
                page = cursor.fetchmany(size)
                yield from page
                # A short page is the last: no round trip to be told so (issue 40).
                if len(page) < size:
                    break
        finally:
            if declared:
                close_listing(cursor, conn)
            else:
                # The DECLARE failed (a lock timeout): the server has no cursor to close,
                # and psycopg2 would say so in place of the error that tells why.
                with contextlib.suppress(Exception):
                    cursor.close()

    def _qualifying_batches(self) -> Generator[List[str], None, None]:
        """Yield lists of job UUIDs that qualify, a batch at a time, exempt ones apart."""
        batch: List[str] = []
        # Asked again after each batch only: a run turns live between batches.
        size = self._batch_size()
        for uuid, started_at, finished_at in self._running_jobs():
            if finished_at is not None:
                self.result.finished_set.append(uuid)
            if self._qualifies(uuid, started_at):
                batch.append(uuid)
            if len(batch) >= size:
                yield batch
                batch = []
                size = self._batch_size()
        if batch:
            yield batch

    def _qualifies(self, uuid: str, started_at: Optional[datetime]) -> bool:
        verdict = classify_running_job(started_at, self.options.before)
        if started_at is None:
            self.result.unstarted.append(uuid)
        if verdict == EXEMPT:
            self.result.exempt.append(uuid)
        return verdict == QUALIFIES

    def _retry_deferred(self) -> None:
        """Try the locked jobs again, without waiting on any row, while the run's lock
        budget lasts (the tries themselves spend it too); those still locked then are
        reported, and a rerun picks them up. One try comes even with no budget left."""
        budget = self._lock_budget
        delay = 0.1
        next_note = self.clock()
        while self._deferred:
            if self.clock() >= next_note:
                self._note(
                    "waiting up to %.0f s more for %d job(s) locked by another "
                    "transaction: %s" % (budget.remaining(), len(self._deferred), _first(self._deferred))
                )
                self._report()
                next_note = self.clock() + PROGRESS_WHILE_WAITING
            started = self.clock()
            self.sleep(min(delay, budget.remaining()))
            delay = min(delay * 2, 1.0)
            self._retrying, self._deferred = self._deferred, []
            size = self._batch_size()
            while self._retrying:
                chunk, self._retrying = self._retrying[:size], self._retrying[size:]
                # The Slurm step was done when these jobs' batch first came: not again.
                self._clean_batch(chunk, last=True, first_try=False)
            budget.spend(self.clock() - started)
            if self._deferred and not budget.remaining():
                self.result.locked.extend(self._deferred)
                self._note(
                    "%d job(s) still locked by another transaction after %.0f s, "
                    "left for a rerun: %s" % (len(self._deferred), budget.seconds, _first(self._deferred))
                )
                self._report()
                self._deferred = []

    def _clean_batch(self, uuids: List[str], last: bool, first_try: bool = True) -> None:
        opts = self.options
        if first_try and self.cancel_slurm is not None:
            try:
                slurm = self.cancel_slurm(uuids, opts.check_mode)
            except RecoveryError as error:
                note = self._stranded_note()
                if not note:
                    raise
                raise RecoveryError(str(error) + note) from None
            held_jobs = held_by_other_users(uuids, slurm)
            self.result.add_slurm(slurm)
            if held_jobs:
                self.result.held_by_other_users.extend(held_jobs)
                kept = {job["uuid"] for job in held_jobs}
                uuids = [uuid for uuid in uuids if uuid not in kept]
                self._note(
                    "%d job(s) left Running: Slurm jobs of their name are queued under another user, "
                    "whom slurm_user leaves alone: %s" % (len(kept), _first(sorted(kept)))
                )
            if not uuids:
                return
        if self.cancel_slurm is not None and not opts.check_mode:
            self._slurm_done = list(uuids)
        outcome = self._batch_transaction(uuids, last)
        if outcome is not None:
            # Committed: only the jobs the batch left as they were may still be Running.
            left = set(outcome.skipped) | set(outcome.set_aside)
            self._slurm_done = [u for u in self._slurm_done if u in left]
        if outcome is None:
            # A table's lock was not had within the budget: nothing of the batch was done.
            outcome = BatchOutcome([], [])
            locked = list(uuids)
        else:
            # Only what has been committed (or, in check mode, what would be) is reported.
            skipped = list(outcome.skipped)
            held = self._still_qualifying(skipped) if skipped and not opts.check_mode else []
            outcome = outcome._replace(skipped=[u for u in skipped if u not in set(held)])
            locked = held + list(outcome.set_aside)
        self._slurm_done = []
        self._deferred.extend(locked)
        if locked and first_try:
            self._note(
                "%d job(s) locked by another transaction, tried again after the "
                "others: %s" % (len(locked), _first(sorted(locked)))
            )
        self.result.add_batch(outcome)
        if outcome.tokens_left_alone:
            self._note(
                "%d token(s) left valid: another job or pipeline instance of their user could own them: %s"
                % (len(outcome.tokens_left_alone), _first([t["uuid"] for t in outcome.tokens_left_alone]))
            )

    def _batch_transaction(self, uuids: List[str], last: bool) -> Optional[BatchOutcome]:
        """The batch's outcome, committed (in check mode rolled back); None when a table's
        lock was not had within the run's lock budget (see BatchTransaction.run)."""
        self._batch_under_way = True
        # Live, every batch keeps the server's gin_pending_list_limit (see __init__).
        outcome = self.transaction.run(uuids, last or self._keep_gin_limit)
        # An error leaves the batch "under way" for its message (failure_context).
        self._batch_under_way = False
        return outcome

    def _still_qualifying(self, uuids: List[str]) -> List[str]:
        """Those of `uuids` that still qualify as committed: locked, not changed."""
        params = {"uuids": uuids, "before": self.options.db_before}
        found = [row[0] for row in self.conn.execute(SQL_STILL_QUALIFYING, params).fetchall()]
        self.conn.rollback()
        return found
