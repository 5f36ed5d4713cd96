# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fail or requeue the Arvados jobs a reboot left ``Running``, directly in PostgreSQL.

This is the engine behind the ``arvados_fail_jobs`` module and the ``arvados-fail-jobs``
command. It has no Ansible import: the caller hands it an open psycopg 3 connection, the
options, and optionally a function that makes the jobs' Slurm jobs absent.

How a run goes:

1. One scan of ``jobs`` for ``state = 'Running'`` (there is no index on ``state``, so any
   filter on it reads the table; one scan is the least a run can cost), streamed on a
   connection of its own while another does the work: memory does not grow with the
   number of jobs.
2. Jobs that started at or after the threshold (``before``) are exempt and reported,
   never touched. A ``Running`` job with no ``started_at`` is an inconsistent row: without
   ``before`` it qualifies like every ``Running`` job; with ``before`` nothing shows that it
   started before the threshold, so it is left alone. Either way it is reported as
   ``no_started_at``; to clean it up, name it in ``uuids`` and give no ``before``. Its token
   cannot be told from the user's other tokens, so none is revoked for it.
3. Per batch: the Slurm jobs named after the batch's job UUIDs are made absent first (a
   job must not go on running behind a ``Failed`` or re-``Queued`` row); then one
   transaction locks the rows, re-checks that each job is still ``Running`` and still
   qualifies (others are reported as skipped), revokes the jobs' tokens, updates the jobs,
   deletes their tasks (retry), inserts one ``logs`` row per job and notifies
   ``logs`` listeners. Killing the process at any instant leaves every job either untouched
   or completely done; a rerun finishes the rest and changes nothing that is done.
4. Check mode runs the same reads and no write, so it predicts the jobs, tokens and Slurm
   jobs a real run would touch.

A session-level advisory lock keeps two runs (the boot unit and a playbook) apart.
"""

from __future__ import annotations

import bisect
import json
import time

from .errors import RecoveryError
from .fail_jobs_threshold import EXEMPT, QUALIFIES, classify_running_job
from .uuids import JOB_UUID_RE, LOG_INFIX, new_uuid, system_user_uuid

JOB_STATE_RUNNING = 'Running'
JOB_STATE_FAILED = 'Failed'
JOB_STATE_QUEUED = 'Queued'

DEFAULT_FAIL_MESSAGE = (
    'This job was left Running when its server went down (reboot or crash); '
    'nothing was watching it any more, so arvados_ops.recovery marked it Failed.'
)
DEFAULT_RETRY_MESSAGE = (
    'This job was left Running when its server went down (reboot or crash); '
    'nothing was watching it any more, so arvados_ops.recovery put it back in the queue.'
)

# Any fixed 64-bit number works, as long as every run of this collection uses the same one
# and no other program picks it: 'arvados-fail-jobs' read as ASCII, folded to 63 bits.
ADVISORY_LOCK_KEY = int.from_bytes(b'arvfailj', 'big') & 0x7FFFFFFFFFFFFFFF

# What the cleanup reads or writes. The 2017 schema and today's both have all of it.
REQUIRED_COLUMNS = {
    'jobs': (
        'uuid', 'owner_uuid', 'state', 'running', 'success', 'created_at', 'started_at',
        'finished_at', 'cancelled_at', 'modified_at', 'updated_at', 'modified_by_user_uuid',
        'modified_by_client_uuid', 'is_locked_by_uuid', 'log', 'output', 'tasks_summary',
    ),
    'job_tasks': ('job_uuid',),
    'logs': (
        'id', 'uuid', 'owner_uuid', 'modified_by_client_uuid', 'modified_by_user_uuid',
        'object_uuid', 'object_owner_uuid', 'event_at', 'event_type', 'summary',
        'properties', 'created_at', 'updated_at', 'modified_at',
    ),
    'api_client_authorizations': (
        'uuid', 'api_client_id', 'user_id', 'expires_at', 'created_at', 'updated_at',
    ),
    'users': ('id', 'uuid'),
    'containers': ('auth_uuid',),
}

# Arvados stores UTC in `timestamp without time zone`; the database's own clock decides
# "now", so a host whose clock is off cannot put a token's expiry in the future.
SQL_NOW_UTC = "(now() AT TIME ZONE 'UTC')"

# Ordered by user, then start: a batch then holds the jobs of few users over a short time,
# which keeps the token look-up of each batch to few users' tokens.
SQL_RUNNING = """
    SELECT uuid, started_at FROM jobs
    WHERE state = 'Running' AND (%(uuids)s::text[] IS NULL OR uuid = ANY(%(uuids)s::text[]))
    ORDER BY is_locked_by_uuid, started_at, uuid
