"""arvados_fail_jobs against what Arvados' own code does with the rows it writes: who a
requeued job runs as, whose tokens are revoked, and the log rows Arvados' readers see.

Each test writes its cluster row by row, with times relative to the database's clock, so
that each window and token is exactly where the rule needs it. The runs are real
`ansible-playbook` runs of the module on the lab's PostgreSQL (Slurm is not needed:
`cancel_slurm_jobs: false`).
"""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg
import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import options as cleanup_options
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import (
    JOB_INFIX,
    TOKEN_INFIX,
    USER_INFIX,
    new_uuid,
)
from lab import datagen
from tests.integration import fail_jobs_helpers as h
from tests.integration.conftest import schema_database

PREFIX = "zzzzz"
SYSTEM_USER = "zzzzz-tpzed-000000000000000"
PIPELINE_INFIX = "d1hrv"


class Cluster:
    """Users, jobs, tokens and pipeline instances of one test, at times relative to `now`
    (the database's clock), written as the 1.4.3 dispatcher would have left them."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self.now = h.db_now(conn)
        self._next_user_id = 1000

    def ago(self, **delta) -> object:
        return self.now - timedelta(**delta)

    def user(self, is_admin: bool = False) -> str:
        uuid = new_uuid(PREFIX, USER_INFIX)
        self._next_user_id += 1
        self.conn.execute(
            "INSERT INTO users (id, uuid, owner_uuid, created_at, updated_at, is_admin, is_active)"
            " VALUES (%s, %s, %s, %s, %s, %s, true)",
            (self._next_user_id, uuid, SYSTEM_USER, self.ago(days=30), self.ago(days=30), is_admin),
        )
        self.conn.commit()
        return uuid

    def job(
        self,
        user,
        created,
        state="Running",
        started=None,
        finished=None,
        modified_by=None,
        locked_by=None,
        null_serialized=False,
    ):
        """A job as crunch-job left it: locked by (and last modified by) its user.
        `null_serialized`: its four Hash columns NULL, as Rails 4 stored an empty Hash."""
        uuid = new_uuid(PREFIX, JOB_INFIX)
        serialized = (
            [None] * 4
            if null_serialized
            else ['{"input": "x"}', '{"failed":0,"todo":1,"running":1,"done":0}', "{}", "{}"]
        )
        self.conn.execute(
            "INSERT INTO jobs (uuid, owner_uuid, state, running, success, created_at, updated_at,"
            " modified_at, started_at, finished_at, is_locked_by_uuid, modified_by_user_uuid,"
            " script_parameters, tasks_summary, runtime_constraints, components)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                uuid,
                user,
                state,
                state == "Running",
                True if state == "Complete" else None,
                created,
                started or created,
                started or created,
                started,
                finished,
                user if locked_by is None else locked_by or None,
                user if modified_by is None else modified_by or None,
                *serialized,
            ),
        )
        self.conn.commit()
        return uuid

    def token(self, user, created, api_client_id=0, scopes="default"):
        """A token as get_authorization made it (1.4.3 crunch_dispatch.rb): api_client_id 0,
        no expiry. api_client_id None leaves the column's default, as 3.0's API does; so does
        scopes "default" (["all"]); scopes None stores NULL."""
        uuid = new_uuid(PREFIX, TOKEN_INFIX)
        columns = "uuid, api_token, user_id, created_at, updated_at"
        values = [uuid, new_uuid(PREFIX, "xxxxx") + "secret", self._user_id(user), created, created]
        if scopes != "default":
            columns += ", scopes"
            values.append(scopes)
        if api_client_id is not None:
            columns += ", api_client_id"
            values.append(api_client_id)
        self.conn.execute(
            "INSERT INTO api_client_authorizations (%s) VALUES (%s)" % (columns, ", ".join(["%s"] * len(values))),
            values,
        )
        self.conn.commit()
        return uuid

    def pipeline(self, user, created, state="RunningOnServer"):
        uuid = new_uuid(PREFIX, PIPELINE_INFIX)
        self.conn.execute(
            "INSERT INTO pipeline_instances (uuid, owner_uuid, created_at, updated_at, modified_at,"
            " modified_by_user_uuid, state) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (uuid, user, created, created, created, user, state),
        )
        self.conn.commit()
        return uuid

    def _user_id(self, user):
        row = self.conn.execute("SELECT id FROM users WHERE uuid = %s", (user,)).fetchone()
        self.conn.commit()
        return row[0]

    def valid(self, token) -> bool:
        row = self.conn.execute(
            "SELECT expires_at IS NULL OR expires_at > now() AT TIME ZONE 'UTC'"
            " FROM api_client_authorizations WHERE uuid = %s",
            (token,),
        ).fetchone()
        self.conn.commit()
        return row[0]

    def job_row(self, uuid):
        return h.jobs(self.conn)[uuid]


def run(arvados_db, lab_env, tmp_path, check=False, **args):
    base = {"config_file": str(h.write_config(arvados_db, tmp_path)), "cancel_slurm_jobs": False, "db_wait": 5}
    base.update(args)
    result = h.run_module(lab_env, tmp_path, base, check=check)
    assert not result.get("failed"), result.get("msg")
    return result


def before_epoch(moment) -> str:
    return "@%d" % int((moment - datagen.EPOCH).total_seconds())


SCHEMA_2017 = h.REPO_ROOT / "lab" / "schema" / "2017"


@pytest.fixture(params=["today", "2017"])
def arvados_db(request, lab):
    """A database of today's schema (a clone of the lab's template: bigint ids, 2.6 on) or
    of the 2017 one (integer ids, as the crunch v1 releases had them): jobs ran on both."""
    if request.param == "today":
        yield request.getfixturevalue("fresh_db")
        return
    with schema_database(lab, SCHEMA_2017) as database:
        yield database


@pytest.fixture
def cluster(arvados_db):
    conn = arvados_db.connect()
    yield Cluster(conn)
    conn.close()


# -- 1. who a requeued job runs as ---------------------------------------------------------
# 1.4.3 services/api/lib/crunch_dispatch.rb get_authorization: the next run's token is made
# for User.where(uuid: job.modified_by_user_uuid); writing the system user there ran the
# requeued job with an admin token.


def crunch_dispatch_runs_as(conn, job_uuid):
    """What get_authorization reads: the user named by the queued job's modified_by_user_uuid."""
    row = conn.execute(
        "SELECT u.uuid, u.is_admin FROM jobs j JOIN users u ON u.uuid = j.modified_by_user_uuid"
        " WHERE j.uuid = %s AND j.state = 'Queued'",
        (job_uuid,),
    ).fetchone()
    conn.commit()
    return row


