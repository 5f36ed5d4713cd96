"""Issue 26: failures of the cleanup told exactly, with nothing changed or a rerun that
finishes the work.

- a database user that may not write what a run writes is refused before the Slurm step,
  in check mode too, naming the privilege and the table (no Slurm job cancelled, no row
  written);
- a batch whose transaction fails after its Slurm step names the jobs now without a Slurm
  job and still Running, and a rerun finishes them;
- a connection killed mid-run ends in one error line, without a second traceback.
"""

from __future__ import annotations

import json
import subprocess
import uuid as uuid_module

import pytest
from psycopg import sql

from tests.integration import fail_jobs_helpers as h
from tests.integration.module_playbook import REPO_ROOT
from tests.integration.slurm_helpers import wait_for
from tests.integration.test_arvados_fail_jobs_command import before_flag, one_line_reason, options

# -- privileges, checked before the Slurm step ------------------------------------------


@pytest.fixture
def restricted_role(fresh_db):
    """`restricted_role(revoke)`: a login role that may do what the `arvados` role does on
    `fresh_db`, less `revoke` ((privilege, table) pairs); returns (name, password). Each
    role is dropped after the test, failed or not: roles belong to the server, not to the
    test's database."""
    made = []

    def make(revoke):
        name = "lab_restricted_%s" % uuid_module.uuid4().hex[:10]
        password = uuid_module.uuid4().hex
        with fresh_db.connect(superuser=True, autocommit=True) as admin:
            admin.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(password))
            )
            made.append(name)
            admin.execute(
                sql.SQL(
                    "GRANT ALL ON ALL TABLES IN SCHEMA public TO {}; GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {}"
                ).format(sql.Identifier(name), sql.Identifier(name))
            )
            for privilege, table in revoke:
                admin.execute(
                    sql.SQL("REVOKE {} ON {} FROM {}").format(
                        sql.SQL(privilege), sql.Identifier(table), sql.Identifier(name)
                    )
                )
        return name, password

    yield make
    for name in made:
        with fresh_db.connect(superuser=True, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def as_role(fresh_db, tmp_path, name, password, **extra):
    """Command options connecting as role `name` (settings given one by one)."""
    connection = fresh_db.connection
    values = {
        "db_host": str(connection["host"]),
        "db_port": int(connection["port"]),
        "db_name": fresh_db.name,
        "db_user": name,
        "db_password": password,
        "db_wait": 5,
    }
    values.update(extra)
    return values


def submit_for(lab_env, job_uuids):
    return {u: h.sbatch(lab_env, u) for u in job_uuids}


CASES = [
    # (revoked, options, the phrase of the message)
    ([("UPDATE", "jobs")], {}, "UPDATE on table jobs (to lock and change the jobs)"),
    ([("INSERT", "logs")], {}, "INSERT on table logs (to write the log rows)"),
    (
        [("UPDATE", "api_client_authorizations")],
        {},
        "UPDATE on table api_client_authorizations (to lock and expire the jobs' tokens)",
    ),
    ([("DELETE", "job_tasks")], {"retry": True}, "DELETE on table job_tasks (to delete the requeued jobs' tasks)"),
]


@pytest.mark.parametrize("revoked, extra, phrase", CASES, ids=[c[2].split(" (")[0] for c in CASES])
def test_a_role_that_may_not_write_is_refused_before_slurm_in_check_mode_too(
    fresh_db, lab_env, tmp_path, restricted_role, revoked, extra, phrase
):
    summary = h.load(fresh_db, running=4, running_after_boot=1)
    name, password = restricted_role(revoked)
    slurm_ids = submit_for(lab_env, summary.running_before_boot)
    try:
        dump_before = h.pg_dump(fresh_db, lab_env)
        opts = as_role(fresh_db, tmp_path, name, password, cancel_slurm_jobs=True, **extra)
        expected = (
            "the database user %s lacks privileges a run needs, so nothing was changed "
            "(no Slurm job cancelled, no row written): %s" % (name, phrase)
        )
        for flags in ([], ["--check"]):
            reason = one_line_reason(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + flags))
            assert reason.startswith(expected), reason
        result = h.run_module(lab_env, tmp_path, dict(opts, before="@%d" % h.boot_epoch(summary)), check=True)
        assert result.get("failed") is True and result["msg"].startswith(expected), result
        assert h.pg_dump(fresh_db, lab_env) == dump_before
        assert sorted(h.squeue_names(lab_env, list(slurm_ids.values())).values()) == sorted(slurm_ids)
    finally:
        h.scancel(lab_env, list(slurm_ids.values()))


