# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fail or requeue the Arvados jobs a reboot left ``Running``, directly in PostgreSQL.

This is the engine behind the ``arvados_fail_jobs`` module and the ``arvados-fail-jobs``
command. It has no Ansible import: the caller hands it an open psycopg 3 connection, the
options, and optionally a function that makes the jobs' Slurm jobs absent.

How a run goes:

1. The ``Running`` jobs are listed by the index on ``finished_at`` (see SQL_RUNNING), into
   a cursor the server keeps (WITH HOLD), fetched a batch at a time: no snapshot lives
   across batches and memory does not grow with the number of jobs.
2. Jobs that started at or after the threshold (``before``) are exempt and reported,
   never touched. A ``Running`` job with no ``started_at`` is an inconsistent row: without
   ``before`` it qualifies like every ``Running`` job; with ``before`` nothing shows that it
   started before the threshold, so it is left alone. Either way it is reported as
   ``no_started_at``; to clean it up, name it in ``uuids`` and give no ``before``. Its token
   cannot be told from the user's other tokens, so none is revoked for it.
3. Per batch: the Slurm jobs named after the batch's job UUIDs are made absent first (a
   job must not go on running behind a ``Failed`` or re-``Queued`` row); then one
   transaction locks the rows it can (a row another transaction holds is skipped and
   tried again after the other batches, for at most ``row_lock_wait``), re-checks that
   each job is still ``Running`` and still qualifies (others are reported as skipped),
   revokes the jobs' tokens, updates the jobs, deletes their tasks (retry), inserts one
   ``logs`` row per job and notifies ``logs`` listeners. Killing the process at any
   instant leaves every job either untouched or completely done; a rerun finishes the
   rest and changes nothing that is done.
4. Check mode runs the same reads and no write, so it predicts the jobs, tokens and Slurm
   jobs a real run would touch (not which rows another transaction will hold locked).
5. Live (other sessions on the database, or ``live: true``), the batches merge the trigram
   index's pending list as it outgrows the server's limit, so that the API server's writes
   do not pay for the run's merges; at boot the run lets the list grow and merges it once.

A session-level advisory lock keeps two runs (the boot unit and a playbook) apart.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import re
import time
from datetime import datetime
from typing import NamedTuple, Optional

from .arvados_db_config import APPLICATION_NAME
from .errors import RecoveryError
from .fail_jobs_threshold import EXEMPT, QUALIFIES, classify_running_job
from .uuids import JOB_UUID_RE, LOG_INFIX, new_uuid, system_user_uuid

JOB_STATE_RUNNING = "Running"
JOB_STATE_FAILED = "Failed"
JOB_STATE_QUEUED = "Queued"

# The engine's defaults: CleanupOptions' own, and, through fail_jobs_run's option table,
# the module's, the command's and (by a test) the documentation's.
DEFAULT_BATCH_SIZE = 1000
DEFAULT_LOCK_WAIT = 60.0
DEFAULT_ROW_LOCK_WAIT = 10.0
DEFAULT_LIVE = "auto"

# The longest `dispatch` row summary a run writes, in bytes of UTF-8. logs.summary has a
# btree index (index_logs_on_summary, 2017 to today), whose rows PostgreSQL caps at 2704
# bytes (a third of a page, less overhead): a longer summary fails the batch's INSERT, after
# its Slurm jobs were cancelled. 2500 leaves room for the index row's own header.
MAX_SUMMARY_BYTES = 2500

DEFAULT_FAIL_MESSAGE = (
    "This job was left Running when its server went down (reboot or crash); "
    "nothing was watching it any more, so arvados_ops.recovery marked it Failed."
)
DEFAULT_RETRY_MESSAGE = (
    "This job was left Running when its server went down (reboot or crash); "
    "nothing was watching it any more, so arvados_ops.recovery put it back in the queue."
)

# Any fixed 64-bit number works, as long as every run of this collection uses the same one
# and no other program picks it: 'arvados-fail-jobs' read as ASCII, folded to 63 bits.
ADVISORY_LOCK_KEY = int.from_bytes(b"arvfailj", "big") & 0x7FFFFFFFFFFFFFFF

# What the cleanup reads or writes. The 2017 schema and today's both have all of it.
REQUIRED_COLUMNS = {
    "jobs": (
        "uuid",
        "owner_uuid",
        "state",
        "running",
        "success",
        "created_at",
        "started_at",
        "finished_at",
        "cancelled_at",
        "modified_at",
        "updated_at",
        "modified_by_user_uuid",
        "modified_by_client_uuid",
        "is_locked_by_uuid",
        "log",
        "output",
        "tasks_summary",
    ),
    "job_tasks": ("job_uuid",),
    "logs": (
        "id",
        "uuid",
        "owner_uuid",
        "modified_by_client_uuid",
        "modified_by_user_uuid",
        "object_uuid",
        "object_owner_uuid",
        "event_at",
        "event_type",
        "summary",
        "properties",
        "created_at",
        "updated_at",
        "modified_at",
    ),
    "api_client_authorizations": (
        "uuid",
        "api_client_id",
        "user_id",
        "expires_at",
        "created_at",
        "updated_at",
    ),
    "users": ("id", "uuid"),
    "containers": ("auth_uuid",),
    "pipeline_instances": ("uuid", "state", "modified_by_user_uuid", "created_at"),
}

# Arvados stores UTC in `timestamp without time zone`; the database's own clock decides
# "now", so a host whose clock is off cannot put a token's expiry in the future.
SQL_NOW_UTC = "(now() AT TIME ZONE 'UTC')"

# Ordered by user, then start: a batch then holds the jobs of few users over a short time,
# which keeps the token look-up of each batch to few users' tokens.
#
# No index leads with `state` (it is the 16th column of jobs_search_index), so `state =
# 'Running'` alone reads the whole table. But every Running job Arvados wrote has no
# `finished_at`, `finished_at` has its own btree index (index_jobs_on_finished_at, in
# structure.sql from 1.4.3 to 3.2.1) and btree indexes hold NULLs: `finished_at IS NULL`
# reads the unfinished jobs only. A Running row with `finished_at` set is an inconsistent
# row this path cannot see; `uuids` (by the uuid index) and `full_scan` (the whole table)
# see it, and such rows are reported in `running_with_finished_at`.
SQL_RUNNING = """
    SELECT uuid, started_at, finished_at FROM jobs
    WHERE state = 'Running' AND {where}
    ORDER BY is_locked_by_uuid, started_at, uuid
"""
WHERE_UNFINISHED = "finished_at IS NULL"
WHERE_UUIDS = "uuid = ANY(%(uuids)s::text[])"
WHERE_ALL = "true"