"""

# Per batch, the jobs that still qualify. The condition is classify_running_job's, checked
# again by the database: a job that finished, or restarted after the threshold, since it
# was listed drops out here.
SQL_QUALIFYING = """
    j.uuid = ANY(%(uuids)s::text[]) AND j.state = 'Running'
    AND (%(threshold)s::timestamp IS NULL OR j.started_at < %(threshold)s::timestamp)
"""
BATCH_COLUMNS = ('uuid', 'owner_uuid', 'created_at', 'started_at', 'is_locked_by_uuid')


def batch_columns(alias):
    return ', '.join('%s.%s' % (alias, column) for column in BATCH_COLUMNS)


SQL_BATCH_JOBS = 'SELECT {columns} FROM jobs j WHERE {where}'.format(
    columns=batch_columns('j'), where=SQL_QUALIFYING)

SQL_USER_IDS = 'SELECT uuid, id FROM users WHERE uuid = ANY(%(uuids)s::text[])'

# A job's token, as the dispatcher made it: for the user of `is_locked_by_uuid`, by no API
# client (0), without expiry, created between the job's creation and its start. A token a
# container names is a container's, never a job's. No index serves `created_at`, so the
# database reads the batch's users' tokens (by the indexed `user_id`) within each user's
# overall window, and the client keeps those inside one of the jobs' own windows: a join
# of every token with every job window of its user costs their product.
SQL_TOKEN_CANDIDATES = """
    SELECT a.id, a.uuid, a.user_id, a.created_at
    FROM unnest(%(user_ids)s::bigint[], %(lo)s::timestamp[], %(hi)s::timestamp[])
             AS w(user_id, lo, hi)
    JOIN api_client_authorizations a
      ON a.user_id = w.user_id AND a.created_at BETWEEN w.lo AND w.hi
    WHERE a.api_client_id = 0
      AND (a.expires_at IS NULL OR a.expires_at > {now})
      AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.auth_uuid = a.uuid)
""".format(now=SQL_NOW_UTC)

SQL_REVOKE_TOKENS = """
    UPDATE api_client_authorizations SET expires_at = {now}, updated_at = {now}
    WHERE id = ANY(%(ids)s::bigint[]) AND (expires_at IS NULL OR expires_at > {now})
    RETURNING uuid
""".format(now=SQL_NOW_UTC)

# The update locks, re-checks and changes each row in one pass (a separate SELECT ... FOR
# UPDATE would write every row twice) and returns the rows as they were: failing leaves
# the returned columns as they are, so the updated row itself tells them.
SQL_FAIL_JOBS = """
    UPDATE jobs AS j SET state = 'Failed', running = false, success = false,
        finished_at = COALESCE(j.finished_at, {now}),
        modified_at = {now}, updated_at = {now},
        modified_by_user_uuid = %(system_user)s, modified_by_client_uuid = NULL
    WHERE {where}
    RETURNING {columns}
""".format(now=SQL_NOW_UTC, where=SQL_QUALIFYING, columns=batch_columns('j'))

# Arvados' model forbids Running -> Queued, so a retry writes the row as a new job's. It
# empties started_at and is_locked_by_uuid, which the token look-up needs: they are read
# from the row as it was, joined in.
SQL_REQUEUE_JOBS = """
    UPDATE jobs AS j SET state = 'Queued', running = false, success = NULL,
        started_at = NULL, finished_at = NULL, cancelled_at = NULL, is_locked_by_uuid = NULL,
        log = NULL, output = NULL, tasks_summary = '{{}}',
        modified_at = {now}, updated_at = {now},
        modified_by_user_uuid = %(system_user)s, modified_by_client_uuid = NULL
    FROM ({batch}) AS o
    WHERE j.uuid = o.uuid AND {where}
    RETURNING {columns}
