# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cleanup's SQL: every statement of a run, with why it is written the way it is.

Only text and the row a batch's statements return (BatchJob): no statement is run here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Iterable, NamedTuple, Optional

from .._database.driver import SQL_NOW_UTC
from .audit_rows import JOB_SERIALIZED, JOBS, TOKEN_SERIALIZED, TOKENS, properties_sql

# Ordered by user, then start, when live: a batch then holds the jobs of few users over a
# short time, which keeps the token look-up of each batch (SQL_TOKEN_CANDIDATES,
# SQL_TOKEN_OTHER_OWNERS) to few users' tokens. At boot, where the run reads its tokens once
# (_cleanup.tokens.TokenOwners), in start order: the order the jobs and their tokens were
# made in, so that a batch's rows share heap and index pages, which each checkpoint cycle
# writes whole to the WAL once (bench/README.md, "Whose pages the WAL holds": 21% less WAL).
#
# Arvados' own cleanup takes every Running job started before the threshold, whatever
# `finished_at` says (fail_jobs, 1.4.3 services/api/lib/crunch_dispatch.rb:870), and 1.4.3's
# Job model lets a Running job have one (its fixture `runningbarbaz`,
# services/api/test/fixtures/jobs.yml): `full_scan`, the default, reads them all. No index
# leads with `state` (it is the 16th column of jobs_search_index), so that reads the table.
# `finished_at` has its own btree index (index_jobs_on_finished_at, in structure.sql from
# 1.4.3 to 3.2.1) and btree indexes hold NULLs: without `full_scan`, `finished_at IS NULL`
# reads the unfinished jobs only, and misses the Running rows with `finished_at` set.
# `uuids` reads by the uuid index. Rows with `finished_at` set are reported in
# `running_with_finished_at`.
SQL_RUNNING = """
    SELECT uuid, started_at, finished_at FROM jobs
    WHERE state = 'Running' AND {where}
    ORDER BY {order}
"""
ORDER_BY_USER = "is_locked_by_uuid, started_at, uuid"
ORDER_BY_START = "started_at, uuid"
WHERE_UNFINISHED = "finished_at IS NULL"
WHERE_UUIDS = "uuid = ANY(%(uuids)s::text[])"
WHERE_ALL = "true"

# The list is read through a cursor WITH HOLD declared outside any transaction: PostgreSQL
# runs the query at once, keeps the result on the server and ends the snapshot, and each
# page is then fetched in a transaction of its own. No snapshot of the run lives longer
# than a page or a batch (a long one would hold back vacuum's horizon for every table of
# the database), and the client's memory stays one page.
LISTING_CURSOR = "arvados_fail_jobs_running"
# A list of a page or less (a rerun with nothing left to do, a boot with few Running jobs)
# is read first as a plain query of at most a page and one row: PostgreSQL may run that on
# parallel workers, which it never does for a cursor (about half the time on the whole
# million-job table: bench/README.md, issue 40's P3). A longer list is then read through the
# cursor, so memory stays a page.
SQL_FIRST_PAGE = "{running}    LIMIT %(page_limit)s\n"