# The list is read through a cursor WITH HOLD declared outside any transaction: PostgreSQL
# runs the query at once, keeps the result on the server and ends the snapshot, and each
# page is then fetched in a transaction of its own. No snapshot of the run lives longer
# than a page or a batch (a long one would hold back vacuum's horizon for every table of
# the database), and the client's memory stays one page.
LISTING_CURSOR = "arvados_fail_jobs_running"

# Per batch, the jobs that still qualify. The condition is classify_running_job's, checked
# again by the database: a job that finished, or restarted after the threshold, since it
# was listed drops out here.
SQL_QUALIFYING = """
    j.uuid = ANY(%(uuids)s::text[]) AND j.state = 'Running'
    AND (%(threshold)s::timestamp IS NULL OR j.started_at < %(threshold)s::timestamp)
"""


class BatchJob(NamedTuple):
    """A job of a batch, as the batch's statement returns it (before it was changed)."""

    uuid: str
    owner_uuid: str
    created_at: datetime
    started_at: Optional[datetime]
    # The dispatcher's user, whose token the job ran with.
    is_locked_by_uuid: Optional[str]
    # The user a requeued job will run as (see SQL_RUN_AS); None when the row names none.
    run_as: Optional[str]
    # The whole row before and after the change (jsonb as dicts), for the `update` audit
    # row; None in check mode, which changes nothing.
    old_row: Optional[dict] = None
    new_row: Optional[dict] = None


BATCH_COLUMNS = BatchJob._fields[:5]


def batch_columns(alias):
    return ", ".join("%s.%s" % (alias, column) for column in BATCH_COLUMNS)


# The user a requeued job runs as next time. crunch-dispatch.rb makes a queued job's token
# for the user `jobs.modified_by_user_uuid` names (get_authorization, 1.1.0 to 1.4.3
# services/api/lib/crunch_dispatch.rb), so a requeue that wrote the system user there
# would run the job with an admin token. The row keeps the user who last changed it (the
# job's own user while it ran: crunch-job updates the job with the job's token); where that
# is the system user or empty, the user whose token ran it (`is_locked_by_uuid`, locked by
# crunch-job with the token made for modified_by_user_uuid). A job with neither is not
# requeued: it is failed (see SQL_FAIL_UNRUNNABLE), as nobody can be known to run it as.
SQL_USER_UUID = "^[0-9a-z]{5}-tpzed-[0-9a-z]{15}$"
SQL_SYSTEM_USER_SUFFIX = "-tpzed-000000000000000"
SQL_RUN_AS = """
    CASE WHEN {alias}.modified_by_user_uuid ~ '{user}'
              AND right({alias}.modified_by_user_uuid, {length}) <> '{system}'
         THEN {alias}.modified_by_user_uuid
         WHEN {alias}.is_locked_by_uuid ~ '{user}' AND right({alias}.is_locked_by_uuid, {length}) <> '{system}'
         THEN {alias}.is_locked_by_uuid
    END
"""


def run_as(alias):
    return SQL_RUN_AS.format(
        alias=alias, user=SQL_USER_UUID, system=SQL_SYSTEM_USER_SUFFIX, length=len(SQL_SYSTEM_USER_SUFFIX)
    ).strip()


SQL_BATCH_JOBS = "SELECT {columns}, {run_as} FROM jobs j WHERE {where}".format(
    columns=batch_columns("j"), run_as=run_as("j"), where=SQL_QUALIFYING
)

SQL_STILL_QUALIFYING = "SELECT j.uuid FROM jobs j WHERE " + SQL_QUALIFYING
# lock_not_available: a lock waited for longer than lock_timeout.
SQLSTATE_LOCK_TIMEOUT = "55P03"

SQL_USER_IDS = "SELECT uuid, id FROM users WHERE uuid = ANY(%(uuids)s::text[])"

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

# A token in a cleaned job's window may be another job's: the dispatcher made each job's
# token for the same user, as it dispatched the job, and a sibling job dispatched while
# this one was queued has its token in this one's window; so do the tokens crunch-dispatch.rb
# made for arv-run-pipeline-instance (get_authorization and update_pipelines, 1.4.3
# services/api/lib/crunch_dispatch.rb: api_client_id 0, no expiry, for the
# modified_by_user_uuid of the job or of a RunningOnServer pipeline instance). So a token
# is left alone, and reported, when it could belong to work this run does not end: another
# job of the user whose own window [created_at, started_at] holds the token's creation and
# that is Running (not one this run cleans up) or finished after the token was made (not
# by a cleanup: a `dispatch` log row written after the token, by this collection or by
# Arvados' own fail_job, says its job was ended), or a pipeline instance of the user
# running on the server since before the token. The jobs are found by the started_at
# index (a window holding a token started after it) or, unstarted, the finished_at one.
SQL_TOKEN_OTHER_OWNERS = """
    SELECT t.id, other.uuid
    FROM unnest(%(ids)s::bigint[], %(users)s::text[], %(made)s::timestamp[]) AS t(id, user_uuid, made)
    CROSS JOIN LATERAL (
        (SELECT o.uuid FROM jobs o
         WHERE (o.started_at >= t.made OR (o.started_at IS NULL AND o.finished_at IS NULL))
           AND o.created_at <= t.made
           AND (o.is_locked_by_uuid = t.user_uuid OR o.modified_by_user_uuid = t.user_uuid)
           AND (o.state = 'Running' OR o.finished_at > t.made)
           AND o.uuid <> ALL(%(batch)s::text[])
           AND NOT (o.state = 'Running'
                    AND (%(run_uuids)s::text[] IS NULL OR o.uuid = ANY(%(run_uuids)s::text[]))
                    AND (%(every_row)s OR o.finished_at IS NULL)
                    AND (%(threshold)s::timestamp IS NULL OR o.started_at < %(threshold)s::timestamp))
           AND NOT EXISTS (SELECT 1 FROM logs l WHERE l.object_uuid = o.uuid
                           AND l.event_type = 'dispatch' AND l.created_at >= t.made)
         ORDER BY o.uuid LIMIT 1)
        UNION ALL
        (SELECT p.uuid FROM pipeline_instances p
         WHERE p.state = 'RunningOnServer' AND p.modified_by_user_uuid = t.user_uuid
           AND p.created_at <= t.made
         ORDER BY p.uuid LIMIT 1)
        LIMIT 1
    ) AS other
"""