def test_a_requeued_job_runs_as_the_user_it_ran_as_never_the_system_user(arvados_db, lab_env, tmp_path, cluster):
    cluster.user(is_admin=True)  # an admin exists: the system user's token is an admin's
    alice, bob = cluster.user(), cluster.user()
    kept = cluster.job(alice, cluster.ago(hours=3), started=cluster.ago(hours=2))
    # modified last by the system user (e.g. an earlier cleanup): the user whose token ran it
    by_lock = cluster.job(bob, cluster.ago(hours=3), started=cluster.ago(hours=2), modified_by=SYSTEM_USER)
    # no user anywhere: nobody can be known to run it as, so it is failed, not requeued
    nobody = cluster.job(bob, cluster.ago(hours=3), started=cluster.ago(hours=2), modified_by=SYSTEM_USER, locked_by="")

    predicted = run(arvados_db, lab_env, tmp_path, check=True, retry=True, uuids=[kept, by_lock, nobody])
    result = run(arvados_db, lab_env, tmp_path, retry=True, uuids=[kept, by_lock, nobody])

    assert predicted["requeued_jobs"] == result["requeued_jobs"] == sorted([kept, by_lock])
    assert predicted["not_requeued"] == result["not_requeued"] == [nobody]
    assert crunch_dispatch_runs_as(cluster.conn, kept) == (alice, False)
    assert crunch_dispatch_runs_as(cluster.conn, by_lock) == (bob, False)
    assert cluster.job_row(nobody)["state"] == "Failed"
    summaries = {row["object_uuid"]: row["summary"] for row in h.logs(cluster.conn) if row["event_type"] == "dispatch"}
    assert summaries[nobody] == cleanup_options.DEFAULT_RETRY_MESSAGE + cleanup_options.UNRUNNABLE_NOTE
    assert summaries[kept] == cleanup_options.DEFAULT_RETRY_MESSAGE
    rerun = run(arvados_db, lab_env, tmp_path, retry=True, uuids=[kept, by_lock, nobody])
    assert rerun["changed"] is False


