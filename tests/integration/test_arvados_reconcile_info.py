"""arvados_reconcile_info on the real lab: real squeue and Slurm jobs, the real schema in a
fresh database per test, real ansible-playbook runs. Each test cancels, by id, the Slurm
jobs it submitted; assertions name this test's own UUIDs only (the lab's queue may hold
other jobs).
"""

from __future__ import annotations

import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.integration import reconcile_helpers as rh
from tests.integration.slurm_helpers import finished_calls, logged_calls, logging_client, wait_for


@pytest.fixture
def config(fresh_db, tmp_path):
    return fresh_db.write_arvados_config(tmp_path / "config.yml")


def between_the_listings(lab_env, tmp_path, config, fresh_db, action, settle=8):
    """Run the module with `action` done between its two polls: once its first squeue has
    ended and its first read of the records has ended its transaction; (the result, the
    number of squeue calls). The first poll starts squeue, then reads the records while it
    runs: done at squeue's start, on a busy machine, the action could come before the read
    and be in the first poll's view as well as in the second's."""
    squeue, log = logging_client(tmp_path / "bin", "squeue")
    outcome = {}

    def reconcile():
        outcome["result"] = rh.run_reconcile(
            lab_env,
            tmp_path,
            rh.reconcile_args(config, settle=settle, squeue_path=str(squeue), crunch_v1_dispatcher="stopped"),
        )

    thread = threading.Thread(target=reconcile)
    thread.start()
    try:
        assert wait_for(lambda: finished_calls(log) >= 1, 60), "the first squeue never ended"
        assert wait_for(lambda: not transaction_open(fresh_db), 30), "the first read never ended"
        assert len(logged_calls(log)) == 1, "the second poll began before the action"
        action()
    finally:
        thread.join(120)
    return outcome["result"], len(logged_calls(log))


def transaction_open(fresh_db) -> bool:
    """Whether a session of another process is in a statement or a transaction on the test's
    database: the module's, which reads the records right after it starts its first squeue
    and ends that read's transaction before it waits for the second poll."""
    with psycopg.connect(**fresh_db.connection, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) > 0 FROM pg_stat_activity"
            " WHERE datname = current_database() AND backend_type = 'client backend'"
            " AND pid <> pg_backend_pid() AND state <> 'idle'"
        ).fetchone()[0]


def test_live_work_is_left_alone_and_lost_work_is_orphaned(lab_env, slurm, fresh_db, records, config, tmp_path):
    # A server whose sessions write dates otherwise than ISO by default.
    records.conn.execute(sql.SQL("ALTER DATABASE {} SET DateStyle = 'SQL, DMY'").format(sql.Identifier(fresh_db.name)))
    records.conn.commit()
    live_job = records.job("Running")
    lost_job = records.job("Running")
    live_container = records.container("Running")
    lost_container = records.container("Locked")
    slurm.submit(live_job, hold=True)
    slurm.submit(live_container, hold=True)

    result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, crunch_v1_dispatcher="stopped"))

    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    assert rh.names(result["orphaned_jobs"]) == [lost_job]
    assert rh.names(result["orphaned_containers"]) == [lost_container]
    assert result["orphaned_containers"][0]["locked_by_uuid"] == rh.DISPATCHER_TOKEN
    assert result["orphaned_jobs"][0]["reason"].startswith("job is Running, but no Slurm job")
    # ISO 8601 as the server writes it (DateStyle ISO whatever the server's own), the
    # database's instant exactly.
    for key, table, uuid in (
        ("orphaned_jobs", "jobs", lost_job),
        ("orphaned_containers", "containers", lost_container),
    ):
        reported_start = result[key][0]["started_at"]
        assert reported_start is None or "T" in reported_start
        expected = records.started_at(table, uuid)
        assert (datetime.fromisoformat(reported_start) if reported_start else None) == expected
    reported = {entry["name"] for entry in result["stray_slurm_jobs"]}
    assert not reported & {live_job, live_container}
    assert result["slurm"]["squeue_calls"] == 2
    assert result["evidence"]["jobs"]["with_slurm_job"] == 1
    assert records.state("jobs", lost_job) == "Running"


