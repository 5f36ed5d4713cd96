"""Arvados' own test fixtures, the files themselves (services/api/test/fixtures/*.yml at
the tag), loaded as Rails' fixture loader loads them (tests/integration/
arvados_fixture_loader.py) into the tag's schema, with the serialized columns stored both
ways old clusters hold them: at 1.4.3 the cleanup (arvados-fail-jobs), arvados_reconcile_info
and the watch on its crunch v1 jobs, at 3.2.1 arvados_reconcile_info and the watch on its
containers, with real Slurm jobs named after some of them.

Nothing here restates a fixture: what must happen to each row is computed from the loaded
rows by Arvados' own rule, and the labels it yields are checked against the list named
here, so a loader that drops or misreads a row fails. The files are not kept in this
repository; without $ARVADOS_SOURCE_GIT or $ARVADOS_FIXTURES_DIR the tests are skipped and
say so.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.integration import arvados_fixture_loader as loader
from tests.integration import fail_jobs_helpers as h
from tests.integration import reconcile_helpers as rh
from tests.integration.conftest import FreshDatabase, schema_database
from tests.integration.test_arvados_fail_jobs_command import options
from tests.integration.test_arvados_fixture_jobs import before_now
from tests.integration.test_watch_command import P, run_watch, watch_options
from tests.unit.plugins.module_utils.prometheus_samples import samples

TAG = "1.4.3"
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


Loaded = dict[str, loader.FixtureTable]


@contextlib.contextmanager
def fixtures_database(
    lab, tag: str, tables: tuple[str, ...], serialization: str
) -> Iterator[tuple[FreshDatabase, Loaded]]:
    """The tag's schema (lab/schema/<tag>) holding the tag's fixtures of `tables`."""
    source = fixture_source(tag)
    with schema_database(lab, h.REPO_ROOT / "lab" / "schema" / tag) as database:
        with database.connect() as conn:
            loaded = loader.load_fixtures(conn, source, tag, tables, serialization)
        yield database, loaded


@pytest.fixture(params=loader.SERIALIZATIONS)
def fixture_db(lab, request) -> Iterator[tuple[FreshDatabase, Loaded]]:
    """1.4.3's schema holding 1.4.3's fixtures, serialized columns one way or the other."""
    with fixtures_database(lab, TAG, TABLES, request.param) as loaded:
        yield loaded


def counts(conn, tables) -> dict[str, int]:
    return {table: conn.execute("SELECT count(*) FROM %s" % table).fetchone()[0] for table in tables}


def snapshot(conn, tables: tuple[str, ...] = TABLES) -> dict[str, dict[str, dict[str, Any]]]:
    return {table: h.rows_by_uuid(conn, table) for table in tables}


def labels_of(loaded: Mapping[str, loader.FixtureTable], table: str, uuids) -> list[str]:
    by_uuid = {row.get("uuid"): label for label, row in loaded[table].rows.items()}
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
        loaded_counts = counts(conn, TABLES)
        token = conn.execute(
            "SELECT t.id, u.uuid, c.uuid FROM api_client_authorizations t JOIN users u ON u.id = t.user_id"
            " JOIN api_clients c ON c.id = t.api_client_id WHERE t.uuid = %s",
            (loaded["api_client_authorizations"].uuid("admin_trustedclient"),),
        ).fetchone()
    assert loaded_counts == {table: len(loaded[table].rows) for table in TABLES} == ROWS
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
    assert_update_rows_hold_what_the_model_loads(loaded, before, after, expected)


def assert_update_rows_hold_what_the_model_loads(loaded, before, after, failed) -> None:
    """Stored as JSON (or NULL) or as YAML, each serialized column of a failed job's
    `update` row is what Job's serializer loads (1.4.3 app/models/job.rb:14-17,
    services/api/lib/serializers.rb:18-46): the fixture's own Hash, {} where it gives none."""
    fixtures = {row["uuid"]: row for row in loaded["jobs"].rows.values()}
    updates = {
        row["object_uuid"]: json.loads(row["properties"])
        for uuid, row in after["logs"].items()
        if uuid not in before["logs"] and row["event_type"] == "update"
    }
    for uuid in failed:
        for column in h.JOB_HASH_COLUMNS:
            assert updates[uuid]["old_attributes"][column] == (fixtures[uuid].get(column) or {}), (uuid, column)


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


