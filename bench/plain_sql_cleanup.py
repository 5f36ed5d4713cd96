"""Contender (e) of fail_jobs_bench: the cleanup's writes done as plain set-based SQL, the
floor issue 40 measures the command against, and the check that two contenders left the
same rows.

(e) writes what `arvados-fail-jobs` writes, in one transaction of three statements and no
batches, locks, re-checks or reports: every qualifying job failed as the system user, its
`dispatch` row and its `update` audit row (properties built by the same SQL as the
command's, fail_jobs_audit_rows), the tokens the command would expire (asked of its check
mode on the template, untimed: the token rule is the command's, not a floor's) with theirs,
a NOTIFY per row, under the same GIN and work_mem settings, the merge they leave pending
done and timed.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from plugins.module_utils._cleanup.audit_rows import (  # noqa: E402 pylint: disable=wrong-import-position
    JOBS,
    TOKENS,
    properties_sql,
)
from plugins.module_utils._cleanup.batch import BULK_SETTINGS_KB  # noqa: E402 pylint: disable=wrong-import-position
from plugins.module_utils._cleanup.run import run_fail_jobs  # noqa: E402 pylint: disable=wrong-import-position

NOW = "(now() AT TIME ZONE 'UTC')"
LOG_UUID = "substr({object}, 1, 5) || '-57u5n-' || substr(md5(random()::text || {object}), 1, 15)"
SYSTEM_USER = "substr({object}, 1, 5) || '-tpzed-000000000000000'"

SQL_JOBS = """
WITH changed AS (
    UPDATE jobs AS j SET state = 'Failed', running = false, success = false,
        finished_at = COALESCE(j.finished_at, {now}), modified_at = {now}, updated_at = {now},
        modified_by_user_uuid = {system_user}, modified_by_client_uuid = NULL
    FROM (SELECT * FROM jobs WHERE state = 'Running' AND started_at < %(before)s FOR UPDATE) AS o
    WHERE j.uuid = o.uuid
    RETURNING o.uuid, o.owner_uuid, j.modified_at, {properties} AS properties
), written AS (
    SELECT 1 AS kind, c.uuid AS object, c.owner_uuid AS owner, NULL AS object_owner,
           {now} AS event_at, 'dispatch' AS event_type, %(message)s AS summary,
           json_build_object('text', %(message)s::text)::text AS properties
    FROM changed c
    UNION ALL
    SELECT 2, c.uuid, {system_user_c}, c.owner_uuid, c.modified_at, 'update', 'update of ' || c.uuid, c.properties
    FROM changed c
), inserted AS (
    INSERT INTO logs (uuid, owner_uuid, modified_by_user_uuid, object_uuid, object_owner_uuid, event_at,
                      event_type, summary, properties, created_at, updated_at, modified_at)
    SELECT {log_uuid}, w.owner, {system_user_w}, w.object, w.object_owner, w.event_at, w.event_type,
           w.summary, w.properties, {now}, {now}, {now}
    FROM written w ORDER BY w.kind, w.object
    RETURNING id
)
SELECT count(pg_notify('logs', id::text)) FROM inserted
""".format(
    now=NOW,
    system_user=SYSTEM_USER.format(object="j.uuid"),
    system_user_c=SYSTEM_USER.format(object="c.uuid"),
    system_user_w=SYSTEM_USER.format(object="w.object"),
    log_uuid=LOG_UUID.format(object="w.object"),
    properties=properties_sql("to_jsonb(o)", "to_jsonb(j)", "o.uuid", JOBS),
)

SQL_TOKENS = """
WITH changed AS (
    UPDATE api_client_authorizations AS a SET expires_at = {now}, updated_at = {now}
    FROM (SELECT o.*, u.uuid AS owner_uuid_of_user
          FROM api_client_authorizations o LEFT JOIN users u ON u.id = o.user_id
          WHERE o.uuid = ANY(%(tokens)s::text[]) FOR UPDATE OF o) AS o
    WHERE a.id = o.id
    RETURNING a.uuid, o.owner_uuid_of_user, {properties} AS properties
), inserted AS (
    INSERT INTO logs (uuid, owner_uuid, modified_by_user_uuid, object_uuid, object_owner_uuid, event_at,
                      event_type, summary, properties, created_at, updated_at, modified_at)
    SELECT {log_uuid}, {system_user}, {system_user}, c.uuid, c.owner_uuid_of_user, {now}, 'update',
           'update of ' || c.uuid, c.properties, {now}, {now}, {now}
    FROM changed c ORDER BY c.uuid
    RETURNING id
)
SELECT count(pg_notify('logs', id::text)) FROM inserted
""".format(
    now=NOW,
    system_user=SYSTEM_USER.format(object="c.uuid"),
    log_uuid=LOG_UUID.format(object="c.uuid"),
    properties=properties_sql(
        "to_jsonb(o) - 'api_token' - 'owner_uuid_of_user'", "to_jsonb(a) - 'api_token'", "a.uuid", TOKENS
    ),
)


def tokens_the_command_expires(lab, database, before, message):
    """The tokens `arvados-fail-jobs` would expire on `database`, from its check mode."""
    params = {
        "config_file": str(lab.config_yml),
        "db_name": database,
        "cancel_slurm_jobs": False,
        "before": before,
        "log_message": message,
    }
    return run_fail_jobs(params, check_mode=True, keep_uuids=True)["revoked_tokens"]


def plain_sql_cleanup(lab, database, threshold, tokens, message):
    """(seconds, jobs failed) of contender (e) on `database`."""
    with psycopg.connect(**lab.connection(database)) as conn:
        began = time.monotonic()
        for setting, kilobytes in BULK_SETTINGS_KB:
            conn.execute("SELECT set_config(%s, %s, true)", (setting, "%dkB" % kilobytes))
        params = {"before": threshold, "message": message, "tokens": tokens, "loaded_keys": [], "loaded_values": []}
        logged = conn.execute(SQL_JOBS, params).fetchone()[0]
        conn.execute(SQL_TOKENS, params)
        conn.execute("SELECT gin_clean_pending_list('jobs_trgm_text_search_idx'::regclass)")
        conn.commit()
        return time.monotonic() - began, logged // 2


# What a run leaves, without what differs between two runs of the same writes: the instant
# (now(): modified_at, finished_at, expires_at, ...; and so the new etag) and the new rows'
# ids and uuids.
SQL_LEFT = [
    "SELECT uuid, state, running, success, finished_at IS NULL, modified_by_user_uuid FROM jobs ORDER BY uuid",
    "SELECT uuid, expires_at IS NULL FROM api_client_authorizations ORDER BY uuid",
    """SELECT object_uuid, event_type, owner_uuid, modified_by_user_uuid, object_owner_uuid, summary,
              properties::jsonb - 'new_etag' - 'new_attributes',
              (properties::jsonb -> 'new_attributes') - 'modified_at' - 'updated_at' - 'finished_at' - 'expires_at'
       FROM logs WHERE id > %(first_new_log)s
       ORDER BY object_uuid, event_type, properties::jsonb ->> 'text' NULLS FIRST""",
]


def first_new_log(lab, database):
    with psycopg.connect(**lab.connection(database)) as conn:
        return conn.execute("SELECT COALESCE(max(id), 0) FROM logs").fetchone()[0]


def rows_left(lab, database, first_new):
    """A digest of what a contender left (SQL_LEFT): equal for two runs of the same writes."""
    digest = hashlib.sha256()
    with psycopg.connect(**lab.connection(database)) as conn:
        for statement in SQL_LEFT:
            with conn.cursor(name="left") as cursor:
                cursor.execute(statement, {"first_new_log": first_new})
                for row in cursor:
                    digest.update(repr(row).encode("utf-8"))
            conn.commit()
    return digest.hexdigest()
