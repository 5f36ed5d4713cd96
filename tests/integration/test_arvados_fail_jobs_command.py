"""The `arvados-fail-jobs` command as a subprocess, on the lab's PostgreSQL: its summary and
exit status, check mode, the advisory lock, errors, and SIGKILL at random moments of a
large run followed by a rerun (every job either untouched or completely done).
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from datetime import timedelta

import psycopg
import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import checks as cleanup_checks
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.before import ACCEPTED_FORMS
from lab import datagen
from tests.integration import fail_jobs_helpers as h
from tests.integration.conftest import schema_database
from tests.integration.ports import free_port

SCHEMA_2017 = h.REPO_ROOT / "lab" / "schema" / "2017"


def options(fresh_db, tmp_path, **extra):
    values = {"config_file": str(h.write_config(fresh_db, tmp_path)), "cancel_slurm_jobs": False, "db_wait": 5}
    values.update(extra)
    return values


def before_flag(summary):
    return ["--before", "@%d" % h.boot_epoch(summary)]


def one_line_reason(completed):
    assert completed.returncode == 1, (completed.stdout, completed.stderr)
    assert completed.stdout == ""
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("arvados-fail-jobs: ")
    return lines[0][len("arvados-fail-jobs: ") :]


def test_summary_exit_status_and_rerun(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=9, running_after_boot=2, running_unstarted=1)
    conn = fresh_db.connect()
    jobs_before = h.jobs(conn)

    completed = h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path), before_flag(summary) + ["--quiet"])

    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    # The pace line holds the run's timings: its start only.
    assert lines[-2].startswith("pace: ")
    assert lines[:-2] + lines[-1:] == [
        "threshold: %sZ (argument)" % summary.boot_time.isoformat(),
        "jobs failed: 6",
        "tokens revoked: 6",
        "exempt (started after the threshold): 2",
        "Running without started_at: 1 (%s)" % summary.running_unstarted[0],
        "slurm: not asked (cancel_slurm_jobs is false)",
        "changed: yes",
    ]
    jobs_after = h.jobs(conn)
    assert {u for u in jobs_after if jobs_after[u]["state"] != jobs_before[u]["state"]} == set(
        summary.running_before_boot
    )
    revoked = {summary.job_token_uuids[u] for u in summary.running_before_boot}
    assert {row["object_uuid"] for row in h.logs(conn)} == set(summary.running_before_boot) | revoked

    rerun = h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path), before_flag(summary))

    assert rerun.returncode == 0, rerun.stderr
    assert "jobs failed: 0" in rerun.stdout.splitlines()
    assert rerun.stdout.splitlines()[-1] == "changed: no"
    # a `dispatch` and an `update` row per job (1.4.3 crunch_dispatch.rb fail_job, arvados_model.rb log_update),
    # an `update` row per expired token (crunch_dispatch.rb:730)
    assert len(h.logs(conn)) == 2 * 6 + len(revoked) == 2 * 6 + 6


def test_audit_logs_false_writes_only_the_dispatch_rows_and_says_so(fresh_db, lab_env, tmp_path):
    """The flag for a cluster whose AuditLogs the command cannot read (1.4.3
    arvados_model.rb:816-819): the jobs are failed and their tokens expired, fail_job's
    `dispatch` rows written (crunch_dispatch.rb:222-233), no `update` row."""
    summary = h.load(fresh_db, running=5, running_after_boot=1)
    conn = fresh_db.connect()
    tokens_before = h.tokens(conn)

    completed = h.run_cli(
        lab_env, tmp_path, options(fresh_db, tmp_path), before_flag(summary) + ["--quiet", "--audit-logs", "false"]
    )

    assert completed.returncode == 0, completed.stderr
    assert "update audit rows: not written (option audit_logs)" in completed.stdout.splitlines()
    assert "jobs failed: 4" in completed.stdout.splitlines()
    rows = h.logs(conn)
    assert sorted((r["event_type"], r["object_uuid"]) for r in rows) == [
        ("dispatch", u) for u in sorted(summary.running_before_boot)
    ]
    expired = {u for u, row in h.tokens(conn).items() if row["expires_at"] != tokens_before[u]["expires_at"]}
    assert expired == {summary.job_token_uuids[u] for u in summary.running_before_boot}


def test_json_output_matches_the_database_and_holds_no_secret(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=8, running_after_boot=1)
    conn = fresh_db.connect()
    secrets = h.api_token_secrets(conn)

    completed = h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path), before_flag(summary) + ["--json", "--diff"])

    result = h.cli_json(completed)
    assert result["changed"] is True
    assert result["failed_jobs"] == sorted(summary.running_before_boot)
    assert result["revoked_tokens"] == sorted(summary.job_token_uuids[u] for u in summary.running_before_boot)
    assert sorted(result["log_uuids"]) == sorted(r["uuid"] for r in h.logs(conn))
    assert result["diff"]["before"] == "".join("%s: Running\n" % u for u in sorted(summary.running_before_boot))
    assert result["database"].startswith("config_file ")
    assert [s for s in secrets if s in completed.stdout + completed.stderr] == []
    password = fresh_db.connection["password"]
    assert password not in completed.stdout + completed.stderr


def test_retry_and_no_revoke_tokens_flags(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=6, running_after_boot=1, tasks_per_job=2)
    conn = fresh_db.connect()
    tokens_before, tasks_before = h.tokens(conn), h.tasks_by_job(conn)
    requeued = set(summary.running_before_boot)

    result = h.cli_json(
        h.run_cli(
            lab_env,
            tmp_path,
            options(fresh_db, tmp_path),
            before_flag(summary) + ["--retry", "--no-revoke-tokens", "--json"],
        )
    )

    assert result["requeued_jobs"] == sorted(requeued)
    assert result["revoked_tokens"] == []
    assert h.tokens(conn) == tokens_before
    states = {u: row["state"] for u, row in h.jobs(conn).items()}
    assert {u for u in summary.running_uuids if states[u] == "Queued"} == requeued
    assert h.tasks_by_job(conn) == {u: t for u, t in tasks_before.items() if u not in requeued}


def test_check_writes_nothing_and_predicts_the_real_run(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=10, running_after_boot=2, running_unstarted=1)
    opts = options(fresh_db, tmp_path)
    dump_before = h.pg_dump(fresh_db, lab_env)

    check = h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--check"])
    assert check.returncode == 0, check.stderr
    assert "jobs would be failed: 7" in check.stdout.splitlines()
    assert "tokens would be revoked: 7" in check.stdout.splitlines()
    predicted = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--check", "--json"]))

    assert h.pg_dump(fresh_db, lab_env) == dump_before
    real = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
    assert predicted["failed_jobs"] == real["failed_jobs"] == sorted(summary.running_before_boot)
    assert predicted["revoked_tokens"] == real["revoked_tokens"]
    assert predicted["exempt"] == real["exempt"]
    assert predicted["log_uuids"] == []
    assert h.pg_dump(fresh_db, lab_env) != dump_before


def test_lock_held_by_another_run(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=5, running_after_boot=1)
    holder = fresh_db.connect(autocommit=True)
    holder.execute("SELECT pg_advisory_lock(%s)", (cleanup_checks.ADVISORY_LOCK_KEY,))
    dump_before = h.pg_dump(fresh_db, lab_env)
    opts = options(fresh_db, tmp_path, lock_wait=1)

    began = time.monotonic()
    blocked = h.run_cli(lab_env, tmp_path, opts, before_flag(summary))
    assert time.monotonic() - began < 15
    reason = one_line_reason(blocked)
    assert "advisory lock %d" % cleanup_checks.ADVISORY_LOCK_KEY in reason
    assert "waited 1 s" in reason
    assert h.pg_dump(fresh_db, lab_env) == dump_before

    holder.execute("SELECT pg_advisory_unlock(%s)", (cleanup_checks.ADVISORY_LOCK_KEY,))
    result = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
    assert result["failed_jobs"] == sorted(summary.running_before_boot)


def test_errors_exit_1_with_a_one_line_reason_and_write_nothing(fresh_db, lab_env, tmp_path, lab):
    h.load(fresh_db, running=5, running_after_boot=1)
    config = h.write_config(fresh_db, tmp_path)
    dump_before = h.pg_dump(fresh_db, lab_env)
    base = {"config_file": str(config), "cancel_slurm_jobs": False}

    wrong_password = "WrongSecret-91c2e77b40"
    reason = one_line_reason(h.run_cli(lab_env, tmp_path, dict(base, db_password=wrong_password)))
    assert "password authentication failed" in reason
    assert wrong_password not in reason

    port = free_port()
    began = time.monotonic()
    reason = one_line_reason(
        h.run_cli(lab_env, tmp_path, dict(base, db_port=port), ["--db-wait", "1", "--db-connect-timeout", "1"])
    )
    assert time.monotonic() - began < 10
    assert reason.startswith("cannot connect to the database %r as 'arvados' on 127.0.0.1:%d" % (fresh_db.name, port))

    reason = one_line_reason(h.run_cli(lab_env, tmp_path, base, ["--before", "the day before yesterday"]))
    assert reason == "cannot read before='the day before yesterday': " + ACCEPTED_FORMS

    two_clusters = tmp_path / "two.yml"
    text = config.read_text()
    two_clusters.write_text(text + text.split("Clusters:\n", 1)[1].replace("  %s:" % lab.cluster_id, "  yyyyy:"))
    reason = one_line_reason(h.run_cli(lab_env, tmp_path, dict(base, config_file=str(two_clusters))))
    assert reason == "config_file %s defines several clusters (%s); set cluster_id" % (
        two_clusters,
        ", ".join(sorted([lab.cluster_id, "yyyyy"])),
    )

    reason = one_line_reason(h.run_cli(lab_env, tmp_path, dict(base, no_such_option=1)))
    assert "has 1 key(s) that are no option of arvados-fail-jobs (not shown" in reason
    assert "no_such_option" not in reason

    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_missing_column_is_named(fresh_db, lab_env, tmp_path):
    h.load(fresh_db, running=4, running_after_boot=1)
    with fresh_db.connect(autocommit=True) as conn:
        conn.execute("ALTER TABLE jobs DROP COLUMN is_locked_by_uuid CASCADE")
    dump_before = h.pg_dump(fresh_db, lab_env)

    reason = one_line_reason(h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path)))

    assert reason.endswith("table jobs lacks column(s) is_locked_by_uuid")
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_under_json_a_failure_is_json_on_stdout_too(fresh_db, lab_env, tmp_path):
    h.load(fresh_db, running=2, running_after_boot=1)
    with fresh_db.connect(autocommit=True) as conn:
        conn.execute("ALTER TABLE jobs DROP COLUMN is_locked_by_uuid CASCADE")

    completed = h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path), ["--json"])

    assert completed.returncode == 1
    failure = json.loads(completed.stdout)
    assert failure["failed"] is True and failure["changed"] is False
    assert failure["msg"].endswith("table jobs lacks column(s) is_locked_by_uuid")
    assert completed.stderr == "arvados-fail-jobs: %s\n" % failure["msg"]


def test_a_command_line_it_cannot_understand_exits_2(fresh_db, lab_env, tmp_path):
    # The password is never a flag: it would show in `ps` to every user of the host.
    completed = subprocess.run(
        h.CLI + ["--db-password", "x"],
        cwd=str(h.REPO_ROOT),
        env=dict(lab_env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 2
    assert "unrecognized arguments: --db-password" in completed.stderr


# -- 8. SIGKILL at random moments -------------------------------------------------------

KILL_JOBS = 3000
KILL_BATCH = 50


def consistency(conn, summary):
    """(done job uuids, still-Running job uuids); asserts nothing is half done."""
    states = {u: row["state"] for u, row in h.jobs(conn).items()}
    all_log_rows = [(row["object_uuid"], row["event_type"]) for row in h.logs(conn)]
    log_rows = [(uuid, kind) for uuid, kind in all_log_rows if h.TOKEN_INFIX_TEXT not in uuid]
    log_objects = [uuid for uuid, _kind in log_rows]
    expired = {u for u, row in h.tokens(conn).items() if row["expires_at"] is not None}
    # each expired token's `update` row (1.4.3 crunch_dispatch.rb:730), in its batch's transaction
    assert sorted(u for u, _kind in all_log_rows if h.TOKEN_INFIX_TEXT in u) == sorted(expired)
    assert len(log_rows) == len(set(log_rows)), "duplicate log rows"
    # Arvados' two rows per job (1.4.3 crunch_dispatch.rb fail_job, arvados_model.rb log_update), or none
    assert sorted(log_rows) == sorted((u, kind) for u in set(log_objects) for kind in ("dispatch", "update"))
    done = {u for u in summary.running_uuids if states[u] == "Failed"}
    running = {u for u in summary.running_uuids if states[u] == "Running"}
    assert done | running == set(summary.running_uuids)
    assert set(log_objects) == done
    assert {u for u in summary.running_uuids if summary.job_token_uuids[u] in expired} == done
    return done, running


def wait_for_logs(conn, target, process, deadline):
    while time.monotonic() < deadline and process.poll() is None:
        count = conn.execute("SELECT count(*) FROM logs").fetchone()[0]
        if count >= target:
            return count
        time.sleep(0.003)
    return None


def test_sigkill_at_random_moments_then_rerun_leaves_every_job_whole(fresh_db, lab_env, tmp_path):
    summary = h.load(
        fresh_db,
        jobs=KILL_JOBS,
        running=KILL_JOBS,
        queued=0,
        running_after_boot=0,
        tasks_per_job=1,
        decoys=False,
        finished_job_tokens=False,
    )
    # No pause between batches: the watcher's session makes the run live, and the live pause
    # would put most kills between transactions and the targets past the 30 s deadline.
    opts = options(fresh_db, tmp_path, batch_size=KILL_BATCH, lock_wait=30, batch_pause=0)
    options_file = tmp_path / "kill-options.json"
    options_file.write_text(json.dumps(opts))
    command = h.CLI + ["--options-file", str(options_file), "--quiet"] + before_flag(summary)
    watcher = fresh_db.connect(autocommit=True)
    rng = random.Random()
    kills = []
    done = set()
    for _kill in range(3):
        remaining = KILL_JOBS - len(done)
        target = len(done) + rng.randint(1, remaining // 3)
        process = subprocess.Popen(
            command, cwd=str(h.REPO_ROOT), env=dict(lab_env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            reached = wait_for_logs(watcher, target, process, time.monotonic() + 30)
            # A few ms more lands the kill anywhere in a batch's transaction.
            time.sleep(rng.uniform(0, 0.02))
            process.send_signal(signal.SIGKILL)
        finally:
            process.wait(timeout=30)
        assert reached is not None, "the run ended before the kill (target %d): %s" % (
            target,
            process.stderr.read().decode(),
        )
        assert process.returncode == -signal.SIGKILL
        process.stderr.close()
        done_now, running_now = consistency(fresh_db.connect(), summary)
        assert done <= done_now
        assert 0 < len(done_now) < KILL_JOBS, "killed after the last batch: not mid-way"
        kills.append(len(done_now))
        done = done_now
    print("jobs done at each kill: %s" % kills)

    final = h.cli_json(h.run_cli(lab_env, tmp_path, opts, ["--quiet", "--json"] + before_flag(summary)))

    assert final["failed_jobs"] == sorted(set(summary.running_uuids) - done)
    assert final["skipped_jobs"] == []
    done_final, running_final = consistency(fresh_db.connect(), summary)
    assert done_final == set(summary.running_uuids) and running_final == set()
    again = h.cli_json(h.run_cli(lab_env, tmp_path, opts, ["--quiet", "--json"] + before_flag(summary)))
    assert again["changed"] is False


# -- 10. the 2017 schema ----------------------------------------------------------------


@pytest.mark.skipif(not SCHEMA_2017.is_dir(), reason="lab/schema/2017/ does not exist: no 2017 schema to test against")
def test_the_2017_schema(lab, lab_env, tmp_path, fresh_db):
    """The same cluster in a 2017 database and in today's (fresh_db): the command fails the
    same jobs, revokes the same tokens and writes the same log rows in both."""
    with schema_database(lab, SCHEMA_2017) as database:
        # The 2017 schema needs no extension: its text search is to_tsvector, not pg_trgm.
        name = database.name
        with psycopg.connect(**lab.connection(name), autocommit=True) as conn:
            id_types = dict(
                conn.execute(
                    "SELECT table_name, data_type FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND column_name = 'id'"
                ).fetchall()
            )
            assert set(id_types.values()) == {"integer"} and len(id_types) == 7
            assert (
                conn.execute(
                    "SELECT count(*) FROM pg_indexes WHERE indexname = 'jobs_full_text_search_idx'"
                ).fetchone()[0]
                == 1
            )
        conninfo = psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in lab.connection(name).items()})
        now = datagen.utc_now()
        spec = datagen.ClusterSpec(
            boot_time=now.replace(microsecond=0) - timedelta(minutes=30),
            now=now,
            jobs=40,
            running=6,
            queued=3,
            running_after_boot=1,
            users=4,
            idle_users=1,
            seed=h.random_seed(),
        )
        summary, _timings = datagen.load_cluster(conninfo, spec)
        today, _today_timings = datagen.load_cluster(h.conninfo(fresh_db), spec)
        assert today.to_dict() == summary.to_dict()

        def run(db_name):
            opts = {
                "db_host": "127.0.0.1",
                "db_port": lab.pg_port,
                "db_name": db_name,
                "db_user": "arvados",
                "db_password": lab.db_password(),
                "cancel_slurm_jobs": False,
            }
            return h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))

        def outcome(conn, since):
            """Jobs, tasks, tokens and log rows, with the run's clock readings as 'now'."""

            def norm(row, drop=()):
                return {
                    k: "now" if isinstance(v, type(since)) and v >= since else v
                    for k, v in row.items()
                    if k not in drop
                }

            def norm_log(row):
                """An `update` row's new attributes hold the run's clock too, and its etag; a
                token's hold refreshes_at on today's schema only, and their etags with it."""
                row = norm(row, ("uuid",))
                if row["event_type"] == "update":
                    properties = json.loads(row["properties"])
                    old, new = properties["old_attributes"], properties.pop("new_etag") and properties["new_attributes"]
                    is_token = h.TOKEN_INFIX_TEXT in row["object_uuid"]
                    if is_token:
                        properties.pop("old_etag")
                        for attributes in (old, new):
                            attributes.pop("refreshes_at", None)
                    changing = (
                        ("expires_at", "updated_at") if is_token else ("modified_at", "updated_at", "finished_at")
                    )
                    for column in changing:
                        if new[column] != old[column]:
                            new[column] = "now"
                    row["properties"] = properties
                return row

            jobs = {u: norm(row) for u, row in h.jobs(conn).items()}
            tokens = {u: norm(row, ("refreshes_at",)) for u, row in h.tokens(conn).items()}
            logs = sorted(
                (norm_log(row) for row in h.logs(conn)), key=lambda row: (row["object_uuid"], row["event_type"])
            )
            return jobs, h.tasks_by_job(conn), tokens, logs

        outcomes, results = [], []
        for db_name in (name, fresh_db.name):
            with psycopg.connect(**lab.connection(db_name)) as conn:
                since = h.db_now(conn)
                results.append(run(db_name))
                outcomes.append(outcome(conn, since))
                log_uuids = sorted(row["uuid"] for row in h.logs(conn))
                assert results[-1]["log_uuids"] == log_uuids
                assert all(u.startswith(spec.prefix + "-57u5n-") for u in log_uuids)
        result, today_result = results

        assert result["failed_jobs"] == sorted(summary.running_before_boot)
        assert result["revoked_tokens"] == sorted(summary.job_token_uuids[u] for u in summary.running_before_boot)
        assert result["exempt"]["count"] == len(summary.running_after_boot) == 1
        # Everything the command reports but the log rows' random uuids, which database and
        # the pace's timings.
        assert {k: v for k, v in result.items() if k not in ("log_uuids", "database", "pace")} == {
            k: v for k, v in today_result.items() if k not in ("log_uuids", "database", "pace")
        }
        assert outcomes[0] == outcomes[1]
        jobs, _tasks, tokens, logs = outcomes[0]
        assert {u for u, row in jobs.items() if row["state"] == "Failed" and row["finished_at"] == "now"} == set(
            summary.running_before_boot
        )
        assert {u for u, row in tokens.items() if row["expires_at"] == "now"} == set(result["revoked_tokens"])
        # and each expired token's `update` row (1.4.3 crunch_dispatch.rb:730), the same in both
        assert [(row["object_uuid"], row["event_type"]) for row in logs] == sorted(
            [(u, kind) for u in summary.running_before_boot for kind in ("dispatch", "update")]
            + [(u, "update") for u in result["revoked_tokens"]]
        )

        assert run(name)["changed"] is False