# Fixture jobs given a Slurm job named after them, as crunch-dispatch.rb's salloc names
# its (--job-name=<uuid>); held, so they stay pending.
JOBS_WITH_SLURM_JOB = ("running", "queued", "foobar", "cancelled")
# check_orphaned_slurm_jobs would cancel these Slurm jobs (v1_stray_by_arvados)...
V1_STRAY_BY_ARVADOS = ["cancelled", "foobar"]
# ...and these Running jobs have none, with no crunch-dispatch.rb to run them again.
V1_ORPHANED_BY_ARVADOS = [
    "running_job_1_with_circular_component_relationship",
    "running_job_1_with_components_at_level_3",
    "running_job_2_with_circular_component_relationship",
    "running_job_2_with_components_at_level_3",
    "running_job_in_publicly_accessible_project",
    "running_job_with_components",
    "running_job_with_components_at_level_1",
    "running_job_with_components_at_level_2",
    "running_will_be_completed",
    "runningbarbaz",
]


def modified_within(row: Mapping[str, Any], now, seconds: float) -> bool:
    return row["modified_at"] is not None and (now - row["modified_at"]).total_seconds() < seconds


def v1_stray_by_arvados(jobs: Mapping[str, Mapping[str, Any]], with_job, now) -> list[str]:
    """check_orphaned_slurm_jobs (1.4.3 services/api/lib/crunch_dispatch.rb:885-902)
    cancels the Slurm job of every job neither Running nor Queued whose modified_at is not
    within the last 60 s (a NULL modified_at, as every fixture job has, is not)."""
    return sorted(
        uuid
        for uuid in with_job
        if jobs[uuid]["state"] not in ("Running", "Queued") and not modified_within(jobs[uuid], now, 60)
    )


def v1_orphaned_by_arvados(jobs: Mapping[str, Mapping[str, Any]], with_job) -> list[str]:
    """The Running jobs without a Slurm job once crunch-dispatch.rb is gone: only the
    process that saw crunch-job exit 93 would run them again, from its memory
    (@todo_job_retries, crunch_dispatch.rb:50); a restarted one fails them (fail_jobs,
    :848-884) or, unstarted, leaves them Running."""
    return sorted(uuid for uuid, row in jobs.items() if row["state"] == "Running" and uuid not in with_job)


def test_reconcile_and_the_watch_on_the_fixture_jobs(fixture_db, lab_env, slurm, tmp_path):
    """With crunch-dispatch.rb stopped: the Slurm jobs of foobar (Complete) and cancelled are
    stray, those of running and queued are left alone, the ten other Running jobs (the
    unstarted one too) are orphaned; the watch counts the same; no row changes."""
    database, loaded = fixture_db
    job_ids = {uuid: slurm.submit(uuid, hold=True) for uuid in uuids_of(loaded, "jobs", JOBS_WITH_SLURM_JOB)}
    with database.connect() as conn:
        before, now = snapshot(conn), h.db_now(conn)
    config = database.write_arvados_config(tmp_path / "config.yml")
    expected_strays = v1_stray_by_arvados(before["jobs"], job_ids, now)
    expected_orphans = v1_orphaned_by_arvados(before["jobs"], job_ids)

    result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, crunch_v1_dispatcher="stopped"), check=True)
    watch = dict(watch_options(database, tmp_path), crunch_v1_dispatcher="stopped")
    completed = run_watch(lab_env, tmp_path, watch)

    assert not result.get("failed"), result.get("msg")
    strays = {entry["name"]: entry["job_id"] for entry in result["stray_slurm_jobs"] if entry["kind"] == "job"}
    assert labels_of(loaded, "jobs", expected_strays) == V1_STRAY_BY_ARVADOS
    assert strays == {uuid: job_ids[uuid] for uuid in expected_strays}
    assert labels_of(loaded, "jobs", expected_orphans) == V1_ORPHANED_BY_ARVADOS
    assert rh.names(result["orphaned_jobs"]) == expected_orphans
    assert result["jobs_ending"] == [] and result["missing_from_database"] == []
    assert completed.returncode == 0, completed.stderr
    read = samples(Path(watch["metrics_file"]).read_text())
    assert read[(P + "orphans", (("kind", "job"), ("state", "Running")))] == len(V1_ORPHANED_BY_ARVADOS)
    assert read[(P + "stray_slurm_jobs", (("kind", "job"), ("state", "pending")))] == len(V1_STRAY_BY_ARVADOS)
    with database.connect() as conn:
        assert snapshot(conn) == before