# Per batch, the jobs that still qualify. The condition is classify_running_job's, checked
# again by the database: a job that finished, or restarted after the threshold, since it
# was listed drops out here.
SQL_QUALIFYING = """
    j.uuid = ANY(%(uuids)s::text[]) AND j.state = 'Running'
    AND (%(before)s::timestamp IS NULL OR j.started_at < %(before)s::timestamp)
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
    # The change's modified_at and its `update` audit row's properties
    # (_cleanup.audit_rows); None in check mode, which changes nothing, and the
    # properties None when the run writes no audit row.
    modified_at: Optional[datetime] = None
    audit_properties: Optional[str] = None


BATCH_COLUMNS = BatchJob._fields[:5]


def batch_columns(alias: str) -> str:
    return ", ".join("%s.%s" % (alias, column) for column in BATCH_COLUMNS)


# The user a requeued job runs as next time. crunch-dispatch.rb makes a queued job's token
# for the user `jobs.modified_by_user_uuid` names (get_authorization, 1.4.3
# services/api/lib/crunch_dispatch.rb:259-279, the user at :270; the same at 1.1.0) and
# hands it to crunch-job (--job-api-token, :407), which locks the job with it first
# (1.4.3 sdk/cli/bin/crunch-job:209, `jobs/lock`; jobs_controller.rb:57-60 and
# app/models/job.rb:118-127 store the caller in `is_locked_by_uuid`). So
# `is_locked_by_uuid` names the user whose token ran the job, while `modified_by_user_uuid`
# names whoever last changed the row: an admin who raised its priority, say. The requeue
# writes this user into modified_by_user_uuid, which the next get_authorization reads, so
# `is_locked_by_uuid` wins where it names a real user; else modified_by_user_uuid (a job
# locked by the system user, or never locked). Never the system user: a requeue that wrote
# it there would run the job with an admin token. A job with neither is not requeued: it
# is failed (see SQL_FAIL_UNRUNNABLE), as nobody can be known to run it as.
SQL_USER_UUID = "^[0-9a-z]{5}-tpzed-[0-9a-z]{15}$"
SQL_SYSTEM_USER_SUFFIX = "-tpzed-000000000000000"
SQL_RUN_AS = """
    CASE WHEN {alias}.is_locked_by_uuid ~ '{user}' AND right({alias}.is_locked_by_uuid, {length}) <> '{system}'
         THEN {alias}.is_locked_by_uuid
         WHEN {alias}.modified_by_user_uuid ~ '{user}'
              AND right({alias}.modified_by_user_uuid, {length}) <> '{system}'
         THEN {alias}.modified_by_user_uuid
    END
"""


def run_as(alias: str) -> str:
    return SQL_RUN_AS.format(
        alias=alias, user=SQL_USER_UUID, system=SQL_SYSTEM_USER_SUFFIX, length=len(SQL_SYSTEM_USER_SUFFIX)
    ).strip()


SQL_BATCH_JOBS = "SELECT {columns}, {run_as} FROM jobs j WHERE {where}".format(
    columns=batch_columns("j"), run_as=run_as("j"), where=SQL_QUALIFYING
)

SQL_STILL_QUALIFYING = "SELECT j.uuid FROM jobs j WHERE " + SQL_QUALIFYING

SQL_USER_IDS = "SELECT uuid, id FROM users WHERE uuid = ANY(%(uuids)s::text[])"

# The `dispatch` rows of attempts (_cleanup.tokens.token_windows_after_start) written after
# each job's start, with the user its next token would be made for; by the object_uuid
# index, the rows of the batch's jobs only. Not for the system user: a root token made in
# such a window by anything else (a service's) would stop that service if revoked.
SQL_RETRY_ATTEMPTS = """
    SELECT j.uuid, j.modified_by_user_uuid, l.created_at
    FROM jobs j JOIN logs l ON l.object_uuid = j.uuid
    WHERE j.uuid = ANY(%(uuids)s::text[])
      AND l.event_type = 'dispatch' AND l.summary LIKE %(attempt_summary)s
      AND l.created_at > j.started_at
      AND j.modified_by_user_uuid ~ '{user}' AND right(j.modified_by_user_uuid, {length}) <> '{system}'
""".format(user=SQL_USER_UUID, system=SQL_SYSTEM_USER_SUFFIX, length=len(SQL_SYSTEM_USER_SUFFIX))

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

# SQL_TOKEN_CANDIDATES for a run that read its users' tokens once (tokens.KeptTokens):
# the tokens of the batch's windows among those read, by the primary key, each checked again
# (an earlier batch may have revoked it), and any of the batch's users' made since the read
# (ids above the highest then), which the client keeps only inside a window. A batch in start
# order holds every user's jobs: SQL_TOKEN_CANDIDATES then read every user's tokens of the
# whole span by `user_id`, three times as long as by user (bench/README.md, "Whose pages
# the WAL holds").
SQL_TOKEN_CANDIDATES_BY_ID = """
    SELECT a.id, a.uuid, a.user_id, a.created_at
    FROM api_client_authorizations a
    WHERE (a.id = ANY(%(ids)s::bigint[])
           OR (a.id > %(read_up_to)s AND a.user_id = ANY(%(user_ids)s::bigint[])))
      AND a.api_client_id = 0
      AND (a.expires_at IS NULL OR a.expires_at > {now})
      AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.auth_uuid = a.uuid)