def test_a_role_that_may_only_read_jobs_is_refused_with_every_missing_privilege(
    fresh_db, lab_env, tmp_path, restricted_role
):
    summary = h.load(fresh_db, running=3, running_after_boot=1)
    name, password = restricted_role([("UPDATE", "jobs"), ("INSERT", "logs")])
    reason = one_line_reason(
        h.run_cli(lab_env, tmp_path, as_role(fresh_db, tmp_path, name, password), before_flag(summary))
    )
    assert (
        ": UPDATE on table jobs (to lock and change the jobs); INSERT on table logs (to write the log rows); grant them"
        in reason
    )


# -- a transaction that fails after its Slurm step ---------------------------------------

FAILING_TRIGGER = """
CREATE FUNCTION lab_refuse_logs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'lab: this test refuses log rows'; END $$;
CREATE TRIGGER lab_refuse_logs BEFORE INSERT ON logs FOR EACH ROW EXECUTE FUNCTION lab_refuse_logs();
"""


def test_a_batch_failing_after_its_slurm_step_names_its_jobs_and_a_rerun_finishes_them(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=7, running_after_boot=1)
    jobs = sorted(summary.running_before_boot)
    slurm_ids = submit_for(lab_env, jobs)
    with fresh_db.connect(superuser=True, autocommit=True) as admin:
        admin.execute(FAILING_TRIGGER)
    opts = options(fresh_db, tmp_path, cancel_slurm_jobs=True, batch_size=100)
    try:
        reason = one_line_reason(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--quiet"]))
        assert reason.startswith(
            "database error, the batch under way was rolled back after its Slurm step, so 6 job(s) "
            "now have no Slurm job and are still Running: %s; a rerun finishes them: " % ", ".join(jobs)
        ), reason
        assert "this test refuses log rows" in reason
        assert h.squeue_names(lab_env, list(slurm_ids.values())) == {}
        conn = fresh_db.connect()
        assert all(h.jobs(conn)[u]["state"] == "Running" for u in jobs)

        with fresh_db.connect(superuser=True, autocommit=True) as admin:
            admin.execute("DROP TRIGGER lab_refuse_logs ON logs")
        rerun = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
        assert rerun["failed_jobs"] == jobs
        assert all(h.jobs(conn)[u]["state"] == "Failed" for u in jobs)
        conn.close()
    finally:
        h.scancel(lab_env, list(slurm_ids.values()))


# -- a connection killed mid-run ----------------------------------------------------------


def start_cli(lab_env, tmp_path, opts, flags):
    options_file = tmp_path / ("options-%s.json" % uuid_module.uuid4().hex[:8])
    options_file.write_text(json.dumps(opts))
    options_file.chmod(0o600)
    env = {k: v for k, v in lab_env.items() if k != "JOURNAL_STREAM"}
    return subprocess.Popen(
        h.CLI + ["--options-file", str(options_file)] + list(flags),
        cwd=str(REPO_ROOT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


SQL_RUN_BACKENDS = """
    SELECT a.pid, EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory')
    FROM pg_stat_activity a WHERE a.datname = %s AND a.application_name = 'arvados-fail-jobs'
"""


@pytest.mark.parametrize("killed", ["working", "listing", "both"])
def test_a_connection_killed_mid_run_ends_in_one_line_without_a_traceback(fresh_db, lab_env, tmp_path, killed):
    summary = h.load(fresh_db, jobs=360, running=300, running_after_boot=1, queued=5)
    opts = options(fresh_db, tmp_path, batch_size=10, batch_pause=0.3, live=False)
    process = start_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--quiet"])
    with fresh_db.connect(superuser=True, autocommit=True) as admin:
        # Mid-run: a few batches committed, the listing's cursor open. The wait ends as soon
        # as the run does: a run that ended early says so here, not as a count of backends.
        wait_for(
            lambda: (
                process.poll() is not None
                or admin.execute("SELECT count(*) FROM logs WHERE event_type = 'dispatch'").fetchone()[0] >= 20
            ),
            60,
        )
        assert process.poll() is None, "the run ended before 2 of its batches were seen: %s" % process.communicate()[1]
        backends = admin.execute(SQL_RUN_BACKENDS, (fresh_db.name,)).fetchall()
        assert len(backends) == 2, backends
        chosen = [pid for pid, working in backends if killed == "both" or working == (killed == "working")]
        for pid in chosen:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    _stdout, stderr = process.communicate(timeout=120)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    lines = stderr.splitlines()
    assert process.returncode == 1 and len(lines) == 1, stderr
    assert lines[0].startswith("arvados-fail-jobs: database error"), stderr
    assert "a rerun finishes the work" in lines[0]
    # PostgreSQL's own reason, not "the connection is lost" from a rollback tried after it.
    assert lines[0].endswith(": terminating connection due to administrator command"), stderr

    rerun = h.cli_json(h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path), before_flag(summary) + ["--json"]))
    conn = fresh_db.connect()
    assert all(h.jobs(conn)[u]["state"] == "Failed" for u in summary.running_before_boot)
    assert rerun["locked_jobs"] == []
    conn.close()
