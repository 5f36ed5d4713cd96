"""The cleanup on the crunch v1 jobs of Arvados' own test fixtures, as Arvados 1.4.3's
fail_jobs would treat them (services/api/lib/crunch_dispatch.rb:848-884: every job
`state = 'Running' and started_at < threshold`, failed with its `dispatch` row, whatever
finished_at says).

FIXTURE_JOBS restates, from services/api/test/fixtures/jobs.yml at the tag 1.4.3, the
columns the cleanup reads of every job that fixture file leaves Running, and of a queued
and a cancelled one beside them; each entry names its fixture label and line. Times are
the fixtures' ERB (`<%= 3.minute.ago.to_s(:db) %>`) as minutes before the database's now;
a column a fixture leaves out is NULL, but created_at, which Rails' fixture loader sets to
now. The rows go into Arvados 1.4.3's schema (lab/schema/1.4.3).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from lab import datagen
from tests.integration import fail_jobs_helpers as h
from tests.integration.conftest import schema_database
from tests.integration.test_arvados_fail_jobs_command import options

SCHEMA_1_4_3 = h.REPO_ROOT / "lab" / "schema" / "1.4.3"
ACTIVE = "zzzzz-tpzed-xurymjxw79nv3jz"
PROJECT = "zzzzz-j7d0g-v955i6s2oi1cbso"

# label: (line in 1.4.3:services/api/test/fixtures/jobs.yml, columns). Minutes ago for
# times; state Running and running true unless said.
FIXTURE_JOBS = {
    "running": (
        5,
        dict(uuid="zzzzz-8i9sb-pshmckwoma9plh7", owner_uuid=PROJECT, created=3, started=3, locked=ACTIVE),
    ),
    "runningbarbaz": (
        144,
        dict(uuid="zzzzz-8i9sb-cjs4pklxxjykyuj", owner_uuid=ACTIVE, created=4, started=3, finished=2, locked=None),
    ),
    "running_will_be_completed": (
        429,
        dict(
            uuid="zzzzz-8i9sb-rshmckwoma9pjh8",
            owner_uuid=PROJECT,
            created=3,
            started=3,
            locked="zzzzz-tpzed-d9tiejq69daie8f",
        ),
    ),
    "running_job_in_publicly_accessible_project": (
        520,
        dict(
            uuid="zzzzz-8i9sb-n7omg50bvt0m1nf",
            owner_uuid="zzzzz-j7d0g-zhxawtyetzwc5f0",
            modified_by=ACTIVE,
            running=None,
        ),
    ),
    "running_job_with_components": (
        565,
        dict(uuid="zzzzz-8i9sb-with2components", owner_uuid=ACTIVE, created=3, started=3, locked=ACTIVE),
    ),
    "running_job_with_components_at_level_1": (
        596,
        dict(uuid="zzzzz-8i9sb-jobcomponentsl1", owner_uuid=ACTIVE, created=720, started=720, locked=ACTIVE),
    ),
    "running_job_with_components_at_level_2": (
        627,
        dict(uuid="zzzzz-8i9sb-jobcomponentsl2", owner_uuid=ACTIVE, created=720, started=720, locked=ACTIVE),
    ),
    "running_job_1_with_components_at_level_3": (
        657,
        dict(uuid="zzzzz-8i9sb-job1atlevel3noc", owner_uuid=ACTIVE, created=720, started=720, locked=ACTIVE),
    ),
    "running_job_2_with_components_at_level_3": (
        684,
        dict(uuid="zzzzz-8i9sb-job2atlevel3noc", owner_uuid=ACTIVE, created=720, started=720, locked=ACTIVE),
    ),
    "running_job_1_with_circular_component_relationship": (
        712,
        dict(uuid="zzzzz-8i9sb-job1withcirculr", owner_uuid=ACTIVE, created=720, started=720, locked=ACTIVE),
    ),
    "running_job_2_with_circular_component_relationship": (
        741,
        dict(uuid="zzzzz-8i9sb-job2withcirculr", owner_uuid=ACTIVE, created=720, started=720, locked=ACTIVE),
    ),
    "queued": (
        349,
        dict(uuid="zzzzz-8i9sb-grx15v5mjnsyxk7", owner_uuid=ACTIVE, created=1, state="Queued", running=None),
    ),
    "running_cancelled": (
        32,
        dict(
            uuid="zzzzz-8i9sb-4cf0nhn6xte809j",
            owner_uuid=ACTIVE,
            created=4,
            started=3,
            cancelled=1,
            locked=ACTIVE,
            state="Cancelled",
        ),
    ),
}


def by_label(*labels: str) -> list[str]:
    return sorted(FIXTURE_JOBS[label][1]["uuid"] for label in labels)


RUNNING = [label for label, (_line, row) in FIXTURE_JOBS.items() if row.get("state", "Running") == "Running"]
# Arvados' fail_jobs takes `started_at < threshold`: a NULL started_at never qualifies.
FAILED_BY_ARVADOS = [label for label in RUNNING if FIXTURE_JOBS[label][1].get("started") is not None]


def load_fixture_jobs(conn) -> None:
    now = h.db_now(conn)

    def ago(minutes):
        return None if minutes is None else now - timedelta(minutes=minutes)

    for _label, (_line, row) in FIXTURE_JOBS.items():
        conn.execute(
            "INSERT INTO jobs (uuid, owner_uuid, modified_by_user_uuid, created_at, updated_at, started_at,"
            " finished_at, cancelled_at, is_locked_by_uuid, state, running, priority, script_parameters,"
            " tasks_summary, runtime_constraints) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 0,"
            " '{}', '{}', '{}')",
            (
                row["uuid"],
                row["owner_uuid"],
                row.get("modified_by"),
                ago(row.get("created", 0)),
                ago(row.get("created", 0)),
                ago(row.get("started")),
                ago(row.get("finished")),
                ago(row.get("cancelled")),
                row.get("locked"),
                row.get("state", "Running"),
                row.get("running", True),
            ),
        )
    conn.commit()


@pytest.fixture
def fixture_db(lab):
    with schema_database(lab, SCHEMA_1_4_3) as database:
        with database.connect() as conn:
            load_fixture_jobs(conn)
        yield database


def before_now(database) -> list[str]:
    """`--before` the database's now, in whole seconds (a later one is refused): every
    fixture job started minutes ago is before it."""
    with database.connect() as conn:
        now = h.db_now(conn)
    return ["--before", "@%d" % int((now - datagen.EPOCH).total_seconds())]


def test_the_cleanup_fails_exactly_the_fixture_jobs_arvados_fail_jobs_fails(fixture_db, lab_env, tmp_path):
    """runningbarbaz is Running with a finished_at (jobs.yml:144-170): Arvados fails it, and
    so must the default run; running_job_in_publicly_accessible_project has no started_at
    (jobs.yml:520-532): Arvados' `started_at < threshold` never takes it, the run reports it."""
    opts = options(fixture_db, tmp_path)
    flags = before_now(fixture_db) + ["--json"]
    with fixture_db.connect() as conn:
        jobs_before = h.jobs(conn)

        predicted = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags + ["--check"]))
        assert h.jobs(conn) == jobs_before
        result = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags))
        rerun = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags))
        jobs_after = h.jobs(conn)
        logs = h.logs(conn)

    assert result["failed_jobs"] == predicted["failed_jobs"] == by_label(*FAILED_BY_ARVADOS)
    assert result["running_with_finished_at"] == by_label("runningbarbaz")
    assert result["no_started_at"] == by_label("running_job_in_publicly_accessible_project")
    for label in FAILED_BY_ARVADOS:
        assert jobs_after[FIXTURE_JOBS[label][1]["uuid"]]["state"] == "Failed", label
    # the queued, the cancelled and the unstarted fixture jobs are left as they were
    for label in ("queued", "running_cancelled", "running_job_in_publicly_accessible_project"):
        uuid = FIXTURE_JOBS[label][1]["uuid"]
        assert jobs_after[uuid] == jobs_before[uuid], label
    # fail_job's `dispatch` row (crunch_dispatch.rb:222-232) and the model's `update` row
    kinds = sorted((row["object_uuid"], row["event_type"]) for row in logs)
    assert kinds == sorted((uuid, kind) for uuid in by_label(*FAILED_BY_ARVADOS) for kind in ("dispatch", "update"))
    assert rerun["failed_jobs"] == [] and rerun.get("changed") is not True


def test_retry_requeues_the_fixture_jobs_it_can_run_as_their_user_and_fails_runningbarbaz(
    fixture_db, lab_env, tmp_path
):
    """runningbarbaz names no user in is_locked_by_uuid or modified_by_user_uuid
    (jobs.yml:144-170): crunch-dispatch.rb would make its next token for nobody
    (get_authorization, crunch_dispatch.rb:259-279), so it is failed, not requeued."""
    opts = options(fixture_db, tmp_path, retry=True)
    result = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_now(fixture_db) + ["--json"]))

    requeued = [label for label in FAILED_BY_ARVADOS if label != "runningbarbaz"]
    assert result["requeued_jobs"] == by_label(*requeued)
    assert result["not_requeued"] == by_label("runningbarbaz")
    with fixture_db.connect() as conn:
        states = {uuid: row["state"] for uuid, row in h.jobs(conn).items()}
    assert {label: states[FIXTURE_JOBS[label][1]["uuid"]] for label in FAILED_BY_ARVADOS} == {
        label: "Failed" if label == "runningbarbaz" else "Queued" for label in FAILED_BY_ARVADOS
    }
