"""The cleanup on Arvados' own test fixtures at 1.4.3, the files themselves
(services/api/test/fixtures/*.yml at the tag), loaded as Rails' fixture loader loads them
(tests/integration/arvados_fixture_loader.py) into Arvados 1.4.3's schema, with the
serialized columns stored both ways old clusters hold them.

Nothing here restates a fixture: what must happen to each row is computed from the loaded
rows by Arvados' own rule, and the labels it yields are checked against the list named
here, so a loader that drops or misreads a row fails. The files are not kept in this
repository; without $ARVADOS_SOURCE_GIT or $ARVADOS_FIXTURES_DIR the tests are skipped and
say so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.integration import arvados_fixture_loader as loader
from tests.integration import fail_jobs_helpers as h
from tests.integration.conftest import FreshDatabase, schema_database
from tests.integration.test_arvados_fail_jobs_command import options
from tests.integration.test_arvados_fixture_jobs import before_now

TAG = "1.4.3"
SCHEMA = h.REPO_ROOT / "lab" / "schema" / TAG
TABLES = (
    "users",
    "api_clients",
    "api_client_authorizations",
    "jobs",
    "job_tasks",
    "pipeline_instances",
    "logs",
    "containers",
)
# How many rows each file holds at 1.4.3 (the `for` loops of pipeline_instances.yml
# rendered): a row the loader drops or a loop it misreads shows here.
ROWS = {
    "users": 28,
    "api_clients": 2,
    "api_client_authorizations": 48,
    "jobs": 36,
    "job_tasks": 2,
    "pipeline_instances": 61,
    "logs": 17,
    "containers": 14,
}
SYSTEM_USER = "zzzzz-tpzed-000000000000000"
# The jobs fail_jobs fails (1.4.3 services/api/lib/crunch_dispatch.rb:848-884:
# `Job.where('state = ? and started_at < ?', Job::Running, threshold)`, the threshold here
# the database's now): every Running fixture job with a started_at, runningbarbaz's
# finished_at (jobs.yml:144-170) notwithstanding.
FAILED_BY_ARVADOS = [
    "running",
    "runningbarbaz",
    "running_will_be_completed",
    "running_job_with_components",
    "running_job_with_components_at_level_1",
    "running_job_with_components_at_level_2",
    "running_job_1_with_components_at_level_3",
    "running_job_2_with_components_at_level_3",
    "running_job_1_with_circular_component_relationship",
    "running_job_2_with_circular_component_relationship",
]


def fixture_source(*tags: str) -> loader.FixtureSource:
    source, reason = loader.fixture_source(tags)
    if source is None:
        pytest.skip(reason)
    return source


@pytest.fixture(params=loader.SERIALIZATIONS)
def fixture_db(lab, request) -> Iterator[tuple[FreshDatabase, dict[str, loader.FixtureTable]]]:
    """1.4.3's schema holding 1.4.3's fixtures, serialized columns one way or the other."""
    source = fixture_source(TAG)
    with schema_database(lab, SCHEMA) as database:
        with database.connect() as conn:
            loaded = loader.load_fixtures(conn, source, TAG, TABLES, request.param)
        yield database, loaded


def snapshot(conn) -> dict[str, dict[str, dict[str, Any]]]:
    return {table: h.rows_by_uuid(conn, table) for table in TABLES}


def labels_of(loaded: Mapping[str, loader.FixtureTable], table: str, uuids) -> list[str]:
    by_uuid = {row.get("uuid"): label for label, row in loader.iter_rows(loaded, table)}
    return sorted(by_uuid[uuid] for uuid in uuids)


def uuids_of(loaded, table: str, labels) -> list[str]:
    return sorted(loaded[table].uuid(label) for label in labels)


def failed_by_arvados(jobs: Mapping[str, Mapping[str, Any]], threshold) -> list[str]:
    """crunch_dispatch.rb:848-884's selection, on the rows as loaded."""
    return sorted(
        uuid
        for uuid, job in jobs.items()
        if job["state"] == "Running" and job["started_at"] is not None and job["started_at"] < threshold
    )


def runs_as(job: Mapping[str, Any]) -> str | None:
    """The user crunch-dispatch.rb would make a requeued job's next token for
    (get_authorization, 1.4.3 crunch_dispatch.rb:259-279: `modified_by_user_uuid`), which
    a requeue writes as the user whose token ran it: is_locked_by_uuid, set by crunch-job's
    lock (1.4.3 sdk/cli/bin/crunch-job:209), else modified_by_user_uuid; never the system
    user, whose token is an admin's."""
    for user in (job["is_locked_by_uuid"], job["modified_by_user_uuid"]):
        if user and user != SYSTEM_USER:
            return user
    return None


def dispatch_tokens(before, failed, now) -> list[str]:
    """The tokens a cleanup of `failed` revokes, by the rule of README.md's "Which token is
    a job's": made as get_authorization makes them (crunch_dispatch.rb:259-279: api_client_id
    0, no expiry, for the job's user), between the job's creation and its start, and no
    container's (containers.auth_uuid)."""
    users = {row["id"]: uuid for uuid, row in before["users"].items()}
    containers = {row["auth_uuid"] for row in before["containers"].values()}
    return sorted(
        uuid
        for uuid, token in before["api_client_authorizations"].items()
        for job in (before["jobs"][job_uuid] for job_uuid in failed)
        if token["api_client_id"] == 0
        and uuid not in containers
        and (token["expires_at"] is None or token["expires_at"] > now)
        and users.get(token["user_id"]) == job["is_locked_by_uuid"]
        and job["created_at"] <= token["created_at"] <= job["started_at"]
    )