SQL_REVOKE_TOKENS = """
    UPDATE api_client_authorizations SET expires_at = {now}, updated_at = {now}
    WHERE id = ANY(%(ids)s::bigint[]) AND (expires_at IS NULL OR expires_at > {now})
    RETURNING uuid
""".format(now=SQL_NOW_UTC)

# Row locks: a batch never waits for a job row another transaction holds (an API request
# updating that job, a SELECT ... FOR UPDATE): SKIP LOCKED takes the rows it can and the
# others are tried again after the other batches, for at most `row_lock_wait` seconds.
# Waiting on the row instead (lock_timeout for the batch) would hold the batch's other
# rows, and so stall the API server's writes to those jobs, as long as it waited, and a
# timeout would roll back the whole batch without telling which row was locked. Other
# locks (tokens, a table locked by a migration) are bounded by lock_timeout for the batch.
#
# The update locks, re-checks and changes each row in one pass (a separate SELECT ... FOR
# UPDATE would write every row twice). It returns the row as it was (`o`, the locked row
# read by the subquery) and as it is now (`j`), whole, for the `update` audit row.
SQL_LOCKED_ROWS = "SELECT j.*, {run_as} AS run_as FROM jobs j WHERE {where} FOR UPDATE OF j SKIP LOCKED"
SQL_CHANGED_ROWS = "{columns}, o.run_as, to_jsonb(o) - 'run_as', to_jsonb(j)".format(columns=batch_columns("o"))

# Failing is what Arvados' fail_job did as the system user (act_as_system_user, 1.4.3
# services/api/lib/crunch_dispatch.rb): the model then wrote the system user as modifier.
SQL_FAIL_JOBS = """
    UPDATE jobs AS j SET state = 'Failed', running = false, success = false,
        finished_at = COALESCE(j.finished_at, {now}),
        modified_at = {now}, updated_at = {now},
        modified_by_user_uuid = %(system_user)s, modified_by_client_uuid = NULL
    FROM ({locked}) AS o
    WHERE j.uuid = o.uuid
    RETURNING {changed}
""".format(
    now=SQL_NOW_UTC,
    locked=SQL_LOCKED_ROWS.format(run_as=run_as("j"), where=SQL_QUALIFYING),
    changed=SQL_CHANGED_ROWS,
)

# With `retry`, the jobs of a batch that name no user to run as (SQL_RUN_AS) are failed
# instead, in the same transaction: only those, so that a job another transaction held
# during the requeue and released since is not failed in its place.
SQL_FAIL_UNRUNNABLE = SQL_FAIL_JOBS.replace("WHERE j.uuid = o.uuid", "WHERE j.uuid = o.uuid AND o.run_as IS NULL")

# Arvados' model forbids Running -> Queued, so a retry writes the row as a new job's,
# keeping the user it runs as (SQL_RUN_AS). It empties started_at and is_locked_by_uuid,
# which the token look-up needs: they are read from the row as it was (`o`).
SQL_REQUEUE_JOBS = """
    UPDATE jobs AS j SET state = 'Queued', running = false, success = NULL,
        started_at = NULL, finished_at = NULL, cancelled_at = NULL, is_locked_by_uuid = NULL,
        log = NULL, output = NULL, tasks_summary = '{{}}',
        modified_at = {now}, updated_at = {now},
        modified_by_user_uuid = o.run_as, modified_by_client_uuid = NULL
    FROM ({locked}) AS o
    WHERE j.uuid = o.uuid AND o.run_as IS NOT NULL
    RETURNING {changed}
""".format(
    now=SQL_NOW_UTC,
    locked=SQL_LOCKED_ROWS.format(run_as=run_as("j"), where=SQL_QUALIFYING),
    changed=SQL_CHANGED_ROWS,
)

SQL_DELETE_TASKS = "DELETE FROM job_tasks WHERE job_uuid = ANY(%(uuids)s::text[])"

# The log rows Arvados wrote for a job it failed (1.4.3): fail_job's `dispatch` row
# (services/api/lib/crunch_dispatch.rb: owner the job's owner, no object_owner_uuid, the
# message as summary and as properties' text), then the save's `update` audit row
# (app/models/arvados_model.rb log_update, app/models/log.rb fill_object and update_to:
# owner the acting (system) user, object_owner_uuid the job's owner, summary "update of
# <uuid>", event_at the job's new modified_at, the old and new attributes and etags).
# Websocket clients and Workbench react to the `update` row, which they read by the id
# NOTIFY sends them. Rows are inserted in the order given, so ids follow Arvados' order.
SQL_INSERT_LOGS = """
    WITH inserted AS (
        INSERT INTO logs (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid,
                          object_uuid, object_owner_uuid, event_at, event_type, summary,
                          properties, created_at, updated_at, modified_at)
        SELECT l.uuid, l.owner_uuid, NULL, l.system_user, l.object_uuid, l.object_owner_uuid,
               COALESCE(l.event_at, {now}), l.event_type, l.summary, l.properties, {now}, {now}, {now}
        FROM unnest(%(log_uuids)s::text[], %(owners)s::text[], %(system_users)s::text[],
                    %(objects)s::text[], %(object_owners)s::text[], %(event_ats)s::timestamp[],
                    %(event_types)s::text[], %(summaries)s::text[], %(properties)s::text[])
             WITH ORDINALITY
             AS l(uuid, owner_uuid, system_user, object_uuid, object_owner_uuid, event_at,
                  event_type, summary, properties, position)
        ORDER BY l.position
        RETURNING id, uuid
    )
    SELECT uuid, pg_notify('logs', id::text) FROM inserted ORDER BY id
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
BULK_SETTINGS_KB = (("gin_pending_list_limit", 262144), ("work_mem", 65536))
LAST_BATCH_KEEPS = ("gin_pending_list_limit",)

SQL_SETTINGS_KB = """
    SELECT name, setting::bigint FROM pg_settings
    WHERE name = ANY(%(names)s::text[]) AND unit = 'kB'