""".format(now=SQL_NOW_UTC, batch=SQL_BATCH_JOBS, where=SQL_QUALIFYING,
           columns=batch_columns('o'))

SQL_DELETE_TASKS = 'DELETE FROM job_tasks WHERE job_uuid = ANY(%(uuids)s::text[])'

SQL_INSERT_LOGS = """
    WITH inserted AS (
        INSERT INTO logs (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid,
                          object_uuid, object_owner_uuid, event_at, event_type, summary,
                          properties, created_at, updated_at, modified_at)
        SELECT l.uuid, l.owner_uuid, NULL, l.system_user, l.job_uuid, l.owner_uuid,
               {now}, 'dispatch', %(summary)s, %(properties)s, {now}, {now}, {now}
        FROM unnest(%(log_uuids)s::text[], %(owners)s::text[], %(system_users)s::text[],
                    %(uuids)s::text[]) AS l(uuid, owner_uuid, system_user, job_uuid)
        RETURNING id, uuid
    )
    SELECT uuid, pg_notify('logs', id::text) FROM inserted ORDER BY uuid
""".format(now=SQL_NOW_UTC)


# The jobs' trigram search index is a GIN index: new entries go to a pending list, merged
# into the index when the list outgrows gin_pending_list_limit (4 MB by default), so with
# the default every batch merges. Each merge rewrites thousands of index pages, and each
# page is written whole to the WAL again after every checkpoint, a WAL that brings the
# next checkpoint sooner: on a million-job table that was a third of the run. Batches but
# the last let the list grow and merge rarely (work_mem is a merge's memory); the last one
# has the server's own limit again, so its first insert merges what the run left pending
# and the API server's next write does not inherit the merge. Settings are only raised,
# and only for the batch's transaction.
BULK_SETTINGS_KB = (('gin_pending_list_limit', 262144), ('work_mem', 65536))
LAST_BATCH_KEEPS = ('gin_pending_list_limit',)

SQL_SETTINGS_KB = """
    SELECT name, setting::bigint FROM pg_settings
    WHERE name = ANY(%(names)s::text[]) AND unit = 'kB'
"""

SQL_SET_LOCAL = """
    SELECT set_config(s.name, s.value, true)
    FROM unnest(%(names)s::text[], %(values)s::text[]) AS s(name, value)
"""


def bulk_settings(server_kb, last_batch):
    """The settings (name -> value) a writing batch raises, given the server's, in kB."""
    raised = {}
    for name, wanted in BULK_SETTINGS_KB:
        if last_batch and name in LAST_BATCH_KEEPS:
            continue
        if name in server_kb and server_kb[name] < wanted:
            raised[name] = '%dkB' % wanted
    return raised


def with_last(items):
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


class CleanupOptions(object):
    """What a cleanup does. Validated on creation, before anything is read or written."""

    def __init__(self, threshold=None, uuids=None, retry=False,
                 revoke_tokens=True, message=None, batch_size=1000, lock_wait=30.0,
                 check_mode=False, diff=False, keep_uuids=True):
        self.threshold = threshold
        self.uuids = None if uuids is None else sorted(set(uuids))
        self.retry = bool(retry)
        self.revoke_tokens = bool(revoke_tokens)
        self.message = message or (DEFAULT_RETRY_MESSAGE if retry else DEFAULT_FAIL_MESSAGE)
        self.batch_size = batch_size
        self.lock_wait = lock_wait
        self.check_mode = bool(check_mode)
        self.diff = bool(diff)
        self.keep_uuids = bool(keep_uuids or diff)
        self._validate()

    def _validate(self):
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) \
                or self.batch_size < 1:
            raise RecoveryError('batch_size must be a positive integer, got %r' % (self.batch_size,))
        if self.lock_wait < 0:
            raise RecoveryError('lock_wait must not be negative, got %r' % (self.lock_wait,))
        if not self.message.strip():
            raise RecoveryError('message must not be empty')
        if self.uuids is not None:
            check_job_uuids(self.uuids)

    @property
    def target_state(self):
        return JOB_STATE_QUEUED if self.retry else JOB_STATE_FAILED


def check_job_uuids(uuids):
    bad = [u for u in uuids if not isinstance(u, str) or not JOB_UUID_RE.match(u)]
    if bad:
        raise RecoveryError('not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): %s'
                            % ', '.join(repr(u) for u in bad[:10]))