def gin_pending_pages(fresh_db):
    with fresh_db.connect(superuser=True) as admin:
        admin.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        return admin.execute("SELECT pending_pages FROM pgstatginindex('jobs_trgm_text_search_idx')").fetchone()[0]


def test_batches_leave_no_trigram_index_merge_for_the_next_writer(fresh_db, lab_env, tmp_path):
    """Batches but the last let the pending list of the jobs' GIN index grow; the last runs
    with the server's limit and merges it. With the smallest limit (64 kB), what the run
    leaves pending fits within it, or the API server's next write would do the merge."""
    summary = h.load(fresh_db, jobs=900, running=400, running_after_boot=0, tasks_per_job=1)
    env = dict(lab_env, PGOPTIONS="-c gin_pending_list_limit=64")

    result = h.cli_json(
        h.run_cli(
            lab_env=env,
            directory=tmp_path,
            options=options(fresh_db, tmp_path, batch_size=50),
            flags=before_flag(summary) + ["--json"],
        )
    )

    assert sorted(result["failed_jobs"]) == sorted(summary.running_before_boot)
    assert gin_pending_pages(fresh_db) * 8 <= 64 + 8  # the limit, and the row that passed it


def test_a_slurm_user_owning_none_of_the_jobs_exits_1_and_changes_nothing(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=3, running_after_boot=1, decoys=False)
    stale = sorted(summary.running_before_boot)
    submitted = {}
    try:
        for job_uuid in stale:
            submitted[h.sbatch(lab_env, job_uuid)] = job_uuid
        dump_before = h.pg_dump(fresh_db, lab_env)
        values = options(fresh_db, tmp_path, cancel_slurm_jobs=True, slurm_timeout=60)

        completed = h.run_cli(lab_env, tmp_path, values, before_flag(summary) + ["--slurm-user", "crunch", "--json"])

        assert completed.returncode == 1, (completed.stdout, completed.stderr)
        result = json.loads(completed.stdout)
        assert result["failed"] is True and result["failed_jobs"] == []
        assert sorted(j["uuid"] for j in result["held_by_other_users"]) == stale
        assert "not slurm_user=crunch" in result["msg"] and "not slurm_user=crunch" in completed.stderr
        assert h.pg_dump(fresh_db, lab_env) == dump_before
        assert h.squeue_names(lab_env, list(submitted)) == submitted

        # An squeue that lists nothing is no empty queue.
        completed = h.run_cli(lab_env, tmp_path, dict(values, squeue_path="/bin/true"), before_flag(summary))
        assert one_line_reason(completed).startswith(
            "Slurm jobs of %d job(s) could not be made absent: squeue exited 0 without the line "
            "JOBID|STATE|USER|NAME" % len(stale)
        )
        assert h.pg_dump(fresh_db, lab_env) == dump_before
        assert h.squeue_names(lab_env, list(submitted)) == submitted
    finally:
        h.scancel(lab_env, list(submitted))