def test_a_requeued_job_runs_as_the_user_whose_token_ran_it_not_the_admin_who_changed_it(
    arvados_db, lab_env, tmp_path, cluster
):
    """crunch-job locked the job with the token get_authorization made for its user (1.4.3
    sdk/cli/bin/crunch-job:209, app/models/job.rb:118-127: is_locked_by_uuid), then an admin
    raised its priority (modified_by_user_uuid the admin's). The next get_authorization
    reads modified_by_user_uuid (1.4.3 services/api/lib/crunch_dispatch.rb:270): the
    requeue must put the job's user back there, not keep the admin."""
    admin = cluster.user(is_admin=True)
    alice, bob = cluster.user(), cluster.user()
    reprioritised = cluster.job(alice, cluster.ago(hours=3), started=cluster.ago(hours=2), modified_by=admin)
    # locked by the system user (a root token's crunch-job): the user who last changed it
    by_modifier = cluster.job(bob, cluster.ago(hours=3), started=cluster.ago(hours=2), locked_by=SYSTEM_USER)
    # never locked: the user who last changed it
    unlocked = cluster.job(bob, cluster.ago(hours=3), started=cluster.ago(hours=2), locked_by="")
    jobs = [reprioritised, by_modifier, unlocked]

    result = run(arvados_db, lab_env, tmp_path, retry=True, uuids=jobs)

    assert result["requeued_jobs"] == sorted(jobs) and result["not_requeued"] == []
    assert crunch_dispatch_runs_as(cluster.conn, reprioritised) == (alice, False)
    assert crunch_dispatch_runs_as(cluster.conn, by_modifier) == (bob, False)
    assert crunch_dispatch_runs_as(cluster.conn, unlocked) == (bob, False)
    # and the `update` audit row says so, as the websocket server forwards it
    updates = {r["object_uuid"]: r for r in h.logs(cluster.conn) if r["event_type"] == "update"}
    properties = json.loads(updates[reprioritised]["properties"])
    assert properties["old_attributes"]["modified_by_user_uuid"] == admin
    assert properties["new_attributes"]["modified_by_user_uuid"] == alice


# -- 2. tokens that could be another job's ------------------------------------------------
# 1.4.3 services/api/lib/crunch_dispatch.rb: get_authorization makes each job's token as it
# dispatches it (api_client_id 0, no expiry, for the job's user), so a sibling dispatched
# while this job was queued has its token in this job's window; update_pipelines makes
# tokens of the same kind for RunningOnServer pipeline instances.


def sibling_cluster(cluster, sibling_started):
    """J1 and its sibling J2 of one user: J2 was dispatched (T2) while J1 was queued and is
    still running; J1 was dispatched (T1) an hour ago and started then."""
    user = cluster.user()
    j1 = cluster.job(user, cluster.ago(hours=3), started=cluster.ago(hours=1))
    j2 = cluster.job(user, cluster.ago(hours=2, minutes=30), started=sibling_started)
    t2 = cluster.token(user, cluster.ago(hours=2))
    t1 = cluster.token(user, cluster.ago(hours=1, seconds=5))
    return user, j1, j2, t1, t2


