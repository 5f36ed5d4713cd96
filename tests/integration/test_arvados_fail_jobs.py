"""The arvados_fail_jobs module through real ansible-playbook runs on the lab's PostgreSQL
and Slurm: fail and retry modes, tokens, Slurm first, check mode, reruns, the advisory
lock and the errors that must leave the database as it was.

Each test gets a clone of arvados_template (`fresh_db`) filled by lab.datagen with a
boot time 30 minutes ago (whole seconds, so `before: @<epoch>` is exactly that boot).
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timedelta

import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import checks as cleanup_checks
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import options as cleanup_options
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.before import ACCEPTED_FORMS
from lab import datagen
from tests.integration import fail_jobs_helpers as h
from tests.integration.ports import free_port

LOG_UUID_RE = re.compile(r"^zzzzz-57u5n-[0-9a-z]{15}$")
SYSTEM_USER = "zzzzz-tpzed-000000000000000"
# Columns a fail or requeue is allowed to change; every other column must stay as it was.
FAIL_COLUMNS = {
    "state",
    "running",
    "success",
    "finished_at",
    "modified_at",
    "updated_at",
    "modified_by_user_uuid",
    "modified_by_client_uuid",
}
REQUEUE_COLUMNS = FAIL_COLUMNS | {"started_at", "cancelled_at", "is_locked_by_uuid", "log", "output", "tasks_summary"}


def base_args(fresh_db, tmp_path, summary=None, **extra):
    args = {"config_file": str(h.write_config(fresh_db, tmp_path)), "cancel_slurm_jobs": False, "db_wait": 5}
    if summary is not None:
        args["before"] = "@%d" % h.boot_epoch(summary)
    args.update(extra)
    return args


def iso_z(moment):
    return moment.isoformat() + "Z"


def assert_failed_row(before, after, started, finished):
    assert after["state"] == "Failed"
    assert after["running"] is False
    assert after["success"] is False
    assert started <= after["finished_at"] <= finished
    for column in ("modified_at", "updated_at"):
        assert started <= after[column] <= finished
        assert after[column] > before[column]
    assert after["modified_by_user_uuid"] == SYSTEM_USER
    assert after["modified_by_client_uuid"] is None
    assert {k: v for k, v in after.items() if k not in FAIL_COLUMNS} == {
        k: v for k, v in before.items() if k not in FAIL_COLUMNS
    }


def assert_log_rows(rows, before, after, message, started, finished, tokens=None):
    """Two logs rows per job, as Arvados wrote them when it failed a job (1.4.3): fail_job's
    `dispatch` row (services/api/lib/crunch_dispatch.rb), then the save's `update` audit row
    (app/models/arvados_model.rb log_update, app/models/log.rb fill_object/update_to); and
    after them one `update` row per expired token, checked against `tokens` (conn,
    tokens_before, tokens_after, revoked) when given (h.assert_token_audit_rows)."""
    job_rows = [row for row in rows if h.TOKEN_INFIX_TEXT not in row["object_uuid"]]
    token_rows = [row for row in rows if h.TOKEN_INFIX_TEXT in row["object_uuid"]]
    if job_rows and token_rows:
        assert max(r["id"] for r in job_rows) < min(r["id"] for r in token_rows)
    if tokens is not None:
        conn, tokens_before, tokens_after, revoked = tokens
        h.assert_token_audit_rows(conn, token_rows, tokens_before, tokens_after, revoked, started, finished)
    rows = job_rows
    by_kind = {"dispatch": {}, "update": {}}
    for row in rows:
        assert LOG_UUID_RE.match(row["uuid"]), row["uuid"]
        assert row["object_uuid"] not in by_kind[row["event_type"]], "two rows of one kind"
        by_kind[row["event_type"]][row["object_uuid"]] = row
        assert row["modified_by_user_uuid"] == SYSTEM_USER
        assert row["modified_by_client_uuid"] is None
        for column in ("created_at", "updated_at", "modified_at"):
            assert started <= row[column] <= finished
    assert sorted(by_kind["dispatch"]) == sorted(before) == sorted(by_kind["update"])
    for job_uuid, dispatch in by_kind["dispatch"].items():
        update = by_kind["update"][job_uuid]
        assert dispatch["id"] < update["id"], "fail_job logged before it saved the job"
        assert dispatch["owner_uuid"] == before[job_uuid]["owner_uuid"]
        assert dispatch["object_owner_uuid"] is None
        assert dispatch["summary"] == message
        assert json.loads(dispatch["properties"]) == {"text": message}
        assert started <= dispatch["event_at"] <= finished
        assert update["owner_uuid"] == SYSTEM_USER
        assert update["object_owner_uuid"] == before[job_uuid]["owner_uuid"]
        assert update["summary"] == "update of %s" % job_uuid
        assert update["event_at"] == after[job_uuid]["modified_at"]
        assert_audit_properties(json.loads(update["properties"]), before[job_uuid], after[job_uuid])
        for row in (dispatch, update):
            assert_websocket_reads(row)


def assert_audit_properties(properties, before, after):
    assert sorted(properties) == ["new_attributes", "new_etag", "old_attributes", "old_etag"]
    for age, row in (("old", before), ("new", after)):
        attributes = properties[age + "_attributes"]
        assert sorted(attributes) == sorted(row)
        for column, value in row.items():
            if isinstance(value, datetime):
                # 1.4.3 config/initializers/time_format.rb: %Y-%m-%dT%H:%M:%S.%NZ
                assert attributes[column] == value.strftime("%Y-%m-%dT%H:%M:%S.%f000Z"), column
            elif column in h.JOB_HASH_COLUMNS:
                # serialized as Hash (1.4.3 app/models/job.rb:14-17): an object, not text, and
                # NULL as the {} Serializer.load makes of it (services/api/lib/serializers.rb:38-39)
                assert attributes[column] == ({} if value is None else json.loads(value)), column
            else:
                assert attributes[column] == value, column
        assert re.match(r"^[0-9a-z]{1,25}$", properties[age + "_etag"])
    assert properties["old_etag"] != properties["new_etag"]


def assert_websocket_reads(row):
    """What arvados-ws does with a log row it is notified of (1.4.3 services/ws/event.go
    Detail, session_v0.go EventMessage): a non-null event_at, properties that decode (as
    YAML) to a mapping, and for an update the state from the attributes it forwards."""
    assert isinstance(row["event_at"], datetime)
    properties = yaml.safe_load(row["properties"])
    assert isinstance(properties, dict)
    if properties.get("text") is None:
        assert properties["old_attributes"]["state"] == "Running"
        assert properties["new_attributes"]["state"] in ("Failed", "Queued")
        assert properties["new_attributes"]["owner_uuid"]


# -- 1. fail mode -------------------------------------------------------------------------


def test_fail_mode_fails_exactly_the_jobs_started_before_the_threshold(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=14, running_after_boot=3, running_unstarted=2)
    assert len(summary.running_before_boot) == 9
    conn = fresh_db.connect()
    jobs_before, tasks_before, tokens_before = h.jobs(conn), h.tasks_by_job(conn), h.tokens(conn)
    listener = fresh_db.connect(autocommit=True)
    listener.execute("LISTEN logs")
    started = h.db_now(conn)

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, summary))

    finished = h.db_now(conn)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True
    assert result["threshold"] == iso_z(summary.boot_time)
    assert result["threshold_source"] == "argument"
    assert result["failed_jobs"] == sorted(summary.running_before_boot)
    assert "requeued_jobs" not in result
    assert result["exempt"] == {"count": 3, "uuids": sorted(summary.running_after_boot)}
    assert result["no_started_at"] == sorted(summary.running_unstarted)
    assert result["skipped_jobs"] == []
    assert result["slurm"] == {"skipped": "cancel_slurm_jobs is false"}

    jobs_after = h.jobs(conn)
    failed = set(summary.running_before_boot)
    for job_uuid in failed:
        assert_failed_row(jobs_before[job_uuid], jobs_after[job_uuid], started, finished)
    # exempt, unstarted (with `before`), queued and finished jobs: not a byte changed
    assert h.unchanged_except(jobs_before, jobs_after, failed) == []
    assert h.tasks_by_job(conn) == tasks_before

    log_rows = h.logs(conn)
    assert_log_rows(
        log_rows,
        {u: jobs_before[u] for u in failed},
        jobs_after,
        cleanup_options.DEFAULT_FAIL_MESSAGE,
        started,
        finished,
        tokens=(conn, tokens_before, h.tokens(conn), result["revoked_tokens"]),
    )
    # the generator leaves components NULL: Arvados' own audit rows hold {} (issue 41)
    assert any(jobs_before[u]["components"] is None for u in failed)
    assert result["audit_logs"]["written"] is True
    assert sorted(result["log_uuids"]) == sorted(r["uuid"] for r in log_rows)

    notifications = list(listener.notifies(timeout=5, stop_after=len(log_rows)))
    assert {n.channel for n in notifications} == {"logs"}
    assert sorted(n.payload for n in notifications) == sorted(str(r["id"]) for r in log_rows)


def test_before_reboot_uses_this_hosts_boot_time(fresh_db, lab_env, tmp_path):
    # The generator's default boot time is this host's btime, as `before: reboot` reads it.
    summary = h.load(fresh_db, boot_time=datagen.host_boot_time(), running=6, running_after_boot=2, running_unstarted=1)
    conn = fresh_db.connect()
    jobs_before = h.jobs(conn)

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, before="reboot"))

    assert not result.get("failed"), result.get("msg")
    # The boot on the database's clock: its now() less this host's uptime. The lab's
    # database runs on this host, so that is btime, give or take the second btime drops.
    threshold = datetime.strptime(result["threshold"], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert timedelta(0) <= threshold - summary.boot_time.replace(tzinfo=None) < timedelta(seconds=2), result
    assert re.fullmatch(
        r"reboot \(the database's now\(\) less this host's uptime, [0-9.]+ s; btime %d in /proc/stat\)"
        % h.boot_epoch(summary),
        result["threshold_source"],
    ), result["threshold_source"]
    assert result["failed_jobs"] == sorted(summary.running_before_boot)
    assert result["exempt"]["uuids"] == sorted(summary.running_after_boot)
    assert result["no_started_at"] == sorted(summary.running_unstarted)
    jobs_after = h.jobs(conn)
    assert {u for u, row in jobs_after.items() if row["state"] == "Failed"} - {
        u for u, row in jobs_before.items() if row["state"] == "Failed"
    } == set(summary.running_before_boot)
    assert h.unchanged_except(jobs_before, jobs_after, set(summary.running_before_boot)) == []


def test_without_before_every_running_job_is_failed_including_unstarted_ones(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=8, running_after_boot=2, running_unstarted=2, decoys=False)
    conn = fresh_db.connect()
    jobs_before = h.jobs(conn)

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path))

    assert not result.get("failed"), result.get("msg")
    assert result["threshold"] is None
    assert result["failed_jobs"] == sorted(summary.running_uuids)
    assert result["exempt"] == {"count": 0, "uuids": []}
    assert result["no_started_at"] == sorted(summary.running_unstarted)
    # A job without started_at has no token window: its token cannot be told apart. Those
    # a queued job, or one that ended after them, could hold are left alone.
    h.assert_revoked_or_left_to_a_holder(
        conn,
        result,
        [token for job, token in summary.job_token_uuids.items() if job not in summary.running_unstarted],
        jobs_before,
    )
    assert result["revoked_tokens"]
    assert h.unchanged_except(jobs_before, h.jobs(conn), set(summary.running_uuids)) == []


def test_cleaning_an_unstarted_job_by_uuid_revokes_no_token(fresh_db, lab_env, tmp_path):
    # One user runs every job: any window left open at the end would take later jobs'
    # tokens, live ones included. A job without started_at has no window at all.
    summary = h.load(
        fresh_db, running=5, running_after_boot=2, running_unstarted=1, users=2, idle_users=1, decoys=False
    )
    unstarted = summary.running_unstarted[0]
    conn = fresh_db.connect()
    tokens_before = h.tokens(conn)

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, uuids=[unstarted]))

    assert not result.get("failed"), result.get("msg")
    assert result["failed_jobs"] == [unstarted]
    assert result["no_started_at"] == [unstarted]
    assert result["revoked_tokens"] == []
    assert h.unchanged_except(tokens_before, h.tokens(conn), set()) == []


def test_uuids_limits_the_run_to_those_jobs(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=8, running_after_boot=2, decoys=False)
    chosen = sorted(summary.running_before_boot[:2]) + [summary.running_after_boot[0]]
    finished_job = next(iter(u for u, row in h.jobs(fresh_db.connect()).items() if row["state"] == "Complete"))

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, summary, uuids=chosen + [finished_job]))

    assert not result.get("failed"), result.get("msg")
    assert result["failed_jobs"] == sorted(summary.running_before_boot[:2])
    assert result["exempt"]["uuids"] == [summary.running_after_boot[0]]
    states = {u: row["state"] for u, row in h.jobs(fresh_db.connect()).items()}
    assert {u for u in summary.running_uuids if states[u] == "Failed"} == set(summary.running_before_boot[:2])
    assert states[finished_job] == "Complete"


# -- 2. retry mode ------------------------------------------------------------------------


def test_retry_requeues_and_scrubs_the_jobs_and_deletes_their_tasks(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=10, running_after_boot=3, tasks_per_job=3)
    requeued = set(summary.running_before_boot)
    conn = fresh_db.connect()
    jobs_before, tasks_before = h.jobs(conn), h.tasks_by_job(conn)
    assert all(tasks_before.get(u) for u in requeued)
    started = h.db_now(conn)

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, summary, retry=True))

    finished = h.db_now(conn)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is True
    assert result["requeued_jobs"] == sorted(requeued)
    assert "failed_jobs" not in result
    assert result["exempt"]["uuids"] == sorted(summary.running_after_boot)
    jobs_after = h.jobs(conn)
    for job_uuid in requeued:
        before, after = jobs_before[job_uuid], jobs_after[job_uuid]
        assert after["state"] == "Queued"
        assert after["running"] is False
        for column in ("success", "started_at", "finished_at", "cancelled_at", "is_locked_by_uuid", "log", "output"):
            assert after[column] is None, column
        assert json.loads(after["tasks_summary"]) == {}
        for column in ("modified_at", "updated_at"):
            assert started <= after[column] <= finished
        assert {k: v for k, v in after.items() if k not in REQUEUE_COLUMNS} == {
            k: v for k, v in before.items() if k not in REQUEUE_COLUMNS
        }
    assert h.unchanged_except(jobs_before, jobs_after, requeued) == []
    tasks_after = h.tasks_by_job(conn)
    assert not requeued & set(tasks_after)
    assert tasks_after == {u: t for u, t in tasks_before.items() if u not in requeued}
    assert_log_rows(
        h.logs(conn),
        {u: jobs_before[u] for u in requeued},
        jobs_after,
        cleanup_options.DEFAULT_RETRY_MESSAGE,
        started,
        finished,
    )
    assert result["revoked_tokens"] == sorted(summary.job_token_uuids[u] for u in requeued)


# -- 3. tokens ----------------------------------------------------------------------------


def test_exactly_the_failed_jobs_tokens_are_revoked_and_every_decoy_is_untouched(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=12, running_after_boot=3, running_unstarted=1)
    failed = set(summary.running_before_boot)
    job_tokens = {summary.job_token_uuids[u] for u in failed}
    decoys = {u for kind in datagen.DECOY_KINDS for u in summary.decoy_token_uuids[kind]}
    assert len(decoys) == 5 * (12 - 1)
    conn = fresh_db.connect()
    tokens_before, jobs_before = h.tokens(conn), h.jobs(conn)
    secrets = h.api_token_secrets(conn)
    message = "lab test: failed after a reboot"
    started = h.db_now(conn)

    results, completed = h.run_playbook(
        lab_env, tmp_path, [{"args": base_args(fresh_db, tmp_path, summary, log_message=message)}]
    )

    finished = h.db_now(conn)
    result = results[0]
    assert not result.get("failed"), result.get("msg")
    assert result["revoked_tokens"] == sorted(job_tokens)
    tokens_after = h.tokens(conn)
    for token_uuid in job_tokens:
        before, after = tokens_before[token_uuid], tokens_after[token_uuid]
        assert before["expires_at"] is None
        assert started <= after["expires_at"] <= finished
        assert started <= after["updated_at"] <= finished
        assert {k: v for k, v in after.items() if k not in ("expires_at", "updated_at")} == {
            k: v for k, v in before.items() if k not in ("expires_at", "updated_at")
        }
    # decoys, the exempt and unstarted jobs' tokens, finished jobs' tokens: whole rows equal
    assert decoys <= set(tokens_after)
    assert h.unchanged_except(tokens_before, tokens_after, job_tokens) == []
    assert_log_rows(
        h.logs(conn),
        {u: jobs_before[u] for u in failed},
        h.jobs(conn),
        message,
        started,
        finished,
        tokens=(conn, tokens_before, tokens_after, job_tokens),
    )
    output = json.dumps(result) + completed.stdout + completed.stderr
    assert [s for s in secrets if s in output] == []


def test_revoke_tokens_false_touches_no_token(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=6, running_after_boot=1)
    conn = fresh_db.connect()
    tokens_before = h.tokens(conn)

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, summary, revoke_tokens=False))

    assert not result.get("failed"), result.get("msg")
    assert result["failed_jobs"] == sorted(summary.running_before_boot)
    assert result["revoked_tokens"] == []
    assert h.tokens(conn) == tokens_before


# -- 4. Slurm first -----------------------------------------------------------------------


def test_slurm_jobs_of_the_failed_jobs_are_cancelled_and_others_stay(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=8, running_after_boot=2, decoys=False)
    qualifying = sorted(summary.running_before_boot)
    with_slurm = qualifying[:3]
    submitted = {}
    try:
        for job_uuid in with_slurm + summary.running_after_boot:
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid
        kept_ids = [i for i, u in submitted.items() if u in summary.running_after_boot]

        result = h.run_module(
            lab_env, tmp_path, base_args(fresh_db, tmp_path, summary, cancel_slurm_jobs=True, slurm_timeout=60)
        )

        assert not result.get("failed"), result.get("msg")
        assert result["failed_jobs"] == qualifying
        slurm = result["slurm"]
        assert sorted((c["name"], c["job_id"]) for c in slurm["cancelled"]) == sorted(
            (u, i) for i, u in submitted.items() if u in with_slurm
        )
        assert sorted(slurm["already_absent"]) == sorted(set(qualifying) - set(with_slurm))
        assert slurm["remaining"] == []
        assert h.squeue_names(lab_env, list(submitted)) == {i: submitted[i] for i in kept_ids}
    finally:
        h.scancel(lab_env, list(submitted))


def test_cancel_slurm_jobs_false_leaves_slurm_alone(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=4, running_after_boot=1, decoys=False)
    submitted = {}
    try:
        for job_uuid in summary.running_before_boot[:2]:
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid

        result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, summary))

        assert not result.get("failed"), result.get("msg")
        assert result["failed_jobs"] == sorted(summary.running_before_boot)
        assert result["slurm"] == {"skipped": "cancel_slurm_jobs is false"}
        assert h.squeue_names(lab_env, list(submitted)) == submitted
    finally:
        h.scancel(lab_env, list(submitted))


def test_unreachable_slurm_fails_before_any_database_change(fresh_db, lab_env, tmp_path):
    h.load(fresh_db, running=5, running_after_boot=1)
    squeue = tmp_path / "squeue"
    squeue.write_text(
        "#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
    )
    squeue.chmod(0o755)
    dump_before = h.pg_dump(fresh_db, lab_env)
    began = time.monotonic()

    result = h.run_module(
        lab_env,
        tmp_path,
        base_args(fresh_db, tmp_path, cancel_slurm_jobs=True, squeue_path=str(squeue), slurm_timeout=2),
    )

    assert result.get("failed") is True
    assert "Unable to contact slurm controller" in result["msg"]
    assert "nothing of this batch was changed" in result["msg"]
    assert time.monotonic() - began < 30
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_a_slurm_user_owning_none_of_the_jobs_leaves_them_running_and_fails(fresh_db, lab_env, tmp_path):
    # The Slurm jobs are root's (sbatch as root); slurm_user names crunch.
    summary = h.load(fresh_db, running=4, running_after_boot=1, decoys=False)
    stale = sorted(summary.running_before_boot)
    submitted = {}
    try:
        for job_uuid in stale[:2]:
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid
        args = base_args(fresh_db, tmp_path, summary, cancel_slurm_jobs=True, slurm_user="crunch", slurm_timeout=60)
        dump_before = h.pg_dump(fresh_db, lab_env)

        # Only the held jobs: nothing at all changes, in check mode or not.
        for check in (True, False):
            held_only = h.run_module(lab_env, tmp_path, dict(args, uuids=stale[:2]), check=check)
            assert held_only.get("failed") is True, held_only
            assert h.pg_dump(fresh_db, lab_env) == dump_before
            assert h.squeue_names(lab_env, list(submitted)) == submitted
            assert held_only["failed_jobs"] == [] and held_only["changed"] is False
            assert held_only["msg"].startswith(
                "2 job(s) %sleft Running, not failed or requeued: Slurm jobs of their name are queued under "
                "user(s) root, not slurm_user=crunch" % ("would be " if check else "")
            )

        result = h.run_module(lab_env, tmp_path, args)

        assert result.get("failed") is True
        assert sorted((j["uuid"], j["job_id"], j["user"]) for j in result["held_by_other_users"]) == sorted(
            (u, i, "root") for i, u in submitted.items()
        )
        for job_id, job_uuid in submitted.items():
            assert "%s (Slurm job %s of user root, " % (job_uuid, job_id) in result["msg"]
        # The others, with no Slurm job, were failed; the held ones kept their rows and tokens.
        assert result["failed_jobs"] == stale[2:]
        assert result["counts"]["held_by_other_users"] == 2
        with fresh_db.connect() as conn:
            jobs = h.jobs(conn)
        assert {u: jobs[u]["state"] for u in stale} == {u: "Running" if u in stale[:2] else "Failed" for u in stale}
        assert not set(result["revoked_tokens"]) & {summary.job_token_uuids[u] for u in stale[:2]}
        assert h.squeue_names(lab_env, list(submitted)) == submitted
    finally:
        h.scancel(lab_env, list(submitted))


def test_an_squeue_that_lists_nothing_or_an_scancel_that_is_not_slurms_is_refused_at_once(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=3, running_after_boot=1, decoys=False)
    stale = sorted(summary.running_before_boot)
    silent = tmp_path / "silent-squeue"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    submitted = {}
    try:
        for job_uuid in stale[:2]:
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid
        dump_before = h.pg_dump(fresh_db, lab_env)
        cases = [
            ({"squeue_path": "/bin/true"}, "squeue exited 0 without the line JOBID|STATE|USER|NAME"),
            ({"squeue_path": str(silent)}, "squeue exited 0 without the line JOBID|STATE|USER|NAME"),
            ({"scancel_path": "/bin/false"}, "scancel exited with status 1 and printed nothing"),
        ]
        for extra, reason in cases:
            began = time.monotonic()
            args = base_args(fresh_db, tmp_path, summary, cancel_slurm_jobs=True, slurm_timeout=120, **extra)

            result = h.run_module(lab_env, tmp_path, args)

            assert result.get("failed") is True, result
            setting = "%s=%s" % next(iter(extra.items()))
            assert reason in result["msg"] and setting in result["msg"], result["msg"]
            assert "not tried again" in result["msg"] and "nothing of this batch was changed" in result["msg"]
            assert "cancelled 2" not in result["msg"]
            assert time.monotonic() - began < 60
            assert h.pg_dump(fresh_db, lab_env) == dump_before
            assert h.squeue_names(lab_env, list(submitted)) == submitted
    finally:
        h.scancel(lab_env, list(submitted))


# -- 5 and 6. check mode, rerun -----------------------------------------------------------


def test_check_mode_writes_nothing_and_predicts_the_real_run_which_a_rerun_does_not_repeat(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=10, running_after_boot=2, running_unstarted=1)
    args = base_args(fresh_db, tmp_path, summary, cancel_slurm_jobs=True, slurm_timeout=60)
    submitted = {}
    try:
        for job_uuid in summary.running_before_boot[:2] + summary.running_after_boot[:1]:
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid
        dump_before = h.pg_dump(fresh_db, lab_env)

        predicted = h.run_module(lab_env, tmp_path, args, check=True, diff=True)

        assert not predicted.get("failed"), predicted.get("msg")
        assert h.pg_dump(fresh_db, lab_env) == dump_before
        assert h.squeue_names(lab_env, list(submitted)) == submitted
        assert predicted["changed"] is True
        assert predicted["failed_jobs"] == sorted(summary.running_before_boot)
        assert predicted["log_uuids"] == []
        assert predicted["diff"]["after"] == "".join("%s: Failed\n" % u for u in sorted(summary.running_before_boot))

        (real, rerun), _completed = h.run_playbook(lab_env, tmp_path, [{"args": args}, {"args": args}])

        assert not real.get("failed"), real.get("msg")
        for key in ("failed_jobs", "revoked_tokens", "exempt", "no_started_at", "skipped_jobs"):
            assert real[key] == predicted[key], key
        assert real["revoked_tokens"] == sorted(summary.job_token_uuids[u] for u in summary.running_before_boot)
        assert (
            sorted(c["name"] for c in real["slurm"]["cancelled"])
            == sorted(c["name"] for c in predicted["slurm"]["cancelled"])
            == sorted(summary.running_before_boot[:2])
        )
        # a `dispatch` and an `update` row per job, as Arvados wrote (1.4.3 crunch_dispatch.rb, arvados_model.rb),
        # and an `update` row per token expired (crunch_dispatch.rb:730's update_attributes)
        assert len(real["log_uuids"]) == 2 * len(real["failed_jobs"]) + len(real["revoked_tokens"])

        assert not rerun.get("failed"), rerun.get("msg")
        assert rerun["changed"] is False
        assert rerun["failed_jobs"] == []
        assert rerun["revoked_tokens"] == []
        assert rerun["log_uuids"] == []
        assert rerun["exempt"] == real["exempt"]
        # a `dispatch` and an `update` row per job (1.4.3 crunch_dispatch.rb fail_job, arvados_model.rb log_update),
        # an `update` row per expired token (crunch_dispatch.rb:730), none again by the rerun
        assert len(h.logs(fresh_db.connect())) == 2 * len(real["failed_jobs"]) + len(real["revoked_tokens"])
    finally:
        h.scancel(lab_env, list(submitted))


# -- 7. two runs at once ------------------------------------------------------------------


def test_a_run_that_cannot_get_the_advisory_lock_fails_and_writes_nothing(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=5, running_after_boot=1)
    holder = fresh_db.connect(autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (cleanup_checks.ADVISORY_LOCK_KEY,))
    dump_before = h.pg_dump(fresh_db, lab_env)
    args = base_args(fresh_db, tmp_path, summary, lock_wait=1)

    blocked = h.run_module(lab_env, tmp_path, args)

    assert blocked.get("failed") is True
    assert "advisory lock %d" % cleanup_checks.ADVISORY_LOCK_KEY in blocked["msg"]
    assert "another arvados_fail_jobs run holds the cleanup lock" in blocked["msg"]
    assert h.pg_dump(fresh_db, lab_env) == dump_before

    holder.execute("SELECT pg_advisory_unlock(%s)", (cleanup_checks.ADVISORY_LOCK_KEY,))
    result = h.run_module(lab_env, tmp_path, args)
    assert not result.get("failed"), result.get("msg")
    assert result["failed_jobs"] == sorted(summary.running_before_boot)


# -- 9. errors, nothing written -----------------------------------------------------------


def test_the_database_options_by_community_postgresql_names(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=3, running_after_boot=1)
    connection = fresh_db.connection
    args = {
        "config_file": "",
        "database_yml": "",
        "login_host": connection["host"],
        "login_port": connection["port"],
        "login_user": connection["user"],
        "login_password": connection["password"],
        "login_db": connection["dbname"],
        "ssl_mode": "prefer",
        "before": "@%d" % h.boot_epoch(summary),
        "cancel_slurm_jobs": False,
    }

    (result,), completed = h.run_playbook(lab_env, tmp_path, [{"args": args}])

    assert not result.get("failed"), result.get("msg")
    assert result["failed_jobs"] == sorted(summary.running_before_boot)
    assert result["database"].startswith("options")
    assert connection["password"] not in completed.stdout + completed.stderr


def test_errors_name_the_problem_and_write_nothing(fresh_db, lab_env, tmp_path, lab):
    h.load(fresh_db, running=5, running_after_boot=1)
    wrong_password = "WrongSecret-5f3a9c1e7d"
    config = h.write_config(fresh_db, tmp_path)
    two_clusters = tmp_path / "two-clusters.yml"
    text = config.read_text()
    two_clusters.write_text(text + text.split("Clusters:\n", 1)[1].replace("  %s:" % lab.cluster_id, "  yyyyy:"))
    dump_before = h.pg_dump(fresh_db, lab_env)
    cases = [
        {"config_file": str(config), "db_password": wrong_password},
        {
            "db_host": "127.0.0.1",
            "db_port": free_port(),
            "db_name": fresh_db.name,
            "db_user": "arvados",
            "db_password": lab.db_password(),
            "db_wait": 1,
            "db_connect_timeout": 1,
        },
        {"config_file": str(config), "before": "last tuesday-ish"},
        {"config_file": str(two_clusters)},
    ]

    began = time.monotonic()
    results, completed = h.run_playbook(
        lab_env, tmp_path, [{"args": dict(case, cancel_slurm_jobs=False)} for case in cases]
    )
    elapsed = time.monotonic() - began

    bad_password, unreachable, bad_before, several = results
    for result in results:
        assert result.get("failed") is True
        assert result.get("changed") in (None, False)
    assert "authentication failed" in bad_password["msg"]
    assert wrong_password not in bad_password["msg"]
    assert wrong_password not in completed.stdout + completed.stderr
    assert "cannot connect" in unreachable["msg"]
    assert str(cases[1]["db_port"]) in unreachable["msg"]
    assert elapsed < 60
    assert bad_before["msg"] == "cannot read before='last tuesday-ish': " + ACCEPTED_FORMS
    assert "defines several clusters" in several["msg"]
    assert "yyyyy" in several["msg"] and lab.cluster_id in several["msg"]
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_a_missing_column_is_named_and_nothing_is_written(fresh_db, lab_env, tmp_path):
    h.load(fresh_db, running=5, running_after_boot=1)
    with fresh_db.connect(autocommit=True) as conn:
        conn.execute("ALTER TABLE jobs DROP COLUMN is_locked_by_uuid CASCADE")
    dump_before = h.pg_dump(fresh_db, lab_env)

    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path))

    assert result.get("failed") is True
    assert "table jobs lacks column(s) is_locked_by_uuid" in result["msg"]
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_unreachable_database_fails_within_a_few_seconds(fresh_db, lab_env, tmp_path, lab):
    # Measured on its own: the playbook start-up is included, so the bound is generous.
    args = {
        "db_host": "127.0.0.1",
        "db_port": free_port(),
        "db_name": fresh_db.name,
        "db_user": "arvados",
        "db_password": lab.db_password(),
        "db_wait": 1,
        "cancel_slurm_jobs": False,
    }
    began = time.monotonic()
    result = h.run_module(lab_env, tmp_path, args)
    assert time.monotonic() - began < 20
    assert result.get("failed") is True
    assert result["msg"].startswith(
        "cannot connect to the database %r as 'arvados' on 127.0.0.1:%d" % (fresh_db.name, args["db_port"])
    )
    assert lab.db_password() not in result["msg"]