class Tally(object):
    """A count of UUIDs and, when `keep` is true, the UUIDs themselves.

    The command's summary needs only the counts, so a run over a million jobs keeps its
    memory flat; the module and `--json` keep the lists they return.
    """

    def __init__(self, keep=True):
        self.count = 0
        self.items = [] if keep else None

    def extend(self, uuids):
        uuids = list(uuids)
        self.count += len(uuids)
        if self.items is not None:
            self.items.extend(uuids)

    def __len__(self):
        return self.count

    def as_list(self):
        return sorted(self.items or ())


class CleanupResult(object):
    """What a run did (or, in check mode, would do), gathered batch by batch."""

    def __init__(self, options):
        self.options = options
        keep = options.keep_uuids
        self.done_jobs = Tally(keep)
        self.skipped = Tally(keep)
        self.revoked_tokens = Tally(keep)
        self.log_uuids = Tally(keep)
        # Few by nature (started after a reboot, or inconsistent rows): always listed.
        self.exempt = []
        self.unstarted = []
        self.slurm = {}
        self.batches = 0

    @property
    def changed(self):
        return bool(self.done_jobs.count)

    def add_slurm(self, part):
        if not self.options.keep_uuids:
            part = dict((k, len(v) if isinstance(v, list) else v) for k, v in part.items())
        self.slurm = merge_slurm_results([self.slurm, part])

    def to_dict(self):
        opts = self.options
        done = self.done_jobs.as_list()
        result = {
            'changed': self.changed,
            'threshold': None if opts.threshold is None else opts.threshold.to_iso8601(),
            'threshold_source': None if opts.threshold is None else opts.threshold.source,
            'requeued_jobs' if opts.retry else 'failed_jobs': done,
            'exempt': {'count': len(self.exempt), 'uuids': sorted(self.exempt)},
            'no_started_at': sorted(self.unstarted),
            # Not `skipped`: Ansible reads that key of a result as "the task was skipped".
            'skipped_jobs': self.skipped.as_list(),
            'revoked_tokens': self.revoked_tokens.as_list(),
            'log_uuids': self.log_uuids.as_list(),
            'counts': {
                'jobs': self.done_jobs.count, 'skipped_jobs': self.skipped.count,
                'revoked_tokens': self.revoked_tokens.count, 'logs': self.log_uuids.count,
            },
            'slurm': dict(self.slurm),
            'batches': self.batches,
        }
        if opts.diff:
            after = opts.target_state
            result['diff'] = {
                'before': ''.join('%s: %s\n' % (u, JOB_STATE_RUNNING) for u in done),
                'after': ''.join('%s: %s\n' % (u, after) for u in done),
            }
        return result


def merge_slurm_results(results):
    """One summary of the per-batch results of the Slurm cancel engine."""
    merged = {}
    for part in results:
        for key, value in part.items():
            if isinstance(value, list):
                merged.setdefault(key, []).extend(value)
            elif isinstance(value, bool):
                merged[key] = merged.get(key, False) or value
            elif isinstance(value, (int, float)):
                merged[key] = merged.get(key, 0) + value
            else:
                merged[key] = value
    return merged


class JobWindows(object):
    """The time windows [created_at, started_at] of jobs, by user, for telling whether an
    instant falls inside one of a user's windows in O(log n).

    A job without a user or a start has no window (the caller leaves it out).
    """

    def __init__(self, windows):
        by_user = {}
        for user_id, created_at, started_at in windows:
            by_user.setdefault(user_id, []).append((created_at, started_at))
        self._starts = {}
        self._reach = {}
        for user_id, spans in by_user.items():
            spans.sort()
            self._starts[user_id] = [start for start, _end in spans]
            # The latest end among the windows that open at or before each one: an instant
            # is inside some window exactly when the last window opening before it reaches it.
            reach, latest = [], None
            for _start, end in spans:
                latest = end if latest is None or end > latest else latest
                reach.append(latest)
            self._reach[user_id] = reach

    def __len__(self):
        return len(self._starts)

    def bounds(self):
        """Per user, the span from the earliest window start to the latest end."""
        users = sorted(self._starts)
        return {
            'user_ids': users,
            'lo': [self._starts[u][0] for u in users],
            'hi': [self._reach[u][-1] for u in users],
        }

    def contain(self, user_id, instant):
        starts = self._starts.get(user_id)
        if not starts:
            return False
        index = bisect.bisect_right(starts, instant) - 1
        return index >= 0 and self._reach[user_id][index] >= instant