# -- 3.2.1: the containers, arvados_reconcile_info and the watch --------------------------

TAG_3_2_1 = "3.2.1"
# The containers and what they reference that this collection reads (3.2.1 has no jobs
# fixtures: 3.0 removed the jobs API; the table stays, empty here).
TABLES_3_2_1 = ("users", "api_client_authorizations", "logs", "containers", "container_requests")
ROWS_3_2_1 = {"users": 29, "api_client_authorizations": 48, "logs": 12, "containers": 22, "container_requests": 92}
# Fixture containers given a Slurm job named after them, as crunch-dispatch-slurm names its
# (--job-name=<uuid>); held, so they stay pending and take no CPU.
WITH_SLURM_JOB = ("running", "locked", "queued", "completed")
# crunch-dispatch-slurm would cancel these Slurm jobs (stray_by_arvados)...
STRAY_BY_ARVADOS = ["completed", "locked", "queued"]
# ...and act on these live containers that have none (orphaned_by_arvados).
ORPHANED_BY_ARVADOS = ["running_container_with_logs", "running_older", "running_to_be_deleted", "runtime_token"]
ORPHAN_GRACE = 60.0  # arvados_reconcile_info's default orphan_grace


def stray_by_arvados(containers: Mapping[str, Mapping[str, Any]], with_job) -> list[str]:
    """The Slurm jobs crunch-dispatch-slurm cancels: its container's tracker closes, which
    3.2.1 sdk/go/dispatch/dispatch.go does on Queued, Cancelled and Complete (:376-377,
    :290-292), and runContainer then cancels (services/crunch-dispatch-slurm/
    crunch-dispatch-slurm.go:305-308); or its priority is 0 (:309-311)."""
    return sorted(
        uuid
        for uuid in with_job
        if containers[uuid]["state"] in ("Queued", "Cancelled", "Complete") or containers[uuid]["priority"] == 0
    )


def orphaned_by_arvados(containers: Mapping[str, Mapping[str, Any]], with_job, now) -> list[str]:
    """The live containers (Locked or Running: the states a dispatcher holds, 3.2.1
    app/models/container.rb:123-129) with no Slurm job: crunch-dispatch-slurm.go:293-303
    cancels a Running one whose Slurm job is gone and unlocks a Locked one, and a dispatcher
    that holds a Locked one submits it anew at its start (:269-277). A Locked one modified
    within the grace is spared: the dispatcher may not have submitted it yet (:269-273)."""
    return sorted(
        uuid
        for uuid, row in containers.items()
        if row["state"] in ("Locked", "Running")
        and uuid not in with_job
        and not (row["state"] == "Locked" and modified_within(row, now, ORPHAN_GRACE))
    )