"""

SQL_SET_LOCAL = """
    SELECT set_config(s.name, s.value, true)
    FROM unnest(%(names)s::text[], %(values)s::text[]) AS s(name, value)
"""


# Live (the API server up), the batches keep the server's limit: the API server's writes
# to jobs insert into the same pending list with the server's limit, and the first of them
# to find the list longer than that merges all of it inside its own statement. A list the
# run had let grow would so be merged, at the run's cost, by an API request. Measured
# (bench/README.md), that made the API's updates of jobs wait for seconds; a third session
# merging beside the run (gin_clean_pending_list) chased the list's tail for minutes with
# a snapshot open. At boot nobody else writes and the run keeps the list to itself.

# Live, unless batch_size and batch_pause say otherwise: small batches, 2 s apart. An API
# commit waits until all the WAL written before it is on disk, the run's too, and the run
# writes about 100 kB of it per job, paced or not (bench/README.md, "Where the API's time
# goes"): batches of 1,000 with 0.2 s between them took the API's update p99 to 4-12 times
# its level before the run; 100 a second apart, to 2.9-3.7 times; 100 2 s apart, to 1.3-2.8
# times, for a run 14 times as long. With the API server up its latency comes first (the
# issue's rule); at boot the run goes at full speed.
LIVE_BATCH_SIZE = 100
LIVE_BATCH_PAUSE = 2.0

# Other sessions on the database than this run's own: the API server's (or a person's).
SQL_OTHER_SESSIONS = """
    SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND backend_type = 'client backend' AND application_name <> %(ours)s
"""


def bulk_settings(server_kb, last_batch):
    """The settings (name -> value) a writing batch raises, given the server's, in kB."""
    raised = {}
    for name, wanted in BULK_SETTINGS_KB:
        if last_batch and name in LAST_BATCH_KEEPS:
            continue
        if name in server_kb and server_kb[name] < wanted:
            raised[name] = "%dkB" % wanted
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


class CleanupOptions:
    """What a cleanup does. Validated on creation, before anything is read or written."""

    def __init__(
        self,
        threshold=None,
        uuids=None,
        retry=False,
        revoke_tokens=True,
        message=None,
        batch_size=None,
        lock_wait=DEFAULT_LOCK_WAIT,
        check_mode=False,
        diff=False,
        keep_uuids=True,
        row_lock_wait=DEFAULT_ROW_LOCK_WAIT,
        full_scan=False,
        live=DEFAULT_LIVE,
        batch_pause=None,
    ):
        self.threshold = threshold
        self.uuids = None if uuids is None else sorted(set(uuids))
        self.retry = bool(retry)
        self.revoke_tokens = bool(revoke_tokens)
        self.message = message or (DEFAULT_RETRY_MESSAGE if retry else DEFAULT_FAIL_MESSAGE)
        self.batch_size = batch_size
        self.lock_wait = lock_wait
        self.row_lock_wait = row_lock_wait
        self.full_scan = bool(full_scan)
        self.live = live
        self.batch_pause = batch_pause
        self.check_mode = bool(check_mode)
        self.diff = bool(diff)
        self.keep_uuids = bool(keep_uuids or diff)
        self._validate()

    def _validate(self):
        if self.batch_size is not None:
            check_positive_int("batch_size", self.batch_size)
        check_seconds("lock_wait", self.lock_wait)
        check_seconds("row_lock_wait", self.row_lock_wait)
        if self.batch_pause is not None:
            check_seconds("batch_pause", self.batch_pause)
        if self.live not in ("auto", True, False):
            raise RecoveryError("live must be auto, true or false, got %r" % (self.live,))
        if not self.message.strip():
            raise RecoveryError("message must not be empty")
        check_summary(self.message, self.retry)
        if self.uuids is not None:
            check_job_uuids(self.uuids)

    @property
    def target_state(self):
        return JOB_STATE_QUEUED if self.retry else JOB_STATE_FAILED