def test_stray_slurm_jobs_are_reported_with_their_slurm_details(lab_env, slurm, records, config, tmp_path):
    complete_job = records.job("Complete")
    cancelled_container = records.container("Cancelled", priority=0)
    unwanted_container = records.container("Running", priority=0)
    # 2.7.4 and 3.2.1 sdk/go/dispatch/dispatch.go: the tracker closes on Queued, and
    # services/crunch-dispatch-slurm/crunch-dispatch-slurm.go runContainer cancels its job.
    queued_container = records.container("Queued")
    ids = {
        uuid: slurm.submit(uuid, hold=True)
        for uuid in (complete_job, cancelled_container, unwanted_container, queued_container)
    }

    result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config), check=True)

    strays = {entry["name"]: entry for entry in result["stray_slurm_jobs"]}
    assert set(ids) <= set(strays)
    for uuid, job_id in ids.items():
        assert strays[uuid]["job_id"] == job_id
        assert strays[uuid]["state"] == "PENDING"
        assert strays[uuid]["user"] == "root"
        assert "nodes" in strays[uuid]
    assert strays[complete_job]["reason"].startswith("job is Complete")
    assert strays[cancelled_container]["record_state"] == "Cancelled"
    assert "priority 0" in strays[unwanted_container]["reason"]
    assert strays[queued_container]["record_state"] == "Queued"
    assert "tracker closes" in strays[queued_container]["reason"]
    assert not {entry["name"] for entry in result["missing_from_database"]} & set(ids)


def test_each_kind_has_its_slurm_user_and_the_other_users_jobs_are_listed(lab_env, slurm, records, config, tmp_path):
    # 1.4.3 services/api/lib/crunch_dispatch.rb: salloc under `sudo -u CrunchJobUser`;
    # services/crunch-dispatch-slurm/slurm.go (1.4.3 to 3.2.1): sbatch as the dispatcher's user.
    complete_job = records.job("Complete")
    cancelled_container = records.container("Cancelled", priority=0)
    job_ids = {user: slurm.submit(complete_job, hold=True, user=user) for user in ("root", "nobody")}
    container_ids = {user: slurm.submit(cancelled_container, hold=True, user=user) for user in ("root", "nobody")}

    result = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, slurm_users={"jobs": "nobody", "containers": "root"}), check=True
    )

    strays = {entry["job_id"]: entry["user"] for entry in result["stray_slurm_jobs"]}
    others = {entry["job_id"]: entry for entry in result["skipped_other_user"]}
    assert strays == {job_ids["nobody"]: "nobody", container_ids["root"]: "root"}
    assert set(others) == {job_ids["root"], container_ids["nobody"]}
    assert others[container_ids["nobody"]]["record_state"] == "Cancelled"
    assert others[job_ids["root"]]["reason"].startswith("job is Complete")
    assert result["counts"]["skipped_other_user"] == 2


def test_a_missing_uuid_is_stray_for_jobs_left_alone_for_containers_unless_told(
    lab_env, slurm, records, config, tmp_path
):
    # 1.4.3 services/api/lib/crunch_dispatch.rb:892-900: squeue's job UUIDs minus those in
    # the jobs table are scancelled. 2.7.4 and 3.2.1 sdk/go/dispatch/dispatch.go,
    # TrackContainer: the dispatcher's GET of an unknown UUID fails and nothing is cancelled.
    unknown_container = records.container("Queued")
    unknown_job = records.job("Queued")
    records.conn.execute("DELETE FROM containers WHERE uuid = %s", (unknown_container,))
    records.conn.execute("DELETE FROM jobs WHERE uuid = %s", (unknown_job,))
    records.conn.commit()
    ids = {uuid: slurm.submit(uuid, hold=True) for uuid in (unknown_container, unknown_job)}

    default = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, orphans="never"))
    refused = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, orphans="never", missing_are_stray=False))
    asked = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, orphans="never", missing_are_stray=True))

    assert not default.get("failed"), default.get("msg")
    missing = {entry["name"]: entry for entry in default["missing_from_database"]}
    assert set(ids) <= set(missing)
    strays = {entry["name"]: entry for entry in default["stray_slurm_jobs"]}
    assert unknown_job in strays and unknown_container not in strays
    assert strays[unknown_job]["reason"].startswith("no job of this UUID in the database: crunch-dispatch.rb cancels")
    assert default["missing_are_stray"] is None
    assert default["missing_are_stray_by_kind"] == {"jobs": True, "containers": False}
    for uuid, job_id in ids.items():
        assert missing[uuid]["job_id"] == job_id and missing[uuid]["record_state"] is None
    assert missing[unknown_container]["kind"] == "container" and missing[unknown_job]["kind"] == "job"
    assert "no container of this UUID in the database" in missing[unknown_container]["reason"]
    assert default["counts"]["missing_from_database"] >= 2
    assert not {entry["name"] for entry in refused["stray_slurm_jobs"]} & set(ids)
    assert refused["missing_are_stray_by_kind"] == {"jobs": False, "containers": False}
    assert set(ids) <= {entry["name"] for entry in asked["stray_slurm_jobs"]}
    assert set(ids) <= {entry["name"] for entry in asked["missing_from_database"]}