""".format(now=SQL_NOW_UTC)

# The jobs a run ends (or sets aside for a rerun): Running, among the uuids it was given,
# without finished_at unless every row is read, started before the threshold.
SQL_ENDED_BY_RUN = """
    o.state = 'Running'
    AND (%(run_uuids)s::text[] IS NULL OR o.uuid = ANY(%(run_uuids)s::text[]))
    AND (%(every_row)s OR o.finished_at IS NULL)
    AND (%(before)s::timestamp IS NULL OR o.started_at < %(before)s::timestamp)
"""

# A token in a cleaned job's window may be another job's: the dispatcher made each job's
# token for the same user, as it dispatched the job, and a sibling job dispatched while
# this one was queued has its token in this one's window; so do the tokens crunch-dispatch.rb
# made for arv-run-pipeline-instance (get_authorization and update_pipelines, 1.4.3
# services/api/lib/crunch_dispatch.rb:259-279 and 736-750: api_client_id 0, no expiry, for
# the modified_by_user_uuid of the job or of a RunningOnServer pipeline instance). Nothing in
# the database says which job a token was made for, and crunch-dispatch.rb keeps a job's
# token across attempts (1.4.3 crunch_dispatch.rb:259-279, reused unless
# modified_by_user_uuid changed): after exit 75 (tempfail, the job stays Queued) and after
# exit 93 (node failure, the job stays Running and is dispatched again) the token stays valid
# (reap_children, :727-731: only a job neither Queued nor awaiting a retry has its token
# expired). Every attempt writes a `dispatch` log row (nodes_available_for_job_now,
# :184-191: owner the system user, summary "dispatching to <hosts>"), so such a row says
# nothing about who ended what. Only fail_job's kind (:222-247: owner the job's owner,
# summary the reason; this collection writes the same) says a cleanup ended the job then,
# and dealt with the tokens it had: the job holds none made at or before that row. Any other
# `dispatch` row (another owner, a summary that starts as an attempt's) releases nothing.
#
# So a token is left alone, and reported, when any work this run does not end could hold it:
# a job of the user (either user column: the token is made for modified_by_user_uuid,
# crunch-job locks with it, is_locked_by_uuid) created at or before the token and after its
# last cleanup row if any, which is Queued or Running (whatever its start or finish say: a
# Queued job keeps a tempfailed attempt's token, a Running one awaiting a retry may get a
# new token after its start) or which ended at or after the token was made (finished_at, or
# cancelled_at for a job Cancelled, which 1.4.3 app/models/job.rb:578-588 sets instead; an
# ended job with neither may have ended at any time); or a pipeline instance of the user
# running on the server since before the token.
#
# One statement per batch, whatever the number of tokens (issue 21): jobs has no index on
# either user column, and a look-up per token read most of the table each time
# (bench/README.md, issue 21). Every condition on a job but its window is the same for all
# tokens, so one pass over jobs (`windows`) keeps the possible holders of the batch's
# users, each as the span of instants it can hold a token at: from `opens` (created_at) to
# `reach` (for ever for a Queued or Running job, else its end). Only the spans that hold
# one of the tokens at all are kept (`holding`: the next token at or after `opens` comes
# before `reach`), and only their logs are read, each job's by the object_uuid index alone
# (`event_type` is tested in the aggregate: its own index served with the other, a
# BitmapAnd per job, read every `dispatch` row once per job). A cleanup row at d moves
# `opens` past d (timestamp's step is a microsecond): still one span. Whether a span of
# user u holds the instant m is then an as-of question, answered for all tokens in one
# sort: the spans opening at or before m (spans first at equal instants) hold m exactly
# when the furthest of their reaches gets to m. The owner named is the job whose span
# reaches furthest (carried as C-ordered text of its reach and uuid: to_char of years 1000
# to 9999 sorts as the time does, 'infinity' after them), else the first pipeline instance
# by uuid; a token with neither is not returned.
SQL_TOKEN_OWNERS = """
    WITH tokens AS ({tokens}),
    windows AS (
        SELECT u.user_uuid, w.uuid, w.owner_uuid, w.opens, w.reach
        FROM (
            SELECT o.uuid, o.owner_uuid, o.is_locked_by_uuid, o.modified_by_user_uuid, o.created_at AS opens,
                   CASE WHEN o.state IN ('Queued', 'Running') THEN 'infinity'::timestamp
                        ELSE coalesce(greatest(o.finished_at, o.cancelled_at), 'infinity'::timestamp)
                   END AS reach
            FROM jobs o
            WHERE (o.is_locked_by_uuid = ANY(%(user_uuids)s::text[])
                   OR o.modified_by_user_uuid = ANY(%(user_uuids)s::text[]))
              AND o.created_at <= %(last_made)s::timestamp
              AND (o.state IN ('Queued', 'Running')
                   OR greatest(o.finished_at, o.cancelled_at) >= %(first_made)s::timestamp
                   OR (o.finished_at IS NULL AND o.cancelled_at IS NULL))
              AND o.uuid <> ALL(%(batch)s::text[])
              AND NOT ({ended_by_run})
        ) AS w
        CROSS JOIN LATERAL (
            SELECT DISTINCT v.user_uuid FROM (VALUES (w.is_locked_by_uuid), (w.modified_by_user_uuid)) AS v(user_uuid)
            WHERE v.user_uuid = ANY(%(user_uuids)s::text[])
        ) AS u
        WHERE w.reach >= w.opens
    ),
    holding AS (
        SELECT s.user_uuid, s.uuid, s.owner_uuid, s.opens, s.reach
        FROM (
            SELECT kind, user_uuid, uuid, owner_uuid, opens, reach,
                   min(instant) FILTER (WHERE kind = 1) OVER (
                       PARTITION BY user_uuid ORDER BY instant DESC, kind DESC ROWS UNBOUNDED PRECEDING
                   ) AS next_token
            FROM (
                SELECT 0 AS kind, user_uuid, uuid, owner_uuid, opens, reach, opens AS instant FROM windows
                UNION ALL
                SELECT 1, user_uuid, NULL, NULL, NULL, NULL, made FROM tokens
            ) AS stream
        ) AS s
        WHERE s.kind = 0 AND s.next_token <= s.reach
    ),
    spans AS (
        SELECT h.user_uuid, h.uuid, h.reach,
               CASE WHEN d.cleaned IS NULL THEN h.opens
                    ELSE greatest(h.opens, d.cleaned + interval '1 microsecond')
               END AS opens
        FROM holding h
        CROSS JOIN LATERAL (
            SELECT max(l.created_at) FILTER (
                       WHERE l.event_type = 'dispatch' AND l.owner_uuid = h.owner_uuid
                         AND l.summary NOT LIKE %(attempt_summary)s
                   ) AS cleaned
            FROM logs l WHERE l.object_uuid = h.uuid
        ) AS d
    ),
    stream AS (
        SELECT 0 AS kind, user_uuid, opens AS instant, reach,
               CASE WHEN isfinite(reach) THEN to_char(reach, 'YYYY-MM-DD"T"HH24:MI:SS.US') ELSE 'infinity' END
                   || ' ' || uuid AS job,
               NULL AS pipeline, NULL::bigint AS id
        FROM spans WHERE opens <= reach
        UNION ALL
        SELECT 0, p.modified_by_user_uuid, p.created_at, NULL, NULL, p.uuid, NULL
        FROM pipeline_instances p
        WHERE p.state = 'RunningOnServer' AND p.modified_by_user_uuid = ANY(%(user_uuids)s::text[])
        UNION ALL
        SELECT 1, user_uuid, made, NULL, NULL, NULL, id FROM tokens
    )
    SELECT id, CASE WHEN reach >= instant THEN split_part(job, ' ', 2) ELSE pipeline END
    FROM (
        SELECT kind, id, instant,
               max(reach) OVER upto AS reach,
               max(job COLLATE "C") OVER upto AS job,
               min(pipeline COLLATE "C") OVER upto AS pipeline
        FROM stream
        WINDOW upto AS (PARTITION BY user_uuid ORDER BY instant, kind ROWS UNBOUNDED PRECEDING)
    ) AS asof
    WHERE kind = 1 {owned}