def test_loaded_rows_are_the_files_rows(fixture_db):
    """Every fixture of the eight files is a row, with Rails' id for its label
    (FixtureSet.identify) and api_client_authorizations' `user:` and `api_client:` labels
    resolved to those ids (belongs_to, 1.4.3 app/models/api_client_authorization.rb:11-12)."""
    database, loaded = fixture_db
    with database.connect() as conn:
        counts = {table: conn.execute("SELECT count(*) FROM %s" % table).fetchone()[0] for table in TABLES}
        token = conn.execute(
            "SELECT t.id, u.uuid, c.uuid FROM api_client_authorizations t JOIN users u ON u.id = t.user_id"
            " JOIN api_clients c ON c.id = t.api_client_id WHERE t.uuid = %s",
            (loaded["api_client_authorizations"].uuid("admin_trustedclient"),),
        ).fetchone()
    assert counts == {table: len(loaded[table].rows) for table in TABLES} == ROWS
    assert token == (
        loader.identify("admin_trustedclient"),
        loaded["users"].uuid("admin"),
        loaded["api_clients"].uuid("trusted_workbench"),
    )


def test_the_cleanup_does_to_the_fixtures_what_arvados_fail_jobs_does(fixture_db, lab_env, tmp_path):
    """--check predicts and changes nothing; the run fails exactly fail_jobs' set, each job
    with its `dispatch` row (fail_job, crunch_dispatch.rb:222-232) and the model's `update`
    row; the unstarted running_job_in_publicly_accessible_project (jobs.yml:520-532) is
    reported, not failed; no other row changes; a rerun changes nothing."""
    database, loaded = fixture_db
    opts, flags = options(database, tmp_path), before_now(database) + ["--json"]
    with database.connect() as conn:
        threshold = h.db_now(conn).replace(microsecond=0)
        before, dump_before = snapshot(conn), h.pg_dump(database, lab_env)
        expected = failed_by_arvados(before["jobs"], threshold)

        predicted = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags + ["--check"]))
        assert h.pg_dump(database, lab_env) == dump_before
        result = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags))
        after = snapshot(conn)
        rerun = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags))
        assert snapshot(conn) == after

    assert labels_of(loaded, "jobs", expected) == sorted(FAILED_BY_ARVADOS)
    assert predicted["failed_jobs"] == result["failed_jobs"] == expected
    assert result["no_started_at"] == uuids_of(loaded, "jobs", ["running_job_in_publicly_accessible_project"])
    assert result["running_with_finished_at"] == uuids_of(loaded, "jobs", ["runningbarbaz"])
    assert rerun["failed_jobs"] == [] and rerun.get("changed") is not True
    # Every fixture token names an api_client (untrusted, trusted_workbench: ids not 0) and
    # was made at the load, after every job started: none is one get_authorization made.
    assert dispatch_tokens(before, expected, threshold) == result["revoked_tokens"] == []
    assert_only_the_failed_changed(loaded, before, after, expected)


def assert_only_the_failed_changed(loaded, before, after, failed) -> None:
    for table in TABLES:
        if table not in ("jobs", "logs"):
            assert after[table] == before[table], table
    changed = h.unchanged_except(before["jobs"], after["jobs"], set(failed))
    assert changed == [], labels_of(loaded, "jobs", changed)
    assert {after["jobs"][uuid]["state"] for uuid in failed} == {"Failed"}
    old_logs = {uuid: row for uuid, row in after["logs"].items() if uuid in before["logs"]}
    assert old_logs == before["logs"]
    new_logs = sorted(
        (row["object_uuid"], row["event_type"]) for u, row in after["logs"].items() if u not in before["logs"]
    )
    assert new_logs == sorted((uuid, kind) for uuid in failed for kind in ("dispatch", "update"))


def test_retry_on_a_fresh_copy_requeues_the_same_set(fixture_db, lab_env, tmp_path):
    """--retry takes fail_jobs' set too and requeues each job whose user it can name
    (runs_as); runningbarbaz names none (jobs.yml:144-170) and is failed, reported in
    not_requeued. running_job_with_components' two tasks (job_tasks.yml) are deleted with
    its requeue."""
    database, loaded = fixture_db
    with database.connect() as conn:
        threshold = h.db_now(conn).replace(microsecond=0)
        before = snapshot(conn)
    expected = failed_by_arvados(before["jobs"], threshold)
    requeued = sorted(uuid for uuid in expected if runs_as(before["jobs"][uuid]))

    result = h.cli_json(
        h.run_cli(lab_env, tmp_path, options(database, tmp_path, retry=True), before_now(database) + ["--json"])
    )
    with database.connect() as conn:
        after = snapshot(conn)

    assert labels_of(loaded, "jobs", set(expected) - set(requeued)) == ["runningbarbaz"]
    assert result["requeued_jobs"] == requeued
    assert result["not_requeued"] == uuids_of(loaded, "jobs", ["runningbarbaz"])
    assert {after["jobs"][uuid]["state"] for uuid in requeued} == {"Queued"}
    assert after["job_tasks"] == {}
    assert labels_of(loaded, "job_tasks", before["job_tasks"]) == ["running_job_task_1", "running_job_task_2"]