def test_a_running_slurm_job_shows_its_node(lab_env, slurm, records, config, tmp_path):
    complete_job = records.job("Complete")
    job_id = slurm.submit(complete_job)
    slurm.wait_for_state(job_id, "RUNNING")

    result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config))

    stray = [entry for entry in result["stray_slurm_jobs"] if entry["name"] == complete_job]
    assert [(entry["job_id"], entry["state"], entry["nodes"]) for entry in stray] == [(job_id, "RUNNING", rh.LAB_NODE)]


def test_a_slurm_job_submitted_between_the_polls_is_not_orphaned(lab_env, slurm, fresh_db, records, config, tmp_path):
    witness = records.job("Running")
    late = records.job("Running")
    slurm.submit(witness, hold=True)
    result, squeue_calls = between_the_listings(
        lab_env, tmp_path, config, fresh_db, lambda: slurm.submit(late, hold=True)
    )
    assert squeue_calls == 2
    assert late not in rh.names(result["orphaned_jobs"])
    assert result["orphaned_jobs"] == []


def test_a_v1_job_without_a_slurm_job_awaits_a_running_dispatcher_s_retry(lab_env, slurm, records, config, tmp_path):
    # 1.4.3 services/api/lib/crunch_dispatch.rb, reap_children: a job whose crunch-job exited
    # 93 stays Running in @todo_job_retries, without a Slurm job, until idle nodes return.
    witness = records.job("Running")
    retrying = records.job("Running")
    slurm.submit(witness, hold=True)

    running = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"], crunch_v1_dispatcher="running")
    )
    unknown = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"]))
    stopped = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"], crunch_v1_dispatcher="stopped")
    )

    assert not running.get("failed"), running.get("msg")
    assert running["orphaned_jobs"] == [] and rh.names(running["jobs_awaiting_retry"]) == [retrying]
    assert "crunch-dispatch.rb runs and may retry it" in running["jobs_awaiting_retry"][0]["reason"]
    assert running["counts"]["jobs_awaiting_retry"] == 1
    assert unknown["orphaned_jobs"] == [] and rh.names(unknown["jobs_awaiting_retry"]) == [retrying]
    assert "no evidence whether crunch-dispatch.rb runs" in unknown["jobs_awaiting_retry"][0]["reason"]
    assert rh.names(stopped["orphaned_jobs"]) == [retrying] and stopped["jobs_awaiting_retry"] == []
    assert records.state("jobs", retrying) == "Running"