@pytest.mark.parametrize("retry", [False, True], ids=["fail", "retry"])
@pytest.mark.parametrize("select", ["uuids", "before"])
def test_a_sibling_job_still_running_keeps_its_token(arvados_db, lab_env, tmp_path, cluster, retry, select):
    if select == "uuids":
        # after a node reboot: J1 was on the node, J2 elsewhere, started soon after T2
        user, j1, j2, t1, t2 = sibling_cluster(cluster, cluster.ago(hours=1, minutes=59))
        selection = {"uuids": [j1]}
    else:
        # after the API host's reboot: J2 waited for nodes and started after the boot
        user, j1, j2, t1, t2 = sibling_cluster(cluster, cluster.ago(minutes=10))
        selection = {"before": before_epoch(cluster.ago(minutes=30))}

    predicted = run(arvados_db, lab_env, tmp_path, check=True, retry=retry, **selection)
    result = run(arvados_db, lab_env, tmp_path, retry=retry, **selection)

    assert result["requeued_jobs" if retry else "failed_jobs"] == [j1]
    assert cluster.job_row(j2)["state"] == "Running"
    # T2 lies in both windows: J2, still running, could own it. Never revoked, reported.
    assert cluster.valid(t2)
    left_alone = {t["uuid"]: t for t in result["tokens_left_alone"]}
    assert left_alone[t2] == {"uuid": t2, "user_uuid": user, "could_belong_to": j2}
    assert predicted["tokens_left_alone"] == result["tokens_left_alone"]
    assert predicted["revoked_tokens"] == result["revoked_tokens"]
    # T1 was made after J2's creation, and J2 runs: had a node failed under it (exit 93),
    # crunch-dispatch.rb would have dispatched it again, with a new token had its
    # modified_by_user_uuid changed (1.4.3 crunch_dispatch.rb reap_children, get_authorization).
    # Nothing in the database rules that out, so T1 is left alone too, and reported.
    assert result["revoked_tokens"] == [] and cluster.valid(t1)
    assert sorted(left_alone) == sorted([t1, t2])
    assert left_alone[t1]["could_belong_to"] == j2
    assert result["counts"]["tokens_left_alone"] == len(left_alone)


def test_a_token_a_finished_job_or_a_running_pipeline_could_own_is_left_alone(arvados_db, lab_env, tmp_path, cluster):
    alice, bob = cluster.user(), cluster.user()
    stale_a = cluster.job(alice, cluster.ago(hours=5), started=cluster.ago(hours=3))
    # Alice's other job: queued when stale_a was dispatched, finished after that token
    done = cluster.job(
        alice, cluster.ago(hours=4), state="Complete", started=cluster.ago(hours=2), finished=cluster.ago(hours=1)
    )
    token_a = cluster.token(alice, cluster.ago(hours=3, seconds=5))
    stale_b = cluster.job(bob, cluster.ago(hours=5), started=cluster.ago(hours=3))
    pipeline = cluster.pipeline(bob, cluster.ago(hours=6))
    token_b = cluster.token(bob, cluster.ago(hours=3, seconds=5))
    # a pipeline that is not running on the server makes no token
    carol = cluster.user()
    stale_c = cluster.job(carol, cluster.ago(hours=5), started=cluster.ago(hours=3))
    cluster.pipeline(carol, cluster.ago(hours=6), state="Complete")
    token_c = cluster.token(carol, cluster.ago(hours=3, seconds=5))

    result = run(arvados_db, lab_env, tmp_path, uuids=[stale_a, stale_b, stale_c])

    assert result["failed_jobs"] == sorted([stale_a, stale_b, stale_c])
    assert {t["uuid"]: t["could_belong_to"] for t in result["tokens_left_alone"]} == {token_a: done, token_b: pipeline}
    assert result["revoked_tokens"] == [token_c]
    assert cluster.valid(token_a) and cluster.valid(token_b) and not cluster.valid(token_c)


def test_the_jobs_of_one_run_do_not_shield_each_others_tokens_across_batches(arvados_db, lab_env, tmp_path, cluster):
    """Two stale jobs of one user with overlapping windows, one per batch: each is ended by
    this run, so neither can own the other's token (the first batch's `dispatch` row, a
    cleanup's, says the first was ended then)."""
    user = cluster.user()
    first = cluster.job(user, cluster.ago(hours=4), started=cluster.ago(hours=2))
    second = cluster.job(user, cluster.ago(hours=3), started=cluster.ago(hours=1))
    token_first = cluster.token(user, cluster.ago(hours=2, seconds=5))
    token_second = cluster.token(user, cluster.ago(hours=1, seconds=5))

    result = run(arvados_db, lab_env, tmp_path, before=before_epoch(cluster.ago(minutes=30)), batch_size=1)

    assert result["batches"] == 2
    assert result["failed_jobs"] == sorted([first, second])
    assert result["revoked_tokens"] == sorted([token_first, token_second])
    assert result["tokens_left_alone"] == []