def table_columns(conn, tables):
    """{table: set of its column names} for those of `tables` the current schema has."""
    # pg_catalog rather than information_schema: the same answer in a fraction of the time.
    rows = conn.execute(
        'SELECT c.relname, a.attname FROM pg_catalog.pg_class c '
        'JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid '
        'WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = %s '
        'AND c.relname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped',
        ('r', list(tables))).fetchall()
    present = {}
    for table, column in rows:
        present.setdefault(table, set()).add(column)
    return present


def check_schema(conn):
    """Fail with the names of whatever table or column the cleanup needs and lacks."""
    present = table_columns(conn, REQUIRED_COLUMNS)
    problems = []
    for table, columns in REQUIRED_COLUMNS.items():
        if table not in present:
            problems.append('table %s is missing' % table)
            continue
        missing = [c for c in columns if c not in present[table]]
        if missing:
            problems.append('table %s lacks column(s) %s' % (table, ', '.join(missing)))
    if problems:
        raise RecoveryError('this database does not have the Arvados schema the cleanup '
                            'needs: %s' % '; '.join(problems))


def take_advisory_lock(conn, wait, sleep=time.sleep, clock=time.monotonic):
    """Hold the collection's advisory lock for this session, waiting at most `wait` s."""
    deadline = clock() + wait
    delay = 0.1
    while True:
        if conn.execute('SELECT pg_try_advisory_lock(%s)', (ADVISORY_LOCK_KEY,)).fetchone()[0]:
            conn.commit()
            return
        conn.rollback()
        if clock() >= deadline:
            raise RecoveryError(
                'another arvados_fail_jobs run holds the cleanup lock (PostgreSQL advisory '
                'lock %d); waited %.0f s. Try again when it has finished.'
                % (ADVISORY_LOCK_KEY, wait))
        sleep(min(delay, max(0.0, deadline - clock())))
        delay = min(delay * 2, 2.0)


