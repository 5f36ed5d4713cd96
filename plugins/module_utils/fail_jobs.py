# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fail or requeue the Arvados jobs a reboot left ``Running``, directly in PostgreSQL.

This is the engine behind the ``arvados_fail_jobs`` module and the ``arvados-fail-jobs``
command. It has no Ansible import: the caller hands it an open connection (pg_driver's), the
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
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import re
import time
from datetime import datetime
from typing import NamedTuple, Optional

from .arvados_db_config import APPLICATION_NAME
from .errors import RecoveryError
from .fail_jobs_threshold import EXEMPT, QUALIFIES, classify_running_job
from .option_bounds import MAX_BATCH_SIZE, MAX_PG_TIMEOUT_SECONDS, MAX_SLEEP_SECONDS
from .options import Option, auto_or_bool, check_text, count, seconds
from .pg_driver import sqlstate_of
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

# Locks: a batch never waits on a lock while it holds job rows. It first takes the tables
# it writes (LOCK TABLE in the modes its statements take anyway, so nobody else waits more)
# while it holds no row: a table locked by a migration is waited for there, within what
# is left of the run's one budget of `row_lock_wait` (LockBudget). Then every row lock is
# taken with SKIP LOCKED: the job rows, then the tokens to revoke, then (retry) the tasks
# to delete. A job whose row is held is skipped; a job whose token or task another
# transaction holds is set aside before anything is written (its row lock is let go at
# commit); both are tried again after the other batches, while the budget lasts, and
# those still locked then are reported and left for a rerun. Waiting on the rows instead
# (lock_timeout for the batch) held the batch's other rows, and so stalled the API
# server's writes to those jobs, as long as it waited, and a timeout rolled back the
# whole batch: one held token cost 100 jobs a wait on every pass (issue 26).
#
# The update re-checks and changes each locked row in one pass. It returns the row as it
# was (`o`, read by the subquery) and as it is now (`j`), whole, for the `update` audit row.
SQL_LOCK_JOBS = "SELECT {columns}, {run_as} FROM jobs j WHERE {where} FOR UPDATE OF j SKIP LOCKED".format(
    columns=batch_columns("j"), run_as=run_as("j"), where=SQL_QUALIFYING
)
SQL_LOCK_TOKENS = "SELECT id FROM api_client_authorizations WHERE id = ANY(%(ids)s::bigint[]) FOR UPDATE SKIP LOCKED"
# Two reads of the same tasks: a job has a task another transaction holds when the
# second, which skips held rows, finds fewer of its tasks than the first.
SQL_COUNT_TASKS = "SELECT job_uuid, count(*) FROM job_tasks WHERE job_uuid = ANY(%(uuids)s::text[]) GROUP BY job_uuid"
SQL_LOCK_TASKS = "SELECT job_uuid FROM job_tasks WHERE job_uuid = ANY(%(uuids)s::text[]) FOR UPDATE SKIP LOCKED"

# The tables a writing batch locks first, in the mode its own statements take (ROW
# EXCLUSIVE for those it writes, ACCESS SHARE for those it only reads). The tokens' and
# tasks' tables only when the run writes them.
WRITTEN_TABLES = ("jobs", "logs")
READ_TABLES = ("users", "containers", "pipeline_instances")
TOKEN_TABLE = "api_client_authorizations"
TASK_TABLE = "job_tasks"

# After its tables are locked a batch waits on no row (SKIP LOCKED), but a few locks
# PostgreSQL takes itself remain: the queue lock of a commit that notifies, a unique index
# entry another transaction is inserting. They are held for moments; this bounds them, and
# a batch that meets the bound is set aside whole like one whose table was locked.
ROW_PHASE_LOCK_TIMEOUT_MS = 500
# lock_timeout is an int of milliseconds.
MAX_LOCK_TIMEOUT_MS = 2147483647

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
        SELECT l.uuid, l.owner_uuid, NULL, l.modified_by_user_uuid, l.object_uuid, l.object_owner_uuid,
               COALESCE(l.event_at, {now}), l.event_type, l.summary, l.properties, {now}, {now}, {now}
        FROM unnest(%(log_uuids)s::text[], %(owners)s::text[], %(system_users)s::text[],
                    %(objects)s::text[], %(object_owners)s::text[], %(event_ats)s::timestamp[],
                    %(event_types)s::text[], %(summaries)s::text[], %(properties)s::text[])
             WITH ORDINALITY
             AS l(uuid, owner_uuid, modified_by_user_uuid, object_uuid, object_owner_uuid,
                  event_at, event_type, summary, properties, position)
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


# The cleanup's own options, declared once: CleanupOptions checks its values with them and
# fail_jobs_run's table, which the module and the command are made from, holds them.
CLEANUP_OPTIONS = {
    "batch_size": Option(
        "int",
        check=count(MAX_BATCH_SIZE),
        help="jobs per transaction (default: %d at boot, %d when live)" % (DEFAULT_BATCH_SIZE, LIVE_BATCH_SIZE),
    ),
    "lock_wait": Option(
        "float",
        DEFAULT_LOCK_WAIT,
        check=seconds(MAX_SLEEP_SECONDS),
        help="seconds to wait for another cleanup run to finish",
    ),
    "row_lock_wait": Option(
        "float",
        DEFAULT_ROW_LOCK_WAIT,
        # Also the batches' lock_timeout.
        check=seconds(MAX_PG_TIMEOUT_SECONDS),
        help="seconds to keep trying jobs another transaction holds locked "
        "(never waiting on them while holding other rows); those still "
        "locked then are reported and left for a rerun",
    ),
    "live": Option(
        "raw",
        DEFAULT_LIVE,
        check=auto_or_bool,
        help="whether the API server uses the database during the run: true (keep its "
        "writes fast), false (at boot: full speed), auto (true when other sessions "
        "are connected to the database)",
    ),
    "batch_pause": Option(
        "float",
        check=seconds(MAX_SLEEP_SECONDS),
        help="seconds to pause between batches, to leave the database to "
        "other clients (default: %g when live, 0 at boot)" % LIVE_BATCH_PAUSE,
    ),
}


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
        for name, option in CLEANUP_OPTIONS.items():
            setattr(self, name, option.parse_value(name, getattr(self, name)))
        if not self.message.strip():
            raise RecoveryError("message must not be empty")
        check_summary(self.message, self.retry)
        if self.uuids is not None:
            check_job_uuids(self.uuids)

    @property
    def target_state(self):
        return JOB_STATE_QUEUED if self.retry else JOB_STATE_FAILED


def check_summary(message, retry):
    """Refuse a log message whose longest summary (with `retry`, the note for a job failed
    instead is added to it) is longer than MAX_SUMMARY_BYTES, or that PostgreSQL cannot store."""
    check_text("log_message", message)
    note = len(UNRUNNABLE_NOTE.encode("utf-8")) if retry else 0
    size = len(message.encode("utf-8"))
    if size + note > MAX_SUMMARY_BYTES:
        raise RecoveryError(
            "option log_message is %d bytes of UTF-8, more than the %d the logs' summary index takes%s"
            % (
                size,
                MAX_SUMMARY_BYTES - note,
                " with retry (which adds a %d-byte note for a job failed instead)" % note if note else "",
            )
        )


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

    def __init__(self, done, skipped, not_requeued=(), set_aside=()):
        self.done = done
        self.skipped = skipped
        self.not_requeued = list(not_requeued)
        # Jobs whose token or task another transaction held: left as they were, for the
        # next try (see SQL_LOCK_JOBS).
        self.set_aside = list(set_aside)
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


class TokenCandidate(NamedTuple):
    """A token in a job's window (SQL_TOKEN_CANDIDATES)."""

    id: int
    uuid: str
    user_uuid: str
    created_at: datetime


def window_holds(job, token):
    """Whether `token` was made in `job`'s window, for the job's user."""
    return (
        job.started_at is not None
        and job.is_locked_by_uuid == token.user_uuid
        and job.created_at <= token.created_at <= job.started_at
    )


class TokenPlan:
    """A batch's tokens: those to revoke, and those another's work could own, with it."""

    def __init__(self, to_revoke=(), left_alone=()):
        self.to_revoke = list(to_revoke)
        self.left_alone = list(left_alone)

    def set_aside_for(self, held, jobs):
        """The uuids of `jobs` whose window holds a token of `held` (another transaction
        holds its row); those tokens are not revoked by this batch."""
        held_ids = set(token.id for token in held)
        self.to_revoke = [token for token in self.to_revoke if token.id not in held_ids]
        return [job.uuid for job in jobs if any(window_holds(job, token) for token in held)]

    def report(self, ended, outcome):
        """The tokens of the `ended` jobs into `outcome`: to revoke, and left alone. A
        token only a set-aside job's window holds waits for that job's next try."""
        windows = JobWindows(
            (job.is_locked_by_uuid, job.created_at, job.started_at) for job in ended if job.started_at is not None
        )
        outcome.tokens.extend(t.uuid for t in self.to_revoke if windows.contain(t.user_uuid, t.created_at))
        outcome.tokens_left_alone.extend(
            {"uuid": t.uuid, "user_uuid": t.user_uuid, "could_belong_to": owner}
            for t, owner in self.left_alone
            if windows.contain(t.user_uuid, t.created_at)
        )

    def ids(self, uuids):
        wanted = set(uuids)
        return [token.id for token in self.to_revoke if token.uuid in wanted]


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


class LockBudget:
    """The run's one allowance of `row_lock_wait` seconds for waiting on locks: spent by
    every wait for a table's lock and by the tries again of locked jobs, never renewed
    per batch or per pass."""

    def __init__(self, seconds, clock=time.monotonic):
        self.seconds = seconds
        self.spent = 0.0
        self.clock = clock

    def remaining(self):
        return max(0.0, self.seconds - self.spent)

    def spend(self, seconds):
        self.spent += max(0.0, seconds)

    def lock_timeout_ms(self):
        """What is left as PostgreSQL's lock_timeout: at least 1 ms, as 0 means no bound."""
        return min(MAX_LOCK_TIMEOUT_MS, max(1, int(self.remaining() * 1000)))


class Privilege(NamedTuple):
    """A table privilege a real run needs, and what for."""

    table: str
    privilege: str
    purpose: str


def needed_privileges(options):
    """The table privileges a real run of `options` uses. Table privileges, not column
    ones: a batch locks its tables first (LOCK TABLE), which PostgreSQL allows by the
    table's own privileges only."""
    needs = [
        Privilege("jobs", "SELECT", "to read the jobs"),
        Privilege("jobs", "UPDATE", "to lock and change the jobs"),
        Privilege("logs", "SELECT", "to read the ids of its log rows"),
        Privilege("logs", "INSERT", "to write the log rows"),
    ]
    if options.revoke_tokens:
        needs += [
            Privilege(TOKEN_TABLE, "SELECT", "to find the jobs' tokens"),
            Privilege(TOKEN_TABLE, "UPDATE", "to lock and expire the jobs' tokens"),
        ]
        needs += [Privilege(table, "SELECT", "to tell whose tokens they are") for table in READ_TABLES]
    if options.retry:
        needs += [
            Privilege(TASK_TABLE, "SELECT", "to find the requeued jobs' tasks"),
            Privilege(TASK_TABLE, "UPDATE", "to lock the tasks it deletes without waiting"),
            Privilege(TASK_TABLE, "DELETE", "to delete the requeued jobs' tasks"),
        ]
    return needs


SQL_HAS_PRIVILEGES = """
    SELECT n.position, has_table_privilege(n.tab::regclass, n.privilege)
    FROM unnest(%(tables)s::text[], %(privileges)s::text[]) WITH ORDINALITY AS n(tab, privilege, position)
"""
# The logs' ids come from their sequence (nextval), which needs its own privilege.
SQL_LOG_SEQUENCE = """
    SELECT s, has_sequence_privilege(s, 'USAGE')
    FROM pg_get_serial_sequence('logs', 'id') AS s WHERE s IS NOT NULL
"""


def missing_privileges(conn, options):
    """The privileges of needed_privileges (and the logs' id sequence) the current
    database user lacks, as phrases naming privilege, table and purpose."""
    needs = needed_privileges(options)
    rows = conn.execute(
        SQL_HAS_PRIVILEGES,
        {"tables": [n.table for n in needs], "privileges": [n.privilege for n in needs]},
    ).fetchall()
    granted = dict(rows)
    missing = [
        "%s on table %s (%s)" % (need.privilege, need.table, need.purpose)
        for position, need in enumerate(needs, 1)
        if not granted.get(position)
    ]
    for sequence, usable in conn.execute(SQL_LOG_SEQUENCE).fetchall():
        if not usable:
            missing.append("USAGE on sequence %s (to number the log rows)" % sequence)
    return missing


def check_privileges(conn, options):
    """Fail, before Slurm is asked and before any row is written, when the database user
    may not do what a real run does; check mode fails the same way, as it predicts."""
    missing = missing_privileges(conn, options)
    if missing:
        user = conn.execute("SELECT current_user").fetchone()[0]
        raise RecoveryError(
            "the database user %s lacks privileges a run needs, so nothing was changed "
            "(no Slurm job cancelled, no row written): %s; grant them (GRANT ... ON ... TO %s) "
            "or connect as the Arvados database user" % (user, "; ".join(missing), user)
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


def connection_lost(conn):
    """Whether the driver has found `conn` dead (closed, or its server session gone)."""
    return bool(getattr(conn, "closed", False) or getattr(conn, "broken", False))


def close_listing(cursor, conn):
    """Close the listing's cursor. On a connection that died meanwhile the server dropped
    the cursor with the session, and closing fails: that failure is not raised, as the
    error that ended the run (or the listing) is the one to tell."""
    try:
        cursor.close()
    except Exception:  # pylint: disable=broad-except
        if not connection_lost(conn):
            raise


class JobCleaner:
    """Runs one cleanup on two open connections (pg_driver's) to the same database.

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
        # The run's one allowance for waiting on locks (row_lock_wait).
        self._lock_budget = LockBudget(options.row_lock_wait, clock)
        # The jobs of the batch under way whose Slurm step is done: if its transaction
        # fails they are Running without a Slurm job, and the error names them.
        self._slurm_done = []
        # The locked jobs of a pass of tries again that its batches have not reached yet.
        self._retrying = []

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
        self.step = "checking the database user's privileges"
        check_privileges(self.conn, opts)
        self.conn.rollback()
        self.step = "taking the cleanup lock (pg_try_advisory_lock)"
        take_advisory_lock(self.conn, opts.lock_wait)
        try:
            self.step = "looking for other sessions (live or at boot)"
            self.result.live = self._is_live()
            self._keep_gin_limit = self.result.live
            self.step = "listing the Running jobs"
            # Closed here, not by the garbage collector: a generator left suspended by an
            # error would close its server-side cursor later, on a connection closed by
            # then, and Python would print that second error as "Exception ignored".
            with contextlib.closing(self._qualifying_batches()) as batches:
                for batch, last in with_last(batches):
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
            # A dead session has let go of its lock; trying to unlock it would only put
            # "the connection is lost" in place of the error that says why it died.
            if not connection_lost(self.conn):
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

    def _stranded_note(self):
        """For an error that ends the run before the batch under way changed anything:
        the jobs set aside earlier, whose Slurm jobs are gone already."""
        stranded = self._without_slurm_job()
        if not stranded:
            return ""
        return (
            "; %d job(s) set aside earlier as locked have no Slurm job and are still "
            "Running: %s; a rerun finishes them" % (len(stranded), ", ".join(stranded))
        )

    def _without_slurm_job(self):
        """The jobs whose Slurm step is done and whose rows no committed batch changed:
        the batch under way's and those set aside as locked."""
        if self.cancel_slurm is None or self.options.check_mode:
            return []
        return sorted(set(self._slurm_done) | set(self._deferred) | set(self._retrying))

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
            close_listing(cursor, conn)

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

    def _clean_batch(self, uuids, last, first_try=True):
        opts = self.options
        if first_try and self.cancel_slurm is not None:
            try:
                self.result.add_slurm(self.cancel_slurm(uuids, opts.check_mode))
            except RecoveryError as error:
                note = self._stranded_note()
                if not note:
                    raise
                raise RecoveryError(str(error) + note) from None
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
            skipped = outcome.skipped
            held = self._still_qualifying(skipped) if skipped and not opts.check_mode else []
            outcome.skipped[:] = [u for u in skipped if u not in set(held)]
            locked = held + outcome.set_aside
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

    def _batch_transaction(self, uuids, last):
        """The batch's outcome, committed (in check mode rolled back); None when a table's
        lock was not had within the run's lock budget, the batch then rolled back."""
        opts = self.options
        self._batch_under_way = True
        try:
            if not opts.check_mode:
                self._lock_tables()
                self._raise_bulk_settings(last)
            outcome = self._write_batch(uuids)
            if opts.check_mode:
                self.conn.rollback()
            else:
                self.conn.commit()
        except BaseException as error:
            if not connection_lost(self.conn):
                self.conn.rollback()
            if sqlstate_of(error) != SQLSTATE_LOCK_TIMEOUT:
                raise  # still "under way" for the error's message
            self._batch_under_way = False
            return None
        self._batch_under_way = False
        return outcome

    def _lock_tables(self):
        """Lock the tables the batch writes and reads before it holds any row, waiting at
        most what is left of the run's lock budget, and spending it; then bound the locks
        PostgreSQL itself takes later (ROW_PHASE_LOCK_TIMEOUT_MS)."""
        written = list(WRITTEN_TABLES)
        read = []
        if self.options.revoke_tokens:
            written.append(TOKEN_TABLE)
            read.extend(READ_TABLES)
        if self.options.retry:
            written.append(TASK_TABLE)
        # Ints and the collection's own table names formatted by Python: SET and LOCK
        # take no bound parameters.
        self.conn.execute("SET LOCAL lock_timeout = %d" % self._lock_budget.lock_timeout_ms())
        started = self.clock()
        try:
            self.conn.execute("LOCK TABLE %s IN ROW EXCLUSIVE MODE" % ", ".join(written))
            if read:
                self.conn.execute("LOCK TABLE %s IN ACCESS SHARE MODE" % ", ".join(read))
        finally:
            self._lock_budget.spend(self.clock() - started)
        self.conn.execute("SET LOCAL lock_timeout = %d" % ROW_PHASE_LOCK_TIMEOUT_MS)

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
        if self.options.check_mode:
            return self._predict_batch(uuids)
        opts = self.options
        params = self._batch_params(uuids)
        locked = self._batch_jobs(SQL_LOCK_JOBS, params)
        tokens = self._token_plan(locked, uuids) if opts.revoke_tokens else TokenPlan()
        set_aside = set(tokens.set_aside_for(self._held_tokens(tokens.to_revoke), locked))
        if opts.retry:
            set_aside.update(
                self._jobs_with_held_tasks([j.uuid for j in locked if j.uuid not in set_aside and j.run_as])
            )
        params["uuids"] = [job.uuid for job in locked if job.uuid not in set_aside]
        jobs, unrunnable = [], []
        if params["uuids"] and opts.retry:
            jobs = self._batch_jobs(SQL_REQUEUE_JOBS, params)
            unrunnable = self._batch_jobs(SQL_FAIL_UNRUNNABLE, params)
        elif params["uuids"]:
            jobs = self._batch_jobs(SQL_FAIL_JOBS, params)
        ended = jobs + unrunnable
        outcome = self._outcome(uuids, ended, unrunnable, set_aside)
        if not ended:
            return outcome
        tokens.report(ended, outcome)
        if outcome.tokens:
            revoked = self.conn.execute(SQL_REVOKE_TOKENS, {"ids": tokens.ids(outcome.tokens)})
            outcome.tokens[:] = [row[0] for row in revoked]
        if opts.retry and outcome.done:
            self.conn.execute(SQL_DELETE_TASKS, {"uuids": outcome.done})
        outcome.logs.extend(self._insert_logs(jobs, unrunnable))
        return outcome

    def _predict_batch(self, uuids):
        """Check mode: what _write_batch would do, read without a lock or a write."""
        opts = self.options
        jobs = self._batch_jobs(SQL_BATCH_JOBS, self._batch_params(uuids))
        unrunnable = [job for job in jobs if opts.retry and job.run_as is None]
        outcome = self._outcome(uuids, jobs, unrunnable, set())
        if jobs and opts.revoke_tokens:
            self._token_plan(jobs, uuids).report(jobs, outcome)
        return outcome

    @staticmethod
    def _outcome(uuids, ended, unrunnable, set_aside):
        unrunnable_set = set(job.uuid for job in unrunnable)
        done = [job.uuid for job in ended if job.uuid not in unrunnable_set]
        ended_set = set(job.uuid for job in ended)
        skipped = [u for u in uuids if u not in ended_set and u not in set_aside]
        return BatchOutcome(done, skipped, not_requeued=sorted(unrunnable_set), set_aside=sorted(set_aside))

    def _batch_params(self, uuids):
        opts = self.options
        return {
            "uuids": uuids,
            "threshold": None if opts.threshold is None else opts.threshold.to_db_timestamp(),
            "system_user": system_user_uuid(uuids[0][:5]),
        }

    def _batch_jobs(self, statement, params):
        return [BatchJob(*row) for row in self.conn.execute(statement, params).fetchall()]

    def _token_plan(self, jobs, batch):
        """The tokens in `jobs`' windows: those to revoke, and those another's work could
        own (SQL_TOKEN_OTHER_OWNERS), to leave alone and report."""
        candidates = self._token_candidates(jobs)
        others = self._other_owners(candidates, batch) if candidates else {}
        return TokenPlan(
            [TokenCandidate(*c) for c in candidates if c[0] not in others],
            [(TokenCandidate(*c), others[c[0]]) for c in candidates if c[0] in others],
        )

    def _held_tokens(self, tokens):
        """Those of `tokens` another transaction holds: the others are locked for this batch."""
        if not tokens:
            return []
        got = set(row[0] for row in self.conn.execute(SQL_LOCK_TOKENS, {"ids": [t.id for t in tokens]}))
        return [token for token in tokens if token.id not in got]

    def _jobs_with_held_tasks(self, uuids):
        """Those of `uuids` with a task another transaction holds: the tasks of the others
        are locked for this batch, to be deleted."""
        if not uuids:
            return []
        counts = dict(self.conn.execute(SQL_COUNT_TASKS, {"uuids": uuids}).fetchall())
        for (job_uuid,) in self.conn.execute(SQL_LOCK_TASKS, {"uuids": uuids}).fetchall():
            counts[job_uuid] -= 1
        return sorted(job_uuid for job_uuid, left in counts.items() if left > 0)

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