"""

SQL_TOKEN_OTHER_OWNERS = SQL_TOKEN_OWNERS.format(
    tokens="""
        SELECT t.id, t.user_uuid, t.made
        FROM unnest(%(ids)s::bigint[], %(users)s::text[], %(made)s::timestamp[]) AS t(id, user_uuid, made)
    """,
    owned="AND (reach >= instant OR pipeline IS NOT NULL)",
    ended_by_run=SQL_ENDED_BY_RUN,
)

# The users whose tokens a run may revoke (a job's windows are for its is_locked_by_uuid
# and, after a retry, its modified_by_user_uuid), the earliest instant a window of its
# jobs opens, and the database's now(): the bounds of the tokens it judges once
# (_cleanup.tokens.TokenOwners).
SQL_RUN_TOKEN_SCOPE = """
    WITH run AS (
        SELECT o.is_locked_by_uuid, o.modified_by_user_uuid, o.created_at FROM jobs o WHERE {ended_by_run}
    )
    SELECT ARRAY(
               SELECT DISTINCT v.user_uuid
               FROM run CROSS JOIN LATERAL (VALUES (run.is_locked_by_uuid), (run.modified_by_user_uuid)) AS v(user_uuid)
               WHERE v.user_uuid IS NOT NULL
           ),
           (SELECT min(created_at) FROM run), {now}