def test_a_job_awaiting_retry_too_long_is_overdue_with_its_age(lab_env, slurm, records, config, tmp_path):
    # 1.4.3 services/api/lib/crunch_dispatch.rb:50: @todo_job_retries is in memory only, so a
    # restarted crunch-dispatch.rb never retries the job. Default bound: 3 retries x its
    # 5-minute wait for nodes (lines 15, 214-218), 900 s.
    witness = records.job("Running")
    recent = records.job("Running", modified_ago=100)
    forgotten = records.job("Running", modified_ago=100)
    slurm.submit(witness, hold=True)
    # Moved back in the database rather than waited for.
    records.modified("jobs", forgotten, 1000)
    args = rh.reconcile_args(config, kinds=["jobs"], crunch_v1_dispatcher="running")

    default = rh.run_reconcile(lab_env, tmp_path, args)
    tighter = rh.run_reconcile(lab_env, tmp_path, dict(args, retry_overdue_after=50))

    assert not default.get("failed"), default.get("msg")
    entries = {entry["uuid"]: entry for entry in default["jobs_awaiting_retry"]}
    assert sorted(entries) == sorted([recent, forgotten])
    assert entries[forgotten]["overdue"] is True and entries[recent]["overdue"] is False
    # The ages by the database's clock, at the first read (ansible-playbook's start aside).
    assert 1000 <= entries[forgotten]["age_seconds"] < 1060, entries[forgotten]
    assert 100 <= entries[recent]["age_seconds"] < 160, entries[recent]
    assert entries[forgotten]["reason"].startswith("awaiting crunch-dispatch.rb's retry for 10")
    assert "longer than retry_overdue_after (900 s)" in entries[forgotten]["reason"]
    assert default["retry_overdue_after"] == 900.0
    assert default["counts"]["jobs_retry_overdue"] == 1 and default["counts"]["jobs_awaiting_retry"] == 2
    assert tighter["counts"]["jobs_retry_overdue"] == 2
    assert records.state("jobs", forgotten) == "Running"


def test_only_a_locked_container_modified_within_the_grace_is_spared(lab_env, slurm, records, config, tmp_path):
    # No Arvados rule spares orphans: the grace stands for crunch-dispatch-slurm's wait for
    # its next squeue poll between its lock and its sbatch (3.2.1
    # crunch-dispatch-slurm.go:269-273). modified_at is UTC; the database's session writes
    # dates in another zone here, so a comparison in local time would be off by hours.
    records.conn.execute(
        sql.SQL("ALTER DATABASE {} SET TimeZone = 'America/Los_Angeles'").format(
            sql.Identifier(records.conn.info.dbname)
        )
    )
    records.conn.commit()
    witness_job = records.job("Running")
    witness_container = records.container("Running")
    fresh_job = records.job("Running", modified_ago=5)
    fresh_container = records.container("Locked", modified_ago=5)
    fresh_running_container = records.container("Running", modified_ago=5)
    old_job = records.job("Running", modified_ago=120)
    slurm.submit(witness_job, hold=True)
    slurm.submit(witness_container, hold=True)
    args = rh.reconcile_args(config, crunch_v1_dispatcher="stopped")

    spared = rh.run_reconcile(lab_env, tmp_path, args)
    no_grace = rh.run_reconcile(lab_env, tmp_path, dict(args, orphan_grace=0))

    assert not spared.get("failed"), spared.get("msg")
    assert rh.names(spared["orphaned_jobs"]) == sorted([fresh_job, old_job])
    assert rh.names(spared["orphaned_containers"]) == [fresh_running_container]
    assert spared["evidence"]["jobs"]["recently_modified"] == 0
    assert spared["evidence"]["containers"]["recently_modified"] == 1
    assert rh.names(no_grace["orphaned_containers"]) == sorted([fresh_container, fresh_running_container])
    assert no_grace["evidence"]["containers"]["recently_modified"] == 0