def check_seconds(name, value, positive=False):
    """`value` as float seconds, or a RecoveryError in the one style every option's check
    uses: nan and inf are refused (a wait of inf never ends, and nan compares false to
    every deadline, so it would retry without a pause), and negatives."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecoveryError("%s must be a finite number, got %r" % (name, value))
    if value < 0:
        raise RecoveryError("%s must not be negative, got %r" % (name, value))
    if positive and value == 0:
        raise RecoveryError("%s must be above 0, got %r" % (name, value))
    return float(value)


def check_summary(message, retry):
    """Refuse a log message whose longest summary (with `retry`, the note for a job failed
    instead is added to it) is longer than MAX_SUMMARY_BYTES or holds a NUL."""
    if "\x00" in message:
        raise RecoveryError(
            "option log_message must not contain a NUL character (\\x00), which PostgreSQL text cannot hold"
        )
    note = len(UNRUNNABLE_NOTE.encode("utf-8")) if retry else 0
    size = len(message.encode("utf-8", "surrogatepass"))
    if size + note > MAX_SUMMARY_BYTES:
        raise RecoveryError(
            "option log_message is %d bytes of UTF-8, more than the %d the logs' summary index takes%s"
            % (
                size,
                MAX_SUMMARY_BYTES - note,
                " with retry (which adds a %d-byte note for a job failed instead)" % note if note else "",
            )
        )


def check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecoveryError("%s must be a positive integer, got %r" % (name, value))
    return value


def check_job_uuids(uuids):
    bad = [u for u in uuids if not isinstance(u, str) or not JOB_UUID_RE.match(u)]
    if bad:
        raise RecoveryError(
            "not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): %s" % ", ".join(repr(u) for u in bad[:10])
        )


class Tally:
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


class CleanupResult:
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
        self.finished_set = []
        # Jobs another transaction kept locked for longer than row_lock_wait: few by nature.
        self.locked = []
        # With retry, jobs failed instead, as their rows name no user (SQL_RUN_AS); and
        # tokens another's work could own (SQL_TOKEN_OTHER_OWNERS): few, and always listed,
        # as each needs a person's look.
        self.not_requeued = []
        self.tokens_left_alone = []
        self.slurm = {}
        self.batches = 0
        self.live = None
        # Lines for the command's progress, said and emptied at each progress call.
        self.notes = []

    @property
    def changed(self):
        return bool(self.done_jobs.count or self.not_requeued)

    def add_batch(self, outcome):
        self.done_jobs.extend(outcome.done)
        self.skipped.extend(outcome.skipped)
        self.not_requeued.extend(outcome.not_requeued)
        self.revoked_tokens.extend(outcome.tokens)
        self.tokens_left_alone.extend(outcome.tokens_left_alone)
        self.log_uuids.extend(outcome.logs)

    def add_slurm(self, part):
        if not self.options.keep_uuids:
            part = dict((k, len(v) if isinstance(v, list) else v) for k, v in part.items())
        self.slurm = merge_slurm_results([self.slurm, part])

    def to_dict(self):
        opts = self.options
        done = self.done_jobs.as_list()
        result = {
            "changed": self.changed,
            "threshold": None if opts.threshold is None else opts.threshold.to_iso8601(),
            "threshold_source": None if opts.threshold is None else opts.threshold.source,
            "requeued_jobs" if opts.retry else "failed_jobs": done,
            "exempt": {"count": len(self.exempt), "uuids": sorted(self.exempt)},
            "no_started_at": sorted(self.unstarted),
            # Not `skipped`: Ansible reads that key of a result as "the task was skipped".
            "skipped_jobs": self.skipped.as_list(),
            "locked_jobs": sorted(self.locked),
            "running_with_finished_at": sorted(self.finished_set),
            "revoked_tokens": self.revoked_tokens.as_list(),
            "tokens_left_alone": sorted(self.tokens_left_alone, key=lambda token: token["uuid"]),
            "log_uuids": self.log_uuids.as_list(),
            "counts": {
                "jobs": self.done_jobs.count,
                "skipped_jobs": self.skipped.count,
                "revoked_tokens": self.revoked_tokens.count,
                "tokens_left_alone": len(self.tokens_left_alone),
                "logs": self.log_uuids.count,
            },
            "slurm": dict(self.slurm),
            "batches": self.batches,
            "live": self.live,
        }
        if opts.retry:
            result["not_requeued"] = sorted(self.not_requeued)
        if opts.diff:
            after = dict((u, opts.target_state) for u in done)
            after.update((u, JOB_STATE_FAILED) for u in self.not_requeued)
            result["diff"] = {
                "before": "".join("%s: %s\n" % (u, JOB_STATE_RUNNING) for u in sorted(after)),
                "after": "".join("%s: %s\n" % (u, after[u]) for u in sorted(after)),
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


class BatchOutcome:
    """What one batch did (in check mode, would do): what the transaction committed."""

    def __init__(self, done, skipped, not_requeued=()):
        self.done = done
        self.skipped = skipped
        self.not_requeued = list(not_requeued)
        self.tokens = []
        self.tokens_left_alone = []
        self.logs = []


# The `dispatch` row's message for a job `retry` failed instead (SQL_RUN_AS).
UNRUNNABLE_NOTE = (
    " It was not put back in the queue: its row names no user to run it as "
    "(modified_by_user_uuid and is_locked_by_uuid are empty or the system user), and a "
    "requeued job runs as that user."
)

# The columns of SQL_INSERT_LOGS that differ from row to row, in its parameters' names.
LOG_ROW_FIELDS = ("owners", "objects", "object_owners", "event_ats", "event_types", "summaries", "properties")

# The job columns Arvados' model serializes (1.4.3 app/models/job.rb `serialize ..., Hash`):
# the audit row holds them as objects, not as their JSON text.
SERIALIZED_JOB_COLUMNS = ("components", "script_parameters", "runtime_constraints", "tasks_summary")


def dispatch_log_row(job, message):
    """fail_job's row: owned by the job's owner, no object owner (1.4.3 crunch_dispatch.rb)."""
    return (job.owner_uuid, job.uuid, None, None, "dispatch", message, json.dumps({"text": message}))


def update_log_row(job):
    """The `update` audit row of the job's save (1.4.3 arvados_model.rb log_update)."""
    old, new = audit_attributes(job.old_row), audit_attributes(job.new_row)
    properties = {
        "old_etag": audit_etag(old),
        "old_attributes": old,
        "new_etag": audit_etag(new),
        "new_attributes": new,
    }
    event_at = db_timestamp(job.new_row["modified_at"])
    owner = system_user_uuid(job.uuid[:5])
    return (owner, job.uuid, job.owner_uuid, event_at, "update", "update of %s" % job.uuid, json.dumps(properties))


def audit_attributes(row):
    """A job row (jsonb, as PostgreSQL writes it) as Arvados' audit rows hold attributes:
    timestamps as its API writes them (1.4.3 config/initializers/time_format.rb:
    %Y-%m-%dT%H:%M:%S.%NZ) and serialized columns as objects. A serialized column still
    in the YAML Arvados wrote before 2017 stays text: this collection reads no YAML."""
    attributes = {}
    for column, value in sorted(row.items()):
        if column in SERIALIZED_JOB_COLUMNS and isinstance(value, str) and value[:1] in ("{", "["):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        elif isinstance(value, str) and TIMESTAMP_TEXT_RE.match(value):
            value = api_timestamp(value)
        attributes[column] = value
    return attributes


# A `timestamp without time zone` as to_jsonb writes it.
TIMESTAMP_TEXT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?\Z")


def api_timestamp(text):
    """'2026-11-30T10:00:00.12' -> '2026-11-30T10:00:00.120000000Z'."""
    seconds, _dot, fraction = text.partition(".")
    return "%s.%sZ" % (seconds, (fraction + "000000000")[:9])


def db_timestamp(text):
    return datetime.strptime(text.partition(".")[0], "%Y-%m-%dT%H:%M:%S").replace(
        microsecond=int((text.partition(".")[2] + "000000")[:6])
    )