""".format(ended_by_run=SQL_ENDED_BY_RUN, now=SQL_NOW_UTC)

# SQL_TOKEN_OTHER_OWNERS for every token SQL_TOKEN_CANDIDATES can find in the windows of a
# run's jobs, and more: any unexpired one of their users' made since the earliest window
# opened, read on the server (hundreds of thousands of them need not cross the wire
# twice), each returned with its owner or NULL.
SQL_RUN_TOKEN_OWNERS = SQL_TOKEN_OWNERS.format(
    tokens="""
        SELECT a.id, u.uuid AS user_uuid, a.created_at AS made
        FROM users u JOIN api_client_authorizations a ON a.user_id = u.id
        WHERE u.uuid = ANY(%(user_uuids)s::text[]) AND a.created_at >= %(first_made)s::timestamp
          AND a.api_client_id = 0
          AND (a.expires_at IS NULL OR a.expires_at > {now})
          AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.auth_uuid = a.uuid)
    """.format(now=SQL_NOW_UTC),
    owned="",
    ended_by_run=SQL_ENDED_BY_RUN,
)

# The tokens SQL_TOKEN_CANDIDATES can find in any window of a run's jobs, read once by a run
# at boot (_cleanup.tokens.KeptTokens): SQL_RUN_TOKEN_OWNERS's, one row per user, with each
# token's id and creation (microseconds since 1970, as the client counts them) in creation
# order. Arrays, not a row a token: 400,000 rows held by the driver at once would take tens
# of MiB more than their text. The highest id first, in its own statement: a token made
# after it has a higher one (a batch asks for those itself).
SQL_MAX_TOKEN_ID = "SELECT coalesce(max(id), 0) FROM api_client_authorizations"
SQL_RUN_TOKEN_CANDIDATES = """
    SELECT a.user_id, array_agg(a.id ORDER BY a.created_at, a.id),
           array_agg((extract(epoch FROM a.created_at) * 1000000)::bigint ORDER BY a.created_at, a.id)
    FROM users u JOIN api_client_authorizations a ON a.user_id = u.id
    WHERE u.uuid = ANY(%(user_uuids)s::text[]) AND a.created_at >= %(first_made)s::timestamp
      AND a.api_client_id = 0
      AND (a.expires_at IS NULL OR a.expires_at > {now})
      AND NOT EXISTS (SELECT 1 FROM containers c WHERE c.auth_uuid = a.uuid)
    GROUP BY a.user_id
""".format(now=SQL_NOW_UTC)

# How crunch-dispatch.rb's row of a dispatch attempt starts (1.4.3 crunch_dispatch.rb:186-190),
# which SQL_TOKEN_OTHER_OWNERS must not take for a cleanup's even where the job's owner is
# the system user, the attempt row's owner.
DISPATCH_ATTEMPT_SUMMARY = "dispatching to "
DISPATCH_ATTEMPT_PATTERNS = {"attempt_summary": DISPATCH_ATTEMPT_SUMMARY + "%"}

# Expiring a token is what crunch-dispatch.rb's `update_attributes expires_at: Time.now`
# did (reap_children, 1.4.3 services/api/lib/crunch_dispatch.rb:728-731), which saved an
# `update` audit row of the token (_cleanup.logs.token_update_log_row): each row returns
# its user's uuid, the token's owner_uuid (1.4.3 app/models/api_client_authorization.rb:38-40),
# and the audit properties of the row as it was (`o`, rows SQL_LOCK_TOKENS already holds)
# and as it is now. Never its secret: Arvados leaves api_token out of the logged attributes
# (:81-83), and this run never reads it: the column is dropped before the properties are built.
SQL_REVOKE_TOKENS = """
    UPDATE api_client_authorizations AS a SET expires_at = {now}, updated_at = {now}
    FROM (
        SELECT o.*, u.uuid AS owner_uuid_of_user
        FROM api_client_authorizations o LEFT JOIN users u ON u.id = o.user_id
        WHERE o.id = ANY(%(ids)s::bigint[]) AND (o.expires_at IS NULL OR o.expires_at > {now})
    ) AS o
    WHERE a.id = o.id
    RETURNING a.uuid, o.owner_uuid_of_user, CASE WHEN %(audit)s::boolean THEN {properties} END