@pytest.mark.parametrize("state", ["Cancelled", "Complete"])
def test_a_v1_job_ended_seconds_ago_is_ending_then_stray_after_60_s(lab_env, slurm, records, config, tmp_path, state):
    # 1.4.3 services/api/lib/crunch_dispatch.rb:892-896: check_orphaned_slurm_jobs never
    # scancels the Slurm job of a job modified in the last 60 s: crunch-job is still saving
    # its work. A session zone other than UTC must not shift the age by hours.
    records.conn.execute(
        sql.SQL("ALTER DATABASE {} SET TimeZone = 'Asia/Kolkata'").format(sql.Identifier(records.conn.info.dbname))
    )
    records.conn.commit()
    ended = records.job(state, modified_ago=5)
    slurm_id = slurm.submit(ended)
    slurm.wait_for_state(slurm_id, "RUNNING")
    args = rh.reconcile_args(config, kinds=["jobs"], orphans="never")

    fresh = rh.run_reconcile(lab_env, tmp_path, args)

    assert not fresh.get("failed"), fresh.get("msg")
    assert ended not in {entry["name"] for entry in fresh["stray_slurm_jobs"]}
    [entry] = [entry for entry in fresh["jobs_ending"] if entry["name"] == ended]
    assert (entry["job_id"], entry["record_state"], entry["kind"]) == (slurm_id, state, "job")
    # 5 s ago at insertion, plus the run's own seconds (settle 1, ansible-playbook's start).
    assert 5 <= entry["age_seconds"] < 60, entry
    assert entry["reason"].startswith("job is %s, modified " % state)
    assert fresh["counts"]["jobs_ending"] >= 1

    records.modified("jobs", ended, 61)
    later = rh.run_reconcile(lab_env, tmp_path, args)

    assert not later.get("failed"), later.get("msg")
    assert ended not in {entry["name"] for entry in later["jobs_ending"]}
    [stray] = [entry for entry in later["stray_slurm_jobs"] if entry["name"] == ended]
    assert stray["job_id"] == slurm_id and stray["reason"] == (
        "job is %s: only Running and Queued jobs have a Slurm job" % state
    )
    assert slurm.final_state(slurm_id) == "RUNNING"


def test_without_evidence_orphans_are_withheld_unless_told(lab_env, records, config, tmp_path):
    lost_job = records.job("Running")

    cautious = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"]))
    told = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"], orphans="always", crunch_v1_dispatcher="stopped")
    )
    never = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"], orphans="never"))

    assert cautious["orphaned_jobs"] == []
    assert "no Slurm job for any of the 1 live jobs" in cautious["orphans_withheld"]["jobs"]
    assert rh.names(told["orphaned_jobs"]) == [lost_job]
    assert told["orphans_withheld"]["jobs"] is None
    assert never["orphaned_jobs"] == [] and never["orphans_withheld"]["jobs"] == "orphans: never"


def test_a_job_that_finished_before_the_reread_is_not_orphaned(lab_env, slurm, fresh_db, records, config, tmp_path):
    witness = records.job("Running")
    finishing = records.job("Running")
    slurm.submit(witness, hold=True)

    def finish():
        records.conn.execute("UPDATE jobs SET state = 'Complete' WHERE uuid = %s", (finishing,))
        records.conn.commit()

    result, _calls = between_the_listings(lab_env, tmp_path, config, fresh_db, finish)
    assert result["orphaned_jobs"] == []


def test_a_job_whose_row_is_updated_between_the_listings_is_not_orphaned(
    lab_env, slurm, fresh_db, records, config, tmp_path
):
    # Still Running, same start and lock: only its row version (xmin) tells that something
    # (a process at work, writing progress) updated it after the first read.
    witness = records.job("Running")
    touched = records.job("Running")
    untouched = records.job("Running")
    slurm.submit(witness, hold=True)

    def touch():
        records.conn.execute("UPDATE jobs SET modified_at = now() WHERE uuid = %s", (touched,))
        records.conn.commit()

    result, _calls = between_the_listings(lab_env, tmp_path, config, fresh_db, touch)
    assert not result.get("failed"), result.get("msg")
    assert rh.names(result["orphaned_jobs"]) == [untouched]


def test_a_lost_job_with_finished_at_set_is_orphaned_too(lab_env, slurm, records, config, tmp_path):
    # Most live jobs lost: the re-read scans the unfinished ones (by the finished_at index)
    # and must look up the inconsistent Running row, which that scan cannot see, by UUID.
    witness = records.job("Running")
    lost = sorted(records.job("Running") for _lost in range(3))
    records.conn.execute("UPDATE jobs SET finished_at = started_at WHERE uuid = %s", (lost[1],))
    records.conn.commit()
    slurm.submit(witness, hold=True)

    result = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, kinds=["jobs"], crunch_v1_dispatcher="stopped")
    )

    assert not result.get("failed"), result.get("msg")
    assert rh.names(result["orphaned_jobs"]) == lost


