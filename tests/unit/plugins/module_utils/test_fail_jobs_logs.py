# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The `logs` rows a cleanup writes, with a fake connection: the `dispatch` row always, the
`update` audit rows of jobs and expired tokens only with audit logging on, serialized
columns as Arvados' serializer loads them (NULL as {} or []), and never a token's secret."""

from __future__ import annotations

import json
from datetime import datetime

from ansible_collections.arvados_ops.recovery.plugins.module_utils import fail_jobs_sql
from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_logs import (
    TokenUpdate,
    audit_attributes,
    insert_logs,
    serialized_value,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_sql import BatchJob

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
        assert query == fail_jobs_sql.SQL_INSERT_LOGS
        self.params = params
        return Rows((uuid, None) for uuid in params["log_uuids"])

    def rows(self):
        """The rows as SQL_INSERT_LOGS inserts them, in order."""
        keys = ("owners", "objects", "object_owners", "event_ats", "event_types", "summaries", "properties")
        return [dict(zip(keys, values)) for values in zip(*(self.params[k] for k in keys))]


def job_row(**changes):
    row = {
        "id": 7,
        "uuid": JOB,
        "owner_uuid": OWNER,
        "state": "Running",
        "modified_at": "2026-11-30T08:00:00.25",
        "started_at": "2026-11-30T07:00:00",
        "script_parameters": '{"input": "x"}',
        "tasks_summary": '{"done": 0}',
        # NULL in the row: Arvados' serializer loads it as {} (1.4.3 serializers.rb:38-39)
        "components": None,
        "runtime_constraints": None,
    }
    row.update(changes)
    return row


def batch_job():
    old = job_row()
    new = job_row(state="Failed", modified_at="2026-11-30T09:00:00.5")
    return BatchJob(JOB, OWNER, datetime(2026, 11, 30, 6), datetime(2026, 11, 30, 7), OWNER, OWNER, old, new)


def token_update():
    old = {
        "id": 11,
        "uuid": TOKEN,
        "api_token": SECRET,  # SQL_REVOKE_TOKENS never returns it: dropped again here all the same
        "user_id": 1,
        "api_client_id": 0,
        "expires_at": None,
        "updated_at": "2026-11-30T06:30:00",
        "scopes": None,
    }
    new = dict(old, expires_at="2026-11-30T09:00:00.5", updated_at="2026-11-30T09:00:00.5", scopes='["all"]')
    return TokenUpdate(TOKEN, OWNER, old, new)


def test_null_hash_columns_are_written_as_arvados_loads_them():
    attributes = audit_attributes(job_row())
    assert attributes["components"] == {} and attributes["runtime_constraints"] == {}
    assert attributes["script_parameters"] == {"input": "x"} and attributes["tasks_summary"] == {"done": 0}
    assert attributes["modified_at"] == "2026-11-30T08:00:00.250000000Z"
    assert serialized_value(None, list) == [] and serialized_value('["all"]', list) == ["all"]
    # legacy YAML stays text; an Array's JSON is not a Hash's
    assert serialized_value("---\na: 1\n", dict) == "---\na: 1\n"
    assert serialized_value("[1]", dict) == "[1]"


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
    job_properties = json.loads(job_update["properties"])
    for age in ("old", "new"):
        assert job_properties[age + "_attributes"]["components"] == {}
        assert job_properties[age + "_attributes"]["runtime_constraints"] == {}
    # the token's row: owned by the acting (system) user, object_owner_uuid its user's uuid,
    # event_at the database's now (its modified_at is nil), no secret anywhere
    assert token["owners"] == SYSTEM and token["object_owners"] == OWNER
    assert token["summaries"] == "update of %s" % TOKEN
    assert token["event_ats"] is None
    properties = json.loads(token["properties"])
    assert sorted(properties) == ["new_attributes", "new_etag", "old_attributes", "old_etag"]
    assert properties["old_attributes"]["expires_at"] is None
    assert properties["new_attributes"]["expires_at"] == "2026-11-30T09:00:00.500000000Z"
    assert properties["old_attributes"]["scopes"] == [] and properties["new_attributes"]["scopes"] == ["all"]
    assert "api_token" not in properties["old_attributes"] and "api_token" not in properties["new_attributes"]
    assert SECRET not in json.dumps(conn.params, default=str)
    assert properties["old_etag"] != properties["new_etag"]


def test_without_audit_logging_only_the_dispatch_rows():
    conn = RecordingConnection()
    unrunnable = batch_job()._replace(uuid=JOB[:-1] + "2")
    uuids = insert_logs(conn, "cleaned", [batch_job()], [unrunnable], [token_update()], audit=False)

    rows = conn.rows()
    assert len(uuids) == 2
    assert [(r["event_types"], r["objects"]) for r in rows] == [("dispatch", JOB), ("dispatch", unrunnable.uuid)]
    assert conn.params["system_users"] == [SYSTEM, SYSTEM]