""".format(
    now=SQL_NOW_UTC,
    properties=properties_sql(
        "to_jsonb(o) - 'api_token' - 'owner_uuid_of_user'", "to_jsonb(a) - 'api_token'", "a.uuid", TOKENS
    ),
)


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
#
# Each locked row also says whether one of its serialized texts is YAML, which only Python
# loads (_cleanup.serialized): a batch whose rows hold none asks nothing more about them.
def yaml_text_flag(alias: str, columns: Iterable[str]) -> str:
    texts = " OR ".join("{}.{} LIKE '---%%'".format(alias, column) for column in sorted(columns))
    return "coalesce(%s, false)" % texts


SQL_LOCK_JOBS = "SELECT {columns}, {run_as}, {yaml} FROM jobs j WHERE {where} FOR UPDATE OF j SKIP LOCKED".format(
    columns=batch_columns("j"), run_as=run_as("j"), yaml=yaml_text_flag("j", JOB_SERIALIZED), where=SQL_QUALIFYING
)
SQL_LOCK_TOKENS = (
    "SELECT a.id, {yaml} FROM api_client_authorizations a WHERE a.id = ANY(%(ids)s::bigint[]) "
    "FOR UPDATE SKIP LOCKED".format(yaml=yaml_text_flag("a", TOKEN_SERIALIZED))
)
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

SQL_LOCKED_ROWS = "SELECT j.*, {run_as} AS run_as FROM jobs j WHERE {where} FOR UPDATE OF j SKIP LOCKED"
# The row's `update` audit properties only when the run writes audit rows (%(audit)s):
# CASE evaluates them for no row otherwise.
SQL_CHANGED_ROWS = "{columns}, o.run_as, j.modified_at, CASE WHEN %(audit)s::boolean THEN {properties} END".format(
    columns=batch_columns("o"),
    properties=properties_sql("to_jsonb(o) - 'run_as'", "to_jsonb(j)", "o.uuid", JOBS),
)

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

# The serialized texts of jobs and tokens that start as `patterns` say (LIKE), for the
# texts the audit rows' SQL does not load itself (_cleanup.serialized); and a JSON parse.
SQL_SERIALIZED_TEXTS = """
    SELECT j.uuid, c.name, c.value FROM jobs j
        CROSS JOIN LATERAL (VALUES {job_columns}) AS c(name, value)
    WHERE j.uuid = ANY(%(uuids)s::text[]) AND c.value LIKE ANY(%(patterns)s::text[])
    UNION ALL
    SELECT a.uuid, 'scopes', a.scopes FROM api_client_authorizations a
    WHERE a.id = ANY(%(token_ids)s::bigint[]) AND a.scopes LIKE ANY(%(patterns)s::text[])