class JobCleaner(object):
    """Runs one cleanup on two open psycopg 3 connections to the same database.

    `listing_conn` streams the list of Running jobs while `conn` works through them a
    batch at a time (autocommit off on both). A plain query streamed on a connection of its
    own can scan the table in parallel, which a server-side cursor cannot, and keeps the
    client's memory flat however many jobs there are.

    `cancel_slurm(uuids, check_mode)` makes the Slurm jobs named after `uuids` absent and
    returns the Slurm engine's result as a dict; it raises to stop the run before the
    batch touches the database. `progress(result)` is called after each batch.
    """

    def __init__(self, conn, listing_conn, options, cancel_slurm=None, progress=None):
        self.conn = conn
        self.listing_conn = listing_conn
        self.options = options
        self.cancel_slurm = cancel_slurm
        self.progress = progress
        self.result = CleanupResult(options)
        self._server_kb = None

    def run(self):
        opts = self.options
        for conn in (self.conn, self.listing_conn):
            # A generic plan, which psycopg's automatic preparing leads to after a few
            # batches, turns the token look-up into a slow one; custom plans see each batch.
            conn.prepare_threshold = None
            # Compiling these short queries costs more than it saves.
            conn.execute('SET jit = off')
            conn.commit()
        check_schema(self.conn)
        self.conn.rollback()
        take_advisory_lock(self.conn, opts.lock_wait)
        try:
            for batch, last in with_last(self._qualifying_batches()):
                self._clean_batch(batch, last)
                self.result.batches += 1
                if self.progress is not None:
                    self.progress(self.result)
        finally:
            self.conn.rollback()
            self.conn.execute('SELECT pg_advisory_unlock(%s)', (ADVISORY_LOCK_KEY,))
            self.conn.commit()
        return self.result

    def _qualifying_batches(self):
        """Yield lists of job UUIDs that qualify, a batch at a time, exempt ones apart."""
        opts = self.options
        batch = []
        with self.listing_conn.cursor() as cursor:
            for uuid, started_at in cursor.stream(SQL_RUNNING, {'uuids': opts.uuids}):
                if self._qualifies(uuid, started_at):
                    batch.append(uuid)
                if len(batch) >= opts.batch_size:
                    yield batch
                    batch = []
        self.listing_conn.rollback()
        if batch:
            yield batch

    def _qualifies(self, uuid, started_at):
        verdict = classify_running_job(started_at, self.options.threshold)
        if started_at is None:
            self.result.unstarted.append(uuid)
        if verdict == EXEMPT:
            self.result.exempt.append(uuid)
        return verdict == QUALIFIES

    def _clean_batch(self, uuids, last):
        opts = self.options
        if self.cancel_slurm is not None:
            self.result.add_slurm(self.cancel_slurm(uuids, opts.check_mode))
        try:
            if not opts.check_mode:
                self._raise_bulk_settings(last)
            outcome = self._write_batch(uuids)
        except BaseException:
            self.conn.rollback()
            raise
        if opts.check_mode:
            self.conn.rollback()
        else:
            self.conn.commit()
        # Only what has been committed (or, in check mode, what would be) is reported.
        done, skipped, tokens, logs = outcome
        self.result.done_jobs.extend(done)
        self.result.skipped.extend(skipped)
        self.result.revoked_tokens.extend(tokens)
        self.result.log_uuids.extend(logs)

    def _raise_bulk_settings(self, last):
        """Raise, for this batch's transaction, the settings BULK_SETTINGS_KB explains."""
        if self._server_kb is None:
            names = [name for name, _kb in BULK_SETTINGS_KB]
            self._server_kb = dict(self.conn.execute(SQL_SETTINGS_KB, {'names': names}).fetchall())
        raised = bulk_settings(self._server_kb, last)
        if raised:
            self.conn.execute(SQL_SET_LOCAL, {'names': list(raised), 'values': list(raised.values())})

    def _write_batch(self, uuids):
        """All of one batch's statements, in the transaction the caller ends."""
        opts = self.options
        params = {
            'uuids': uuids,
            'threshold': None if opts.threshold is None else opts.threshold.to_db_timestamp(),
            'system_user': system_user_uuid(uuids[0][:5]),
        }
        if opts.check_mode:
            jobs = self.conn.execute(SQL_BATCH_JOBS, params).fetchall()
        else:
            jobs = self.conn.execute(SQL_REQUEUE_JOBS if opts.retry else SQL_FAIL_JOBS,
                                     params).fetchall()
        done = [r[0] for r in jobs]
        done_set = set(done)
        skipped = [u for u in uuids if u not in done_set]
        if not jobs:
            return done, skipped, [], []
        tokens = self._tokens(jobs) if opts.revoke_tokens else []
        if opts.check_mode:
            return done, skipped, tokens, []
        if opts.retry:
            self.conn.execute(SQL_DELETE_TASKS, {'uuids': done})
        logs = self._insert_logs(jobs)
        return done, skipped, tokens, logs

    def _tokens(self, jobs):
        """The batch's job tokens: revoked, or in check mode listed."""
        users = sorted(set(r[4] for r in jobs if r[4] is not None))
        user_ids = dict(self.conn.execute(SQL_USER_IDS, {'uuids': users}).fetchall()) if users else {}
        windows = JobWindows((user_ids[r[4]], r[2], r[3]) for r in jobs
                             if r[4] in user_ids and r[3] is not None)
        if not windows:
            return []
        candidates = self.conn.execute(SQL_TOKEN_CANDIDATES, windows.bounds()).fetchall()
        tokens = [(token_id, uuid) for token_id, uuid, user_id, created_at in candidates
                  if windows.contain(user_id, created_at)]
        if self.options.check_mode:
            return [uuid for _token_id, uuid in tokens]
        revoked = self.conn.execute(SQL_REVOKE_TOKENS, {'ids': [t[0] for t in tokens]})
        return [row[0] for row in revoked]

    def _insert_logs(self, jobs):
        message = self.options.message
        params = {
            'uuids': [r[0] for r in jobs],
            'owners': [r[1] for r in jobs],
            'system_users': [system_user_uuid(r[0][:5]) for r in jobs],
            'log_uuids': [new_uuid(r[0][:5], LOG_INFIX) for r in jobs],
            'summary': message,
            'properties': json.dumps({'text': message}),
        }
        return [row[0] for row in self.conn.execute(SQL_INSERT_LOGS, params)]