def test_on_a_3_0_schema_an_ordinary_token_of_the_user_is_never_revoked(fresh_db, lab_env, tmp_path):
    """From 3.0.0 every new token has api_client_id 0 (3.0.0 services/api/db/migrate/
    20240627201747_set_default_api_client_id.rb), so the value no longer marks a dispatcher's
    token. No crunch v1 job started since the cluster ran 1.x, and a job's window closes at
    its start: a token made since then is outside every window and stays valid."""
    admin = fresh_db.connect(superuser=True)
    admin.execute("ALTER TABLE api_client_authorizations ALTER COLUMN api_client_id SET DEFAULT 0")
    admin.commit()
    admin.close()
    cluster = Cluster(fresh_db.connect())
    user = cluster.user()
    stale = cluster.job(user, cluster.ago(days=400), started=cluster.ago(days=399))
    own = cluster.token(user, cluster.ago(days=399, seconds=5))
    login = cluster.token(user, cluster.ago(minutes=5), api_client_id=None)

    result = run(fresh_db, lab_env, tmp_path, before=before_epoch(cluster.ago(minutes=30)))

    assert result["failed_jobs"] == [stale]
    assert result["revoked_tokens"] == [own]
    assert cluster.valid(login) and not cluster.valid(own)


# -- 3. the audit rows, as Arvados writes them ----------------------------------------------
# 1.4.3 services/api/app/models/arvados_model.rb:846-853 (log_update) and app/models/log.rb:
# a job's save and a token's `update_attributes expires_at: Time.now` (crunch_dispatch.rb:730)
# each write an `update` row, when is_audit_logging_enabled? (arvados_model.rb:816-819).


def job_audit_attributes(row):
    """Job#logged_attributes as the audit row holds them: the Hash columns loaded, NULL as {}
    (1.4.3 app/models/job.rb:14-17, services/api/lib/serializers.rb:38-39)."""
    serialized = {column: dict for column in h.JOB_HASH_COLUMNS}
    return {column: h.arvados_attribute(column, value, serialized) for column, value in row.items()}


def with_audit_logs(path, max_age, max_delete_batch):
    """A copy of config.yml `path` (run() writes that one again) with Clusters.<id>.AuditLogs,
    as 1.4.3 lib/config/config.default.yml names them."""
    copy = path.with_name("audit-" + path.name)
    copy.write_text(
        path.read_text() + "    AuditLogs:\n      MaxAge: %s\n      MaxDeleteBatch: %s\n" % (max_age, max_delete_batch)
    )
    copy.chmod(0o600)
    return copy


def test_the_update_rows_hold_what_arvados_writes_null_hash_columns_and_tokens_included(
    arvados_db, lab_env, tmp_path, cluster
):
    alice, bob = cluster.user(), cluster.user()
    bare = cluster.job(alice, cluster.ago(hours=3), started=cluster.ago(hours=2), null_serialized=True)
    full = cluster.job(bob, cluster.ago(hours=3), started=cluster.ago(hours=2))
    token_null_scopes = cluster.token(alice, cluster.ago(hours=2, seconds=5), scopes=None)
    token_all = cluster.token(bob, cluster.ago(hours=2, seconds=5))
    jobs_before, tokens_before = h.jobs(cluster.conn), h.tokens(cluster.conn)
    started = h.db_now(cluster.conn)

    result = run(arvados_db, lab_env, tmp_path, uuids=[bare, full])

    finished = h.db_now(cluster.conn)
    assert result["failed_jobs"] == sorted([bare, full])
    assert result["revoked_tokens"] == sorted([token_null_scopes, token_all])
    assert result["audit_logs"]["written"] is True
    assert "MaxAge not set: 336h" in result["audit_logs"]["source"]
    jobs_after, tokens_after = h.jobs(cluster.conn), h.tokens(cluster.conn)
    rows = h.logs(cluster.conn)
    updates = {r["object_uuid"]: r for r in rows if r["event_type"] == "update"}
    for uuid in (bare, full):
        properties = json.loads(updates[uuid]["properties"])
        assert properties["old_attributes"] == job_audit_attributes(jobs_before[uuid])
        assert properties["new_attributes"] == job_audit_attributes(jobs_after[uuid])
    bare_properties = json.loads(updates[bare]["properties"])
    for column in h.JOB_HASH_COLUMNS:
        assert jobs_before[bare][column] is None
        assert bare_properties["old_attributes"][column] == bare_properties["new_attributes"][column] == {}
    # the tokens' rows: after the jobs', one per token, no secret, scopes NULL as []
    assert max(r["id"] for r in rows if r["object_uuid"] in (bare, full)) < min(
        r["id"] for r in rows if h.TOKEN_INFIX_TEXT in r["object_uuid"]
    )
    h.assert_token_audit_rows(
        cluster.conn, rows, tokens_before, tokens_after, result["revoked_tokens"], started, finished
    )
    assert json.loads(updates[token_null_scopes]["properties"])["old_attributes"]["scopes"] == []
    assert json.loads(updates[token_all]["properties"])["new_attributes"]["scopes"] == ["all"]
    assert sorted(result["log_uuids"]) == sorted(r["uuid"] for r in rows)