def test_the_dispatcher_lock_tells_whether_a_dispatcher_runs(lab_env, fresh_db, config, tmp_path):
    args = rh.reconcile_args(config, orphans="never")
    before = rh.run_reconcile(lab_env, tmp_path, args)
    with fresh_db.connect(autocommit=True, application_name="crunch-dispatch-slurm") as holder:
        holder.execute("SELECT pg_advisory_lock(10005)")
        during = rh.run_reconcile(lab_env, tmp_path, args)
        holder_pid = holder.info.backend_pid

    assert before["dispatcher"]["lock_held"] is False
    assert "no session holds" in before["dispatcher"]["reason"]
    # 2.7.4 and 3.2.1 services/crunch-dispatch-slurm/crunch-dispatch-slurm.go: the lock is
    # taken once at start and never checked again, so no holder proves nothing.
    assert "cannot tell whether a dispatcher runs" in before["dispatcher"]["reason"]
    assert "service manager" in before["dispatcher"]["reason"]
    assert during["dispatcher"]["lock_held"] is True
    assert [h["pid"] for h in during["dispatcher"]["holders"]] == [holder_pid]
    assert during["dispatcher"]["holders"][0]["application_name"] == "crunch-dispatch-slurm"


def test_a_standby_is_refused_unless_allowed(lab_env, tmp_path):
    # A real streaming replica (its own primary, never the lab's server): `SET
    # default_transaction_read_only` would not make pg_is_in_recovery() true.
    squeue, log = logging_client(tmp_path / "bin", "squeue")
    # Under /tmp, short for the sockets' paths; its own directory, so that two runs of the
    # tests at once on one machine do not share it.
    with rh.standby_server(Path(tempfile.mkdtemp(prefix="reconcile-standby-", dir="/tmp"))) as standby:
        args = dict(standby, cluster_prefix=rh.PREFIX, settle=1, squeue_path=str(squeue))
        refused = rh.run_reconcile(lab_env, tmp_path, args)
        calls_when_refused = len(logged_calls(log))
        allowed = rh.run_reconcile(lab_env, tmp_path, dict(args, allow_standby=True))

    assert refused["failed"]
    assert "127.0.0.1:%d (database postgres) is a standby" % standby["db_port"] in refused["msg"]
    assert "point the database settings at the primary" in refused["msg"]
    assert "allow_standby: true" in refused["msg"]
    assert calls_when_refused == 0
    assert not allowed.get("failed"), allowed.get("msg")
    assert allowed["database_is_standby"] is True


def test_the_prefix_comes_from_the_system_user(lab_env, fresh_db, records, config, tmp_path):
    records.conn.execute(
        "INSERT INTO users (uuid, owner_uuid, created_at, updated_at)"
        " VALUES ('zzzzz-tpzed-000000000000000', 'zzzzz-tpzed-000000000000000', now(), now())"
    )
    records.conn.commit()
    args = rh.reconcile_args(config, orphans="never")
    del args["cluster_prefix"]

    result = rh.run_reconcile(lab_env, tmp_path, args)

    assert result["cluster_prefix"] == "zzzzz"
    assert "system user" in result["cluster_prefix_source"]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"settle": -1}, "option settle must be at least 0, got -1.0"),
        ({"cluster_prefix": "ZZ"}, "cluster_prefix"),
        ({"kinds": ["tasks"]}, "kinds"),
        ({"batch_size": 0}, "batch_size"),
        ({"squeue_path": "/nonexistent/squeue"}, "/nonexistent/squeue"),
        ({"orphans": "sometimes"}, "orphans"),
        ({"orphan_grace": -5}, "option orphan_grace must be at least 0, got -5.0"),
        ({"orphan_grace": 86400}, "option orphan_grace must be at most 3600, got 86400.0"),
        ({"crunch_v1_dispatcher": "perhaps"}, "crunch_v1_dispatcher"),
    ],
)
def test_bad_input_fails_before_anything_is_asked(lab_env, config, tmp_path, args, message):
    squeue, log = logging_client(tmp_path / "bin", "squeue")
    full = rh.reconcile_args(config, squeue_path=str(squeue))
    full.update(args)

    result = rh.run_reconcile(lab_env, tmp_path, full)

    assert result["failed"] and message in result["msg"]
    assert logged_calls(log) == []