@pytest.fixture(params=loader.SERIALIZATIONS)
def containers_db(lab, request) -> Iterator[tuple[FreshDatabase, Loaded]]:
    """3.2.1's schema holding 3.2.1's container fixtures and what they reference."""
    with fixtures_database(lab, TAG_3_2_1, TABLES_3_2_1, request.param) as loaded:
        yield loaded


def submit_for_fixtures(slurm, loaded: Loaded) -> dict[str, str]:
    """Held Slurm jobs named after the WITH_SLURM_JOB containers: uuid -> Slurm job id."""
    uuids = uuids_of(loaded, "containers", WITH_SLURM_JOB)
    return {uuid: slurm.submit(uuid, hold=True) for uuid in uuids}


def test_reconcile_reports_what_crunch_dispatch_slurm_would_do_with_the_fixture_containers(
    containers_db, lab_env, slurm, tmp_path
):
    """running (priority 12, a Slurm job) is live work, left alone (crunch-dispatch-slurm.go
    :312-321 keeps monitoring it); the Slurm jobs of completed and queued (trackers closed)
    and of locked (priority 0) are stray; the four live containers without a Slurm job are
    orphaned; nothing is missing from the database, and no row changes."""
    database, loaded = containers_db
    job_ids = submit_for_fixtures(slurm, loaded)
    with database.connect() as conn:
        assert counts(conn, TABLES_3_2_1) == {table: len(loaded[table].rows) for table in TABLES_3_2_1} == ROWS_3_2_1
        before, now = snapshot(conn, TABLES_3_2_1), h.db_now(conn)
    config = database.write_arvados_config(tmp_path / "config.yml")

    result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config), check=True)

    assert not result.get("failed"), result.get("msg")
    strays = {entry["name"]: entry for entry in result["stray_slurm_jobs"] if entry["kind"] == "container"}
    expected_strays = stray_by_arvados(before["containers"], job_ids)
    assert labels_of(loaded, "containers", expected_strays) == STRAY_BY_ARVADOS
    assert sorted(strays) == expected_strays
    assert {uuid: strays[uuid]["job_id"] for uuid in strays} == {uuid: job_ids[uuid] for uuid in expected_strays}
    expected_orphans = orphaned_by_arvados(before["containers"], job_ids, now)
    assert labels_of(loaded, "containers", expected_orphans) == ORPHANED_BY_ARVADOS
    assert rh.names(result["orphaned_containers"]) == expected_orphans
    assert result["missing_from_database"] == []
    with database.connect() as conn:
        assert snapshot(conn, TABLES_3_2_1) == before


def test_the_watch_counts_the_fixture_containers_as_reconcile_reports_them(containers_db, lab_env, slurm, tmp_path):
    """The watch's gauges (arvados-recovery-watch) of the same read: per state the orphaned
    containers of ORPHANED_BY_ARVADOS (three Running, runtime_token Locked) and the three
    stray Slurm jobs, pending (held), of STRAY_BY_ARVADOS."""
    database, loaded = containers_db
    submit_for_fixtures(slurm, loaded)
    options = watch_options(database, tmp_path)
    result_file = tmp_path / "result.json"

    completed = run_watch(lab_env, tmp_path, options, "--json", str(result_file))

    assert completed.returncode == 0, completed.stderr
    result = json.loads(result_file.read_text())
    orphans = {entry["uuid"]: entry["state"] for entry in result["orphaned_containers"]}
    assert sorted(orphans) == uuids_of(loaded, "containers", ORPHANED_BY_ARVADOS)
    read = samples(Path(options["metrics_file"]).read_text())
    for state in ("Locked", "Running"):
        expected = sum(1 for value in orphans.values() if value == state)
        assert read[(P + "orphans", (("kind", "container"), ("state", state)))] == expected, state
    assert read[(P + "orphans", (("kind", "container"), ("state", "Running")))] == 3
    assert read[(P + "stray_slurm_jobs", (("kind", "container"), ("state", "pending")))] == len(STRAY_BY_ARVADOS)
    assert read[(P + "watch_read_failed", ())] == 0