@pytest.mark.parametrize("turned_off_by", ["config", "option"])
@pytest.mark.parametrize("retry", [False, True], ids=["fail", "retry"])
def test_with_audit_logging_off_only_the_dispatch_rows_are_written(
    arvados_db, lab_env, tmp_path, cluster, turned_off_by, retry
):
    """MaxAge 0 and MaxDeleteBatch above 0 turn Arvados' audit rows off (1.4.3
    arvados_model.rb:816-819); fail_job's `dispatch` row is saved all the same
    (crunch_dispatch.rb:222-233), and the token is still expired."""
    user = cluster.user()
    stale = cluster.job(user, cluster.ago(hours=3), started=cluster.ago(hours=2))
    token = cluster.token(user, cluster.ago(hours=2, seconds=5))
    if turned_off_by == "config":
        config = with_audit_logs(h.write_config(arvados_db, tmp_path), "0s", 100000)
        args = {"config_file": str(config)}
    else:
        # on in the file; the option says otherwise
        config = with_audit_logs(h.write_config(arvados_db, tmp_path), "336h", 0)
        args = {"config_file": str(config), "audit_logs": False}
    args.update(retry=retry, uuids=[stale])

    predicted = run(arvados_db, lab_env, tmp_path, check=True, **args)
    result = run(arvados_db, lab_env, tmp_path, **args)

    assert predicted["audit_logs"] == result["audit_logs"]
    assert result["audit_logs"]["written"] is False
    if turned_off_by == "config":
        assert result["audit_logs"]["source"] == "config_file %s, AuditLogs (MaxAge 0s, MaxDeleteBatch 100000)" % config
    else:
        assert result["audit_logs"]["source"] == "option audit_logs"
    assert result["requeued_jobs" if retry else "failed_jobs"] == [stale]
    assert result["revoked_tokens"] == [token] and not cluster.valid(token)
    rows = h.logs(cluster.conn)
    assert [(r["event_type"], r["object_uuid"]) for r in rows] == [("dispatch", stale)]
    assert result["log_uuids"] == [rows[0]["uuid"]]


def test_audit_logging_kept_on_by_max_delete_batch_0_writes_the_update_rows(arvados_db, lab_env, tmp_path, cluster):
    """MaxAge 0 alone leaves logging on: Arvados only stops when it also deletes (MaxDeleteBatch > 0)."""
    user = cluster.user()
    stale = cluster.job(user, cluster.ago(hours=3), started=cluster.ago(hours=2))
    token = cluster.token(user, cluster.ago(hours=2, seconds=5))
    config = with_audit_logs(h.write_config(arvados_db, tmp_path), "0s", 0)

    result = run(arvados_db, lab_env, tmp_path, config_file=str(config), uuids=[stale])

    assert result["audit_logs"]["written"] is True
    kinds = sorted((r["event_type"], r["object_uuid"]) for r in h.logs(cluster.conn))
    assert kinds == sorted([("dispatch", stale), ("update", stale), ("update", token)])