def test_database_down_fails_within_db_wait(lab_env, tmp_path, config):
    started = time.monotonic()
    # The test's own settings, with a port nothing listens on.
    result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, db_host="127.0.0.1", db_port=1, db_wait=1))
    assert result["failed"]
    assert "cannot connect to the database" in result["msg"]
    assert time.monotonic() - started < 60


def test_a_hung_squeue_fails_within_command_timeout(lab_env, tmp_path, config):
    hung = tmp_path / "hung-squeue"
    hung.write_text("#!/bin/sh\nexec sleep 600\n")
    hung.chmod(0o755)

    result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, squeue_path=str(hung), command_timeout=2))

    assert result["failed"]
    assert "squeue did not answer within 2 s" in result["msg"]


def test_slurmctld_unreachable_fails_with_squeue_s_reason(lab_env, tmp_path, config):
    broken = dict(lab_env, SLURM_CONF=str(tmp_path / "slurm.conf"))
    text = tmp_path / "slurm.conf"
    original = open(lab_env["SLURM_CONF"]).read()
    # The same cluster with a controller port nothing listens on.
    text.write_text(
        "\n".join(
            line if not line.startswith("SlurmctldPort=") else "SlurmctldPort=1" for line in original.splitlines()
        )
        + "\n"
    )

    result = rh.run_reconcile(broken, tmp_path, rh.reconcile_args(config, command_timeout=30))

    assert result["failed"]
    assert result["msg"].startswith("squeue failed (exit 1)")


def test_nothing_is_written(fresh_db, lab_env, slurm, records, config, tmp_path):
    records.job("Running")
    records.container("Running")
    slurm.submit(records.job("Complete"), hold=True)

    def snapshot():
        with fresh_db.connect() as conn:
            return [
                conn.execute("SELECT * FROM %s ORDER BY uuid" % table).fetchall() for table in ("jobs", "containers")
            ]

    before = snapshot()
    result = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, orphans="always", crunch_v1_dispatcher="stopped")
    )
    assert result["counts"]["orphaned_jobs"] == 1 and result["counts"]["stray_slurm_jobs"] >= 1
    assert snapshot() == before


@pytest.mark.parametrize("table", ["jobs", "containers"])
def test_a_table_held_by_another_session_fails_within_query_timeout_naming_it(
    lab_env, fresh_db, config, tmp_path, table
):
    # Issue 34, Medium 6, for the reconciliation: its reads take ACCESS SHARE, which waits
    # behind a migration's ACCESS EXCLUSIVE; each statement is bounded by query_timeout,
    # and the message now names the option, the table and the session holding it.
    holder = fresh_db.connect(application_name="migration-in-test")
    holder.execute("LOCK TABLE %s IN ACCESS EXCLUSIVE MODE" % table)
    pid = holder.info.backend_pid
    try:
        started = time.monotonic()
        result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, query_timeout=3))
        elapsed = time.monotonic() - started
    finally:
        holder.rollback()
        holder.close()
    assert result.get("failed") is True, result
    assert result["msg"] == (
        "a read waited past query_timeout (3 s) for a table another session holds: pid %d (user arvados, "
        "application migration-in-test) holds ACCESS EXCLUSIVE on %s; nothing was changed. Try again when that "
        "session has finished, or raise query_timeout" % (pid, table)
    ), result["msg"]
    # The settle (1 s) and ansible-playbook's start-up besides the one bounded wait.
    assert elapsed < 3 + 1 + 20, elapsed


@pytest.mark.parametrize("driver", ["psycopg", "psycopg2"])
def test_the_read_only_session_compiles_no_plan(fresh_db, driver):
    # jit_above_cost is 100,000 and SQL_LIVE's scan of 1,000,000 jobs is estimated just
    # below: past it, compiling took longer than the scan.
    from ansible_collections.arvados_ops.recovery.plugins.module_utils._database import driver as database_driver
    from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.db import make_read_only

    conn = database_driver.load_driver({database_driver.DRIVER_ENV: driver}).connect(**fresh_db.connection)
    try:
        make_read_only(conn)
        assert conn.execute("SHOW jit").fetchone()[0] == "off"
        assert conn.execute("SHOW transaction_read_only").fetchone()[0] == "on"
    finally:
        conn.close()