def audit_etag(attributes):
    """An etag in Arvados' form: an MD5 digest in base 36 (1.4.3 lib/kind_and_etag.rb).
    Arvados digests Ruby's inspect of the attributes, which Python cannot write; this
    digests their JSON, so it changes exactly when the attributes do."""
    digest = int(hashlib.md5(json.dumps(attributes, sort_keys=True).encode("utf-8")).hexdigest(), 16)
    text = ""
    while digest:
        digest, digit = divmod(digest, 36)
        text = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + text
    return text or "0"


class JobWindows:
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
            "user_ids": users,
            "lo": [self._starts[u][0] for u in users],
            "hi": [self._reach[u][-1] for u in users],
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
        "SELECT c.relname, a.attname FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = %s "
        "AND c.relname = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped",
        ("r", list(tables)),
    ).fetchall()
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
            problems.append("table %s is missing" % table)
            continue
        missing = [c for c in columns if c not in present[table]]
        if missing:
            problems.append("table %s lacks column(s) %s" % (table, ", ".join(missing)))
    if problems:
        raise RecoveryError(
            "this database does not have the Arvados schema the cleanup needs: %s" % "; ".join(problems)
        )


def check_primary(conn):
    """Refuse a standby, before anything changes (Slurm included): it refuses writes, and
    its rows may lag behind the primary's, so even check mode would predict from the past."""
    if conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
        raise RecoveryError(
            "the database server is a standby (pg_is_in_recovery() is true): the cleanup "
            "writes, and a standby's rows may lag behind the primary's; connect to the primary"
        )


# Seconds between the progress lines while locked jobs are waited for.
PROGRESS_WHILE_WAITING = 5.0


def _first(uuids, shown=5):
    """A few UUIDs for a progress line, and how many more."""
    text = ", ".join(uuids[:shown])
    return text + (" and %d more" % (len(uuids) - shown) if len(uuids) > shown else "")


