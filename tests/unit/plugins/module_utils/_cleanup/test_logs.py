# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The `logs` rows a cleanup writes, with a fake connection: the `dispatch` row always, the
`update` audit rows of jobs and expired tokens only with audit logging on, in Arvados'
order and ownership. Their properties are built by PostgreSQL (_cleanup.audit_rows),
tested on the lab's in tests/integration/test_fail_jobs_audit_rows.py."""

from __future__ import annotations

import json
from datetime import datetime

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import sql as cleanup_sql
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.logs import (
    TokenUpdate,
    insert_logs,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.sql import BatchJob

SYSTEM = "zzzzz-tpzed-000000000000000"
OWNER = "zzzzz-tpzed-000000000000001"
JOB = "zzzzz-8i9sb-000000000000001"
TOKEN = "zzzzz-gj3su-000000000000001"
SECRET = "3kg6k6lzmp9kj5cpkcoxie963cmvjahbt2fod9zru30k1jqdmi"


class Rows(list):
    def fetchall(self):
        return list(self)


class RecordingConnection:
    def __init__(self):
        self.params = None

    def execute(self, query, params=None):
        assert query == cleanup_sql.SQL_INSERT_LOGS
        self.params = params
        return Rows((uuid, None) for uuid in params["log_uuids"])

    def rows(self):
        """The rows as SQL_INSERT_LOGS inserts them, in order."""
        keys = ("owners", "objects", "object_owners", "event_ats", "event_types", "summaries", "properties")
        return [dict(zip(keys, values)) for values in zip(*(self.params[k] for k in keys))]


JOB_PROPERTIES = json.dumps({"old_etag": "a", "old_attributes": {}, "new_etag": "b", "new_attributes": {}})
TOKEN_PROPERTIES = json.dumps({"old_etag": "c", "old_attributes": {}, "new_etag": "d", "new_attributes": {}})


def batch_job():
    return BatchJob(
        JOB,
        OWNER,
        datetime(2026, 11, 30, 6),
        datetime(2026, 11, 30, 7),
        OWNER,
        OWNER,
        datetime(2026, 11, 30, 9, 0, 0, 500000),
        JOB_PROPERTIES,
    )


def token_update():
    return TokenUpdate(TOKEN, OWNER, TOKEN_PROPERTIES)


def test_with_audit_logging_dispatch_then_job_updates_then_token_updates():
    conn = RecordingConnection()
    uuids = insert_logs(conn, "cleaned", [batch_job()], [], [token_update()], audit=True)

    rows = conn.rows()
    assert len(uuids) == 3
    assert [(r["event_types"], r["objects"]) for r in rows] == [("dispatch", JOB), ("update", JOB), ("update", TOKEN)]
    dispatch, job_update, token = rows
    assert dispatch["owners"] == OWNER and dispatch["object_owners"] is None
    assert json.loads(dispatch["properties"]) == {"text": "cleaned"}
    assert job_update["owners"] == SYSTEM and job_update["object_owners"] == OWNER
    assert job_update["event_ats"] == datetime(2026, 11, 30, 9, 0, 0, 500000)
    assert job_update["summaries"] == "update of %s" % JOB
    assert job_update["properties"] == JOB_PROPERTIES
    # the token's row: owned by the acting (system) user, object_owner_uuid its user's uuid,
    # event_at the database's now (its modified_at is nil)
    assert token["owners"] == SYSTEM and token["object_owners"] == OWNER
    assert token["summaries"] == "update of %s" % TOKEN
    assert token["event_ats"] is None
    assert token["properties"] == TOKEN_PROPERTIES
    assert conn.params["system_users"] == [SYSTEM] * 3


def test_without_audit_logging_only_the_dispatch_rows():
    conn = RecordingConnection()
    unrunnable = batch_job()._replace(uuid=JOB[:-1] + "2")
    uuids = insert_logs(conn, "cleaned", [batch_job()], [unrunnable], [token_update()], audit=False)

    rows = conn.rows()
    assert len(uuids) == 2
    assert [(r["event_types"], r["objects"]) for r in rows] == [("dispatch", JOB), ("dispatch", unrunnable.uuid)]
    assert conn.params["system_users"] == [SYSTEM, SYSTEM]
