"""The `update` audit rows' properties as PostgreSQL builds them (fail_jobs_audit_rows), on
the lab's server: each attribute as Arvados' audit rows hold it (1.4.3 app/models/log.rb
update_to with logged_attributes; serialized columns as Serializer.load loads them, 1.4.3
services/api/lib/serializers.rb:34-46; timestamps as config/initializers/time_format.rb
writes them), the etag a base-36 MD5 digest (lib/kind_and_etag.rb), and a serialized text
PostgreSQL cannot parse kept as text, through a whole run."""

from __future__ import annotations

import hashlib
import json

import psycopg
import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.audit_rows import (
    JOBS,
    TOKENS,
    attributes_sql,
    properties_sql,
)
from tests.integration import fail_jobs_helpers as h
from tests.integration.test_fail_jobs_arvados_rules import Cluster, run

JOB = "zzzzz-8i9sb-0000000000000a1"
OLD_JOB = {
    "uuid": JOB,
    "state": "Running",
    "modified_at": "2026-11-30T08:00:00.25",
    "started_at": "2026-11-30T07:00:00",
    "finished_at": None,
    "components": None,
    "script_parameters": '{"input": "x", "n": [1, 2.5, "\u00e9"]}',
    "tasks_summary": "---\ndone: 0\n",
    "runtime_constraints": "[1]",
    "script_version": "2026-11-30T07:00:00",
    "priority": 3,
}
NEW_JOB = dict(OLD_JOB, state="Failed", modified_at="2026-11-30T09:00:00.123456", finished_at="2026-11-30T09:00:00.5")


def base36(number: int) -> str:
    text = ""
    while number:
        number, digit = divmod(number, 36)
        text = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + text
    return text or "0"


def built(conn, old, new, table=JOBS, loaded=None):
    sql = "SELECT %s" % properties_sql("%(old)s::jsonb", "%(new)s::jsonb", "%(key)s", table)
    params = {"old": json.dumps(old), "new": json.dumps(new), "key": old["uuid"]}
    params.update(loaded_keys=sorted(loaded or {}), loaded_values=[(loaded or {})[k] for k in sorted(loaded or {})])
    return json.loads(conn.execute(sql, params).fetchone()[0])


def attributes_text(conn, row, table=JOBS):
    sql = "SELECT (%s)::text" % attributes_sql("%(row)s::jsonb", "%(key)s", table)
    params = {"row": json.dumps(row), "key": row["uuid"], "loaded_keys": [], "loaded_values": []}
    return conn.execute(sql, params).fetchone()[0]


@pytest.fixture
def conn(fresh_db):
    connection = fresh_db.connect()
    yield connection
    connection.close()


def test_each_attribute_as_arvados_audit_rows_hold_it(conn):
    properties = built(conn, OLD_JOB, NEW_JOB)

    assert list(properties) == ["old_etag", "old_attributes", "new_etag", "new_attributes"]
    old, new = properties["old_attributes"], properties["new_attributes"]
    assert old["components"] == {}  # NULL: Serializer.load's object_class.new
    assert old["script_parameters"] == {"input": "x", "n": [1, 2.5, "\u00e9"]}  # JSON: what it holds
    assert old["tasks_summary"] == "---\ndone: 0\n"  # YAML: SQL leaves it to Python (loaded_keys)
    assert old["runtime_constraints"] == "[1]"  # not a Hash's JSON: kept as text
    assert old["modified_at"] == "2026-11-30T08:00:00.250000000Z"
    assert old["started_at"] == "2026-11-30T07:00:00.000000000Z"
    assert old["finished_at"] is None and new["finished_at"] == "2026-11-30T09:00:00.500000000Z"
    assert new["modified_at"] == "2026-11-30T09:00:00.123456000Z"
    assert old["priority"] == 3 and old["state"] == "Running" and new["state"] == "Failed"
    # Arvados formats a column by its type: a text column that reads like a timestamp stays text
    assert old["script_version"] == "2026-11-30T07:00:00"
    # a column the row lacks stays absent (the 2017 and 1.4.3 jobs have no other timestamps)
    assert sorted(old) == sorted(OLD_JOB) and "cancelled_at" not in old


def test_the_etag_is_the_base_36_md5_of_the_attributes_and_changes_with_them(conn):
    properties = built(conn, OLD_JOB, NEW_JOB)

    for age, row in (("old", OLD_JOB), ("new", NEW_JOB)):
        digest = hashlib.md5(attributes_text(conn, row).encode("utf-8")).hexdigest()
        assert properties[age + "_etag"] == base36(int(digest, 16))
    assert properties["old_etag"] != properties["new_etag"]
    assert built(conn, OLD_JOB, OLD_JOB)["old_etag"] == properties["old_etag"]