def take_advisory_lock(conn, wait, sleep=time.sleep, clock=time.monotonic):
    """Hold the collection's advisory lock for this session, waiting at most `wait` s."""
    deadline = clock() + wait
    delay = 0.1
    while True:
        if conn.execute("SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,)).fetchone()[0]:
            conn.commit()
            return
        conn.rollback()
        if clock() >= deadline:
            raise RecoveryError(
                "another arvados_fail_jobs run holds the cleanup lock (PostgreSQL advisory "
                "lock %d); waited %.0f s. Try again when it has finished." % (ADVISORY_LOCK_KEY, wait)
            )
        sleep(min(delay, max(0.0, deadline - clock())))
        delay = min(delay * 2, 2.0)


class JobCleaner:
    """Runs one cleanup on two open psycopg 3 connections to the same database.

    `listing_conn` (switched to autocommit) holds the list of Running jobs in a cursor
    WITH HOLD, a page fetched per batch (see LISTING_CURSOR), while `conn` (autocommit off)
    works through them a batch at a time, a transaction each.

    `cancel_slurm(uuids, check_mode)` makes the Slurm jobs named after `uuids` absent and
    returns the Slurm engine's result as a dict; it raises to stop the run before the
    batch touches the database. `progress(result)` is called after each batch and while
    locked jobs are waited for; `result.notes` then holds lines to say. `clock` and `sleep`
    pace the waits for locked jobs.
    """

    def __init__(
        self, conn, listing_conn, options, cancel_slurm=None, progress=None, clock=time.monotonic, sleep=time.sleep
    ):
        self.conn = conn
        # Live, the trigram index's pending list keeps the server's limit (see
        # SQL_OTHER_SESSIONS).
        self._keep_gin_limit = False
        self.listing_conn = listing_conn
        self.options = options
        self.cancel_slurm = cancel_slurm
        self.progress = progress
        self.clock = clock
        self.sleep = sleep
        self.result = CleanupResult(options)
        self._server_kb = None
        # What the run is doing, for the message of a database error.
        self.step = "connecting"
        self._batch_under_way = False
        # Jobs found locked by another transaction, to be tried again after the others.
        self._deferred = []

    def run(self):
        opts = self.options
        self.step = "setting up the session"
        for conn in (self.conn, self.listing_conn):
            # A generic plan, which psycopg's automatic preparing leads to after a few
            # batches, turns the token look-up into a slow one; custom plans see each batch.
            conn.prepare_threshold = None
            # Compiling these short queries costs more than it saves.
            conn.execute("SET jit = off")
            conn.commit()
        self.step = "checking the schema"
        check_schema(self.conn)
        check_primary(self.conn)
        self.conn.rollback()
        self.step = "taking the cleanup lock (pg_try_advisory_lock)"
        take_advisory_lock(self.conn, opts.lock_wait)
        try:
            self.step = "looking for other sessions (live or at boot)"
            self.result.live = self._is_live()
            self._keep_gin_limit = self.result.live
            self.step = "listing the Running jobs"
            for batch, last in with_last(self._qualifying_batches()):
                # The last batch merges the trigram index's pending list (see
                # BULK_SETTINGS_KB) even when some of its jobs are deferred: the tries
                # again run with the server's limit.
                self._clean_batch(batch, last)
                self._batch_done()
                self._notice_other_sessions()
                if self._batch_pause() and not last:
                    self.sleep(self._batch_pause())
            self.step = "trying the locked jobs again"
            self._retry_deferred()
        finally:
            self.conn.rollback()
            self.conn.execute("SELECT pg_advisory_unlock(%s)", (ADVISORY_LOCK_KEY,))
            self.conn.commit()
        return self.result

    def _notice_other_sessions(self):
        """With live=auto, a run that began alone turns live when others connect (the API
        server starting while a boot's run goes): from then on no API write finds a long
        pending list, once the next batch has merged it."""
        if self.options.live == "auto" and not self.result.live and self._is_live():
            self.result.live = self._keep_gin_limit = True
            self._note("other sessions connected to the database: going on as live")

    def _batch_pause(self):
        """Seconds between batches. Check mode writes nothing, so nobody waits for its WAL:
        it does not pause."""
        if self.options.check_mode:
            return 0.0
        if self.options.batch_pause is not None:
            return self.options.batch_pause
        return LIVE_BATCH_PAUSE if self.result.live else 0.0

    def _batch_size(self):
        if self.options.batch_size is not None:
            return self.options.batch_size
        return LIVE_BATCH_SIZE if self.result.live else DEFAULT_BATCH_SIZE

    def _is_live(self):
        if self.options.live != "auto":
            return self.options.live
        others = self.conn.execute(SQL_OTHER_SESSIONS, {"ours": APPLICATION_NAME}).fetchone()[0]
        self.conn.rollback()
        return others > 0

    def _batch_done(self):
        self.result.batches += 1
        self._report()

    def _report(self):
        if self.progress is not None:
            self.progress(self.result)
        del self.result.notes[:]

    def _note(self, text):
        if self.progress is not None:
            self.result.notes.append(text)

    def failure_context(self):
        """What a database error interrupted, and what of the work it left done."""
        if self._batch_under_way:
            return "the batch under way was rolled back (a rerun finishes the work)"
        if self.result.batches:
            return "while %s, after %d batch(es) committed whole (a rerun finishes the work)" % (
                self.step,
                self.result.batches,
            )
        return "while %s, nothing was changed" % self.step

    def _listing_query(self):
        opts = self.options
        if opts.uuids is not None:
            where = WHERE_UUIDS
        elif opts.full_scan:
            where = WHERE_ALL
        else:
            where = WHERE_UNFINISHED
        return SQL_RUNNING.format(where=where), {"uuids": opts.uuids}

    def _running_jobs(self):
        """(uuid, started_at, finished_at) of the Running jobs, a page at a time."""
        conn = self.listing_conn
        conn.autocommit = True
        query, params = self._listing_query()
        cursor = conn.cursor(name=LISTING_CURSOR, withhold=True)
        try:
            cursor.execute(query, params)
            while True:
                page = cursor.fetchmany(self._batch_size())
                if not page:
                    break
                yield from page
        finally:
            cursor.close()

    def _qualifying_batches(self):
        """Yield lists of job UUIDs that qualify, a batch at a time, exempt ones apart."""
        batch = []
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

    def _qualifies(self, uuid, started_at):
        verdict = classify_running_job(started_at, self.options.threshold)
        if started_at is None:
            self.result.unstarted.append(uuid)
        if verdict == EXEMPT:
            self.result.exempt.append(uuid)
        return verdict == QUALIFIES

    def _retry_deferred(self):
        """Try the locked jobs again, without waiting on any row, until `row_lock_wait` has
        passed; those still locked then are reported, and a rerun picks them up."""
        opts = self.options
        deadline = self.clock() + opts.row_lock_wait
        delay = 0.1
        next_note = self.clock()
        while self._deferred:
            if self.clock() >= next_note:
                self._note(
                    "waiting up to %.0f s more for %d job(s) locked by another "
                    "transaction: %s" % (max(0.0, deadline - self.clock()), len(self._deferred), _first(self._deferred))
                )
                self._report()
                next_note = self.clock() + PROGRESS_WHILE_WAITING
            self.sleep(min(delay, max(0.0, deadline - self.clock())))
            delay = min(delay * 2, 1.0)
            uuids, self._deferred = self._deferred, []
            size = self._batch_size()
            for start in range(0, len(uuids), size):
                # The Slurm step was done when these jobs' batch first came: not again.
                self._clean_batch(uuids[start : start + size], last=True, first_try=False)
            if self._deferred and self.clock() >= deadline:
                self.result.locked.extend(self._deferred)
                self._note(
                    "%d job(s) still locked by another transaction after %.0f s, "
                    "left for a rerun: %s" % (len(self._deferred), opts.row_lock_wait, _first(self._deferred))
                )
                self._report()
                self._deferred = []

    def _clean_batch(self, uuids, last, first_try=True):
        opts = self.options
        if first_try and self.cancel_slurm is not None:
            self.result.add_slurm(self.cancel_slurm(uuids, opts.check_mode))
        outcome = self._batch_transaction(uuids, last)
        if outcome is None:
            # A lock (a token's, a table's) was waited for longer than row_lock_wait.
            outcome = BatchOutcome([], [])
            locked = list(uuids)
        else:
            # Only what has been committed (or, in check mode, what would be) is reported.
            skipped = outcome.skipped
            locked = self._still_qualifying(skipped) if skipped and not opts.check_mode else []
            outcome.skipped[:] = [u for u in skipped if u not in set(locked)]
        self._deferred.extend(locked)
        if locked and first_try:
            self._note(
                "%d job(s) locked by another transaction, tried again after the "
                "others: %s" % (len(locked), _first(locked))
            )
        self.result.add_batch(outcome)
        if outcome.tokens_left_alone:
            self._note(
                "%d token(s) left valid: another job or pipeline instance of their user could own them: %s"
                % (len(outcome.tokens_left_alone), _first([t["uuid"] for t in outcome.tokens_left_alone]))
            )

    def _batch_transaction(self, uuids, last):
        """The batch's outcome, committed (in check mode rolled back); None when a lock
        was waited for longer than lock_timeout, the batch then rolled back."""
        opts = self.options
        self._batch_under_way = True
        try:
            if not opts.check_mode:
                self._bound_lock_waits()
                self._raise_bulk_settings(last)
            outcome = self._write_batch(uuids)
        except BaseException as error:
            self.conn.rollback()
            if getattr(error, "sqlstate", None) != SQLSTATE_LOCK_TIMEOUT:
                raise  # still "under way" for the error's message
            self._batch_under_way = False
            return None
        if opts.check_mode:
            self.conn.rollback()
        else:
            self.conn.commit()
        self._batch_under_way = False
        return outcome

    def _bound_lock_waits(self):
        """lock_timeout for this batch's transaction: no lock it needs is waited for
        longer than row_lock_wait (job rows themselves are never waited for)."""
        # An int formatted by Python: SET takes no bound parameters.
        self.conn.execute("SET LOCAL lock_timeout = %d" % max(1, int(self.options.row_lock_wait * 1000)))

    def _still_qualifying(self, uuids):
        """Those of `uuids` that still qualify as committed: locked, not changed."""
        params = {
            "uuids": uuids,
            "threshold": (None if self.options.threshold is None else self.options.threshold.to_db_timestamp()),
        }
        found = [row[0] for row in self.conn.execute(SQL_STILL_QUALIFYING, params).fetchall()]
        self.conn.rollback()
        return found

    def _raise_bulk_settings(self, last):
        """Raise, for this batch's transaction, the settings BULK_SETTINGS_KB explains."""
        if self._server_kb is None:
            names = [name for name, _kb in BULK_SETTINGS_KB]
            self._server_kb = dict(self.conn.execute(SQL_SETTINGS_KB, {"names": names}).fetchall())
        raised = bulk_settings(self._server_kb, last or self._keep_gin_limit)
        if raised:
            self.conn.execute(SQL_SET_LOCAL, {"names": list(raised), "values": list(raised.values())})

    def _write_batch(self, uuids):
        """All of one batch's statements, in the transaction the caller ends."""
        opts = self.options
        params = self._batch_params(uuids)
        if opts.check_mode:
            jobs = self._batch_jobs(SQL_BATCH_JOBS, params)
            unrunnable = [job for job in jobs if opts.retry and job.run_as is None]
        elif opts.retry:
            jobs = self._batch_jobs(SQL_REQUEUE_JOBS, params)
            unrunnable = self._batch_jobs(SQL_FAIL_UNRUNNABLE, params)
        else:
            jobs, unrunnable = self._batch_jobs(SQL_FAIL_JOBS, params), []
        ended = jobs if opts.check_mode else jobs + unrunnable
        unrunnable_set = set(job.uuid for job in unrunnable)
        done = [job.uuid for job in ended if job.uuid not in unrunnable_set]
        ended_set = set(job.uuid for job in ended)
        skipped = [u for u in uuids if u not in ended_set]
        outcome = BatchOutcome(done, skipped, not_requeued=sorted(unrunnable_set))
        if not ended:
            return outcome
        if opts.revoke_tokens:
            self._tokens(ended, uuids, outcome)
        if opts.check_mode:
            return outcome
        if opts.retry and done:
            self.conn.execute(SQL_DELETE_TASKS, {"uuids": done})
        outcome.logs.extend(self._insert_logs(jobs, unrunnable))
        return outcome

    def _batch_params(self, uuids):
        opts = self.options
        return {
            "uuids": uuids,
            "threshold": None if opts.threshold is None else opts.threshold.to_db_timestamp(),
            "system_user": system_user_uuid(uuids[0][:5]),
        }

    def _batch_jobs(self, statement, params):
        return [BatchJob(*row) for row in self.conn.execute(statement, params).fetchall()]

    def _tokens(self, jobs, batch, outcome):
        """The batch's job tokens into `outcome`: revoked, or in check mode listed. Those
        that could be another's (SQL_TOKEN_OTHER_OWNERS) are left alone and reported."""
        candidates = self._token_candidates(jobs)
        if not candidates:
            return
        others = self._other_owners(candidates, batch)
        outcome.tokens_left_alone.extend(
            {"uuid": token_uuid, "user_uuid": user_uuid, "could_belong_to": others[token_id]}
            for token_id, token_uuid, user_uuid, _made in candidates
            if token_id in others
        )
        tokens = [(token_id, token_uuid) for token_id, token_uuid, _user, _made in candidates if token_id not in others]
        if self.options.check_mode or not tokens:
            outcome.tokens.extend(token_uuid for _token_id, token_uuid in tokens)
            return
        revoked = self.conn.execute(SQL_REVOKE_TOKENS, {"ids": [token_id for token_id, _uuid in tokens]})
        outcome.tokens.extend(row[0] for row in revoked)

    def _token_candidates(self, jobs):
        """(id, uuid, user uuid, created_at) of the tokens in the jobs' windows."""
        users = sorted(set(job.is_locked_by_uuid for job in jobs if job.is_locked_by_uuid is not None))
        user_ids = dict(self.conn.execute(SQL_USER_IDS, {"uuids": users}).fetchall()) if users else {}
        windows = JobWindows(
            (user_ids[job.is_locked_by_uuid], job.created_at, job.started_at)
            for job in jobs
            if job.is_locked_by_uuid in user_ids and job.started_at is not None
        )
        if not windows:
            return []
        user_uuids = dict((user_id, user_uuid) for user_uuid, user_id in user_ids.items())
        candidates = self.conn.execute(SQL_TOKEN_CANDIDATES, windows.bounds()).fetchall()
        return [
            (token_id, uuid, user_uuids[user_id], created_at)
            for token_id, uuid, user_id, created_at in candidates
            if windows.contain(user_id, created_at)
        ]

    def _other_owners(self, candidates, batch):
        """{token id: uuid of a job or pipeline instance, not ended by this run, that could own it}."""
        opts = self.options
        params = {
            "ids": [c[0] for c in candidates],
            "users": [c[2] for c in candidates],
            "made": [c[3] for c in candidates],
            "batch": list(batch),
            "run_uuids": opts.uuids,
            "every_row": opts.uuids is not None or opts.full_scan,
            "threshold": None if opts.threshold is None else opts.threshold.to_db_timestamp(),
        }
        return dict(self.conn.execute(SQL_TOKEN_OTHER_OWNERS, params).fetchall())

    def _insert_logs(self, jobs, unrunnable):
        """Arvados' two rows per job (SQL_INSERT_LOGS): every `dispatch` row, then every
        `update` row."""
        message = self.options.message
        dispatch = [(job, message) for job in jobs] + [(job, message + UNRUNNABLE_NOTE) for job in unrunnable]
        rows = [dispatch_log_row(job, text) for job, text in dispatch]
        rows += [update_log_row(job) for job, _text in dispatch]
        columns = list(zip(*rows))
        params = dict(zip(LOG_ROW_FIELDS, (list(column) for column in columns)))
        params["system_users"] = [system_user_uuid(job_uuid[:5]) for job_uuid in params["objects"]]
        params["log_uuids"] = [new_uuid(job_uuid[:5], LOG_INFIX) for job_uuid in params["objects"]]
        return [row[0] for row in self.conn.execute(SQL_INSERT_LOGS, params)]