""".format(job_columns=", ".join("('%s', j.%s)" % (column, column) for column in sorted(JOB_SERIALIZED)))
SQL_PARSE_JSON = "SELECT %(text)s::jsonb"

SQL_DELETE_TASKS = "DELETE FROM job_tasks WHERE job_uuid = ANY(%(uuids)s::text[])"

# The log rows Arvados wrote for a job it failed (1.4.3): fail_job's `dispatch` row
# (services/api/lib/crunch_dispatch.rb: owner the job's owner, no object_owner_uuid, the
# message as summary and as properties' text), then the save's `update` audit row
# (app/models/arvados_model.rb log_update, app/models/log.rb fill_object and update_to:
# owner the acting (system) user, object_owner_uuid the job's owner, summary "update of
# <uuid>", event_at the job's new modified_at, the old and new attributes and etags).
# Websocket clients and Workbench react to the `update` row, which they read by the id
# NOTIFY sends them. Rows are inserted in the order given, so ids follow Arvados' order.
# The lists are bound in binary (_database.driver): psycopg 3 writes a text array's text form in
# Python, a test of each element and one substitution per quote, and the properties hold
# hundreds each. psycopg2, which has no binary parameters, sends each as one joined text the
# server splits: its ARRAY[...] of 2,000 constants cost the server several times as much.
SQL_INSERT_LOGS = """
    WITH inserted AS (
        INSERT INTO logs (uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid,
                          object_uuid, object_owner_uuid, event_at, event_type, summary,
                          properties, created_at, updated_at, modified_at)
        SELECT l.uuid, l.owner_uuid, NULL, l.modified_by_user_uuid, l.object_uuid, l.object_owner_uuid,
               COALESCE(l.event_at, {now}), l.event_type, l.summary, l.properties, {now}, {now}, {now}
        FROM unnest(%(log_uuids)b::text[], %(owners)b::text[], %(system_users)b::text[],
                    %(objects)b::text[], %(object_owners)b::text[], %(event_ats)b::timestamp[],
                    %(event_types)b::text[], %(summaries)b::text[], %(properties)b::text[])
             WITH ORDINALITY
             AS l(uuid, owner_uuid, modified_by_user_uuid, object_uuid, object_owner_uuid,
                  event_at, event_type, summary, properties, position)
        ORDER BY l.position
        RETURNING id, uuid
    )
    SELECT uuid, pg_notify('logs', id::text) FROM inserted ORDER BY id
""".format(now=SQL_NOW_UTC)

# The server's values of _cleanup.batch.BULK_SETTINGS_KB, and raising them for one
# transaction only (SET LOCAL).
SQL_SETTINGS_KB = """
    SELECT name, setting::bigint FROM pg_settings
    WHERE name = ANY(%(names)s::text[]) AND unit = 'kB'
"""

SQL_SET_LOCAL = """
    SELECT set_config(s.name, s.value, true)
    FROM unnest(%(names)s::text[], %(values)s::text[]) AS s(name, value)
"""

# Other sessions on the database than this run's own: the API server's (or a person's).
# With them the run is live (JobCleaner keeps the trigram index's pending list short).
SQL_OTHER_SESSIONS = """
    SELECT count(*) FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
      AND backend_type = 'client backend' AND application_name <> %(ours)s
"""

# Live, before each commit: other sessions queued for the WAL's locks (behind another's
# flush, or for a place to insert) or for a lock, as the API's commits are when they meet
# the run's. Not IO:WALSync: that is a commit's own flush, queued behind nothing. Sessions
# of other roles show no wait_event without pg_read_all_stats (Arvados' API shares ours).
SQL_OTHERS_WAITING = (
    SQL_OTHER_SESSIONS
    + """      AND (wait_event_type = 'Lock'
           OR (wait_event_type = 'LWLock' AND wait_event IN ('WALWrite', 'WALInsert')))
"""
)

# Everything the checks before any change judge, in one statement. On a server just started
# (at boot) each statement's parse and planning reads the catalogs afresh, and the no-op
# rerun's time went to a dozen round trips and those reads (bench/README.md, issue 40). No
# missing table or column makes it fail, so that the schema check can name them: the
# privileges are asked of to_regclass (NULL for a missing table), the logs' id sequence
# (nextval needs its own privilege) only when logs.id exists. The cleanup lock is not tried
# here: PostgreSQL checks the right to call pg_try_advisory_lock as the statement starts,
# so a user without it would be refused before the checks could name what else it lacks.
SQL_SERVER_FACTS = """
    WITH present AS (
        SELECT c.relname AS tab, a.attname AS col
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
          AND c.relname = ANY(%(tables)s::text[]) AND a.attnum > 0 AND NOT a.attisdropped
    ), log_sequence AS (
        SELECT pg_get_serial_sequence('logs', 'id') AS name
        WHERE EXISTS (SELECT 1 FROM present WHERE tab = 'logs' AND col = 'id')
    )
    SELECT ARRAY(SELECT tab FROM present), ARRAY(SELECT col FROM present),
        pg_is_in_recovery(), now() AT TIME ZONE 'UTC',
        ARRAY(
            SELECT has_table_privilege(to_regclass(n.tab), n.privilege)
            FROM unnest(%(need_tables)s::text[], %(need_privileges)s::text[])
                 WITH ORDINALITY AS n(tab, privilege, position)
            ORDER BY n.position
        ),
        (SELECT name FROM log_sequence), (SELECT has_sequence_privilege(name, 'USAGE') FROM log_sequence),
        current_user
"""