def test_a_token_s_scopes_are_an_array_null_as_empty_its_times_as_the_api_writes_them(conn):
    token = {"uuid": "zzzzz-gj3su-0000000000000a1", "scopes": None, "expires_at": None, "refreshes_at": None}
    properties = built(conn, token, dict(token, scopes='["all"]'), TOKENS)

    assert properties["old_attributes"]["scopes"] == []
    assert properties["new_attributes"]["scopes"] == ["all"]
    assert properties["old_attributes"]["expires_at"] is None and "last_used_at" not in properties["old_attributes"]
    expired = built(conn, token, dict(token, expires_at="2026-11-30T09:00:00.5"), TOKENS)
    assert expired["new_attributes"]["expires_at"] == "2026-11-30T09:00:00.500000000Z"


def test_json_postgresql_cannot_parse_fails_unless_loaded_then_is_what_python_loaded(conn):
    broken = dict(OLD_JOB, components="{not json")
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        built(conn, broken, broken)
    conn.rollback()

    properties = built(conn, broken, broken, loaded={JOB + " components": json.dumps("{not json")})

    assert properties["old_attributes"]["components"] == "{not json"
    assert properties["old_attributes"]["script_parameters"] == {"input": "x", "n": [1, 2.5, "\u00e9"]}


def test_a_run_keeps_unparsable_serialized_texts_as_text_and_writes_every_other_row_whole(fresh_db, lab_env, tmp_path):
    db = fresh_db.connect()
    cluster = Cluster(db)
    alice, bob = cluster.user(), cluster.user()
    broken = cluster.job(alice, cluster.ago(hours=3), started=cluster.ago(hours=2))
    healthy = cluster.job(bob, cluster.ago(hours=3), started=cluster.ago(hours=2))
    broken_token = cluster.token(alice, cluster.ago(hours=2, seconds=5), scopes="[all")
    healthy_token = cluster.token(bob, cluster.ago(hours=2, seconds=5))
    db.execute("UPDATE jobs SET components = '{\"a\": 1', tasks_summary = '{\"done\": 0}' WHERE uuid = %s", (broken,))
    db.commit()

    result = run(fresh_db, lab_env, tmp_path, uuids=[broken, healthy])

    assert result["failed_jobs"] == sorted([broken, healthy])
    assert result["revoked_tokens"] == sorted([broken_token, healthy_token])
    rows = h.logs(db)
    assert sorted(r["uuid"] for r in rows) == sorted(result["log_uuids"])
    updates = {r["object_uuid"]: json.loads(r["properties"]) for r in rows if r["event_type"] == "update"}
    assert sorted(updates) == sorted([broken, healthy, broken_token, healthy_token])
    for age in ("old", "new"):
        attributes = updates[broken][age + "_attributes"]
        assert attributes["components"] == '{"a": 1'
        assert attributes["tasks_summary"] == {"done": 0}
        assert updates[healthy][age + "_attributes"]["components"] == {}
        assert updates[broken_token][age + "_attributes"]["scopes"] == "[all"
        assert updates[healthy_token][age + "_attributes"]["scopes"] == ["all"]
    assert [r["event_type"] for r in rows].count("dispatch") == 2
    db.close()


def test_a_run_loads_yaml_serialized_columns_as_arvados_legacy_load_does(fresh_db, lab_env, tmp_path):
    """Rails wrote serialized columns as YAML before 2017, and its fixture loader still does:
    Serializer.load reads "---" texts with Psych.safe_load, a String decoded again as JSON
    (1.4.3 services/api/lib/serializers.rb:18-46); a Ruby tag Psych.safe_load refuses."""
    db = fresh_db.connect()
    cluster = Cluster(db)
    alice = cluster.user()
    job = cluster.job(alice, cluster.ago(hours=3), started=cluster.ago(hours=2))
    token = cluster.token(alice, cluster.ago(hours=2, seconds=5), scopes="---\n- all\n")
    db.execute(
        "UPDATE jobs SET script_parameters = %s, tasks_summary = %s, components = %s WHERE uuid = %s",
        (
            "---\ninput: x\nn:\n- 1\n- 2.5\n",
            "--- '{\"done\": 0}'\n",
            "--- !ruby/hash:ActiveSupport::HashWithIndifferentAccess\na: 1\n",
            job,
        ),
    )
    db.commit()

    result = run(fresh_db, lab_env, tmp_path, uuids=[job])

    assert result["failed_jobs"] == [job] and result["revoked_tokens"] == [token]
    updates = {r["object_uuid"]: json.loads(r["properties"]) for r in h.logs(db) if r["event_type"] == "update"}
    for age in ("old", "new"):
        attributes = updates[job][age + "_attributes"]
        assert attributes["script_parameters"] == {"input": "x", "n": [1, 2.5]}
        assert attributes["tasks_summary"] == {"done": 0}
        assert attributes["components"] == "--- !ruby/hash:ActiveSupport::HashWithIndifferentAccess\na: 1\n"
        assert updates[token][age + "_attributes"]["scopes"] == ["all"]
    db.close()
