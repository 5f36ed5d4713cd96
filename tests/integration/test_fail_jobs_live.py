"""arvados_fail_jobs beside a live API server (issue 11): option checks through the module
and the command alike, a missing privilege named, rows another connection has locked,
and no snapshot kept across batches.
"""

from __future__ import annotations

import math
import threading

import psycopg

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import engine as cleanup_engine
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import options as cleanup_options
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from tests.integration import fail_jobs_helpers as h
from tests.integration.test_arvados_fail_jobs import base_args
from tests.integration.test_arvados_fail_jobs_command import before_flag, one_line_reason, options

BAD_NUMBERS = [
    ("lock_wait", math.nan, "option lock_wait must be a finite number, got nan"),
    ("lock_wait", math.inf, "option lock_wait must be a finite number, got inf"),
    ("lock_wait", -1, "option lock_wait must be at least 0, got -1.0"),
    ("db_wait", math.nan, "option db_wait must be a finite number, got nan"),
    ("db_wait", math.inf, "option db_wait must be a finite number, got inf"),
    ("db_wait", -3, "option db_wait must be at least 0, got -3.0"),
    ("slurm_timeout", math.inf, "option slurm_timeout must be a finite number, got inf"),
    ("slurm_timeout", -1, "option slurm_timeout must be above 0, got -1.0"),
]


def flag_value(value):
    return "%r" % value if isinstance(value, float) else str(value)


def test_every_bad_number_gets_the_same_error_from_the_module_and_the_command(fresh_db, lab_env, tmp_path):
    h.load(fresh_db, running=4, running_after_boot=1)
    dump_before = h.pg_dump(fresh_db, lab_env)
    results, _completed = h.run_playbook(
        lab_env,
        tmp_path,
        [{"args": base_args(fresh_db, tmp_path, **{name: value})} for name, value, _message in BAD_NUMBERS],
    )
    for (name, value, message), result in zip(BAD_NUMBERS, results, strict=True):
        assert result.get("failed") is True, (name, value)
        assert result["msg"] == message
        flag = "--" + name.replace("_", "-")
        reason = one_line_reason(
            h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path), [flag + "=" + flag_value(value)])
        )
        assert reason == message
        # The same value in the boot unit's options file.
        reason = one_line_reason(h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path, **{name: flag_value(value)})))
        assert reason == message
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_a_missing_privilege_for_the_advisory_lock_is_named(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=4, running_after_boot=1)
    with fresh_db.connect(superuser=True, autocommit=True) as admin:
        admin.execute("REVOKE EXECUTE ON FUNCTION pg_try_advisory_lock(bigint) FROM PUBLIC")
    dump_before = h.pg_dump(fresh_db, lab_env)

    reason = one_line_reason(h.run_cli(lab_env, tmp_path, options(fresh_db, tmp_path), before_flag(summary)))
    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, summary))

    expected = (
        "the database user arvados lacks a privilege the cleanup needs, while taking "
        "the cleanup lock (pg_try_advisory_lock), nothing was changed: permission "
        "denied for function pg_try_advisory_lock"
    )
    assert reason == expected
    assert result.get("failed") is True and result["msg"] == expected
    assert "rolled back" not in reason
    assert h.pg_dump(fresh_db, lab_env) == dump_before


def test_empty_file_options_mean_no_file_to_the_module_as_to_the_command(fresh_db, lab_env, tmp_path, lab):
    summary = h.load(fresh_db, running=4, running_after_boot=1)
    explicit = {
        "config_file": "",
        "database_yml": "",
        "db_host": "127.0.0.1",
        "db_port": lab.pg_port,
        "db_name": fresh_db.name,
        "db_user": "arvados",
        "db_password": lab.db_password(),
    }

    result = h.run_module(
        lab_env, tmp_path, dict(explicit, before="@%d" % h.boot_epoch(summary), cancel_slurm_jobs=False), check=True
    )
    command = h.cli_json(
        h.run_cli(
            lab_env, tmp_path, dict(explicit, cancel_slurm_jobs=False), before_flag(summary) + ["--check", "--json"]
        )
    )

    assert not result.get("failed"), result.get("msg")
    assert result["failed_jobs"] == command["failed_jobs"] == sorted(summary.running_before_boot)
    assert result["database"] == command["database"] == "options"


# -- row locks: bounded, the rest goes on, the locked job is reported and a rerun takes it --

BOUND = 2  # row_lock_wait of these tests, seconds


def hold_row_lock(fresh_db, job_uuid):
    """A connection inside a transaction that holds `job_uuid`'s row, as an API request
    updating that job would."""
    holder = fresh_db.connect()
    holder.execute("SELECT 1 FROM jobs WHERE uuid = %s FOR UPDATE", (job_uuid,))
    return holder


def still_holds(holder):
    return holder.info.transaction_status == holder.info.transaction_status.INTRANS


class ApiWriter(threading.Thread):
    """Updates Running jobs the run is cleaning, one row per transaction, each waiting at
    most BOUND for its row lock (lock_timeout): a wait longer than that is an error."""

    def __init__(self, fresh_db, uuids):
        super().__init__(daemon=True)
        self.conn = fresh_db.connect(autocommit=True)
        self.conn.execute("SET lock_timeout = %d" % (BOUND * 1000))
        self.uuids = uuids
        self.stop = threading.Event()
        self.writes = 0
        self.errors = []

    def run(self):
        while not self.stop.is_set():
            for uuid in self.uuids:
                try:
                    self.conn.execute("UPDATE jobs SET description = 'api write' WHERE uuid = %s", (uuid,))
                    self.writes += 1
                except psycopg.Error as error:
                    self.errors.append(str(error))
                if self.stop.is_set():
                    break

    def finish(self):
        self.stop.set()
        self.join(60)
        self.conn.close()


def test_a_locked_row_is_reported_the_rest_is_done_and_a_rerun_finishes_it(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=60, running_after_boot=2, jobs=120)
    locked, *others = sorted(summary.running_before_boot)
    holder = hold_row_lock(fresh_db, locked)
    writer = ApiWriter(fresh_db, others[::7])
    writer.start()
    opts = options(fresh_db, tmp_path, row_lock_wait=BOUND, batch_size=10)

    completed = h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"])

    writer.finish()
    assert still_holds(holder)  # the run ended while the lock was still held
    result = h.cli_json(completed)
    assert result["locked_jobs"] == [locked]
    assert result["failed_jobs"] == sorted(others)
    assert result["skipped_jobs"] == []
    # The API writer's own row locks may defer a job or two for a moment too: those are
    # done on the next try.
    deferred = [
        line
        for line in completed.stderr.splitlines()
        if "locked by another transaction, tried again after the others: " in line
    ]
    assert deferred and any(locked in line for line in deferred), completed.stderr
    assert "still locked by another transaction after 2 s, left for a rerun: " + locked in completed.stderr
    assert writer.writes > 0 and writer.errors == []
    conn = fresh_db.connect()
    states = h.jobs(conn)
    assert states[locked]["state"] == "Running"
    assert all(states[u]["state"] == "Failed" for u in others)

    holder.rollback()
    rerun = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
    assert rerun["failed_jobs"] == [locked] and rerun["locked_jobs"] == []
    assert h.jobs(conn)[locked]["state"] == "Failed"
    conn.close()
    holder.close()


def test_a_lock_released_while_the_run_waits_is_taken_in_the_same_run(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=30, running_after_boot=1, jobs=60)
    locked = sorted(summary.running_before_boot)[0]
    holder = hold_row_lock(fresh_db, locked)
    release = threading.Timer(1.0, holder.rollback)
    opts = options(fresh_db, tmp_path, row_lock_wait=60, batch_size=10)

    release.start()
    result = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
    release.join()
    holder.close()

    assert result["locked_jobs"] == []
    assert result["failed_jobs"] == sorted(summary.running_before_boot)


def test_the_module_reports_the_locked_job(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=8, running_after_boot=1)
    locked = sorted(summary.running_before_boot)[-1]
    holder = hold_row_lock(fresh_db, locked)
    result = h.run_module(lab_env, tmp_path, base_args(fresh_db, tmp_path, summary, row_lock_wait=1, batch_size=3))
    assert still_holds(holder)
    holder.rollback()
    holder.close()
    assert not result.get("failed"), result.get("msg")
    assert result["locked_jobs"] == [locked]
    assert result["failed_jobs"] == sorted(set(summary.running_before_boot) - {locked})


def test_a_held_token_sets_aside_its_job_only_and_a_rerun_finishes_it(fresh_db, lab_env, tmp_path):
    # Four jobs in batches of two: the held token's job shares its batch with another,
    # which is done (issue 26: a held token used to roll back its whole batch).
    summary = h.load(fresh_db, running=5, running_after_boot=1)
    assert len(summary.running_before_boot) == 4
    job = sorted(summary.running_before_boot)[0]
    token = summary.job_token_uuids[job]
    holder = fresh_db.connect()
    holder.execute("SELECT 1 FROM api_client_authorizations WHERE uuid = %s FOR UPDATE", (token,))
    opts = options(fresh_db, tmp_path, row_lock_wait=1, batch_size=2)
    result = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
    assert still_holds(holder)
    holder.rollback()
    holder.close()
    assert result["locked_jobs"] == [job]
    assert result["failed_jobs"] == sorted(summary.running_before_boot)[1:]
    assert token not in result["revoked_tokens"]
    rerun = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
    assert rerun["failed_jobs"] == [job] and rerun["revoked_tokens"] == [token]


# -- no snapshot across batches ---------------------------------------------------------


def test_no_snapshot_of_the_run_lives_across_a_batch(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=50, running_after_boot=1, jobs=100)
    monitor = fresh_db.connect(autocommit=True, application_name="snapshot-monitor")
    seen = []

    def between_batches(result):
        rows = monitor.execute(
            "SELECT pid, backend_xmin::text FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = 'arvados-fail-jobs'"
        ).fetchall()
        seen.append((result.batches, rows))

    params = options(fresh_db, tmp_path, batch_size=7, before="@%d" % h.boot_epoch(summary), live=True)
    result = cleanup_run.run_fail_jobs(params, progress=between_batches)
    monitor.close()

    assert result["counts"]["jobs"] == len(summary.running_before_boot)
    assert len(seen) == -(-len(summary.running_before_boot) // 7)
    for batches, rows in seen:
        assert len(rows) == 2, rows  # the listing and the working connection
        assert [xmin for _pid, xmin in rows] == [None, None], (batches, rows)


# -- the fast path (index on finished_at) and the full scan -------------------------------


def test_running_rows_with_finished_at_are_found_by_default_and_by_uuid_not_by_the_index(fresh_db, lab_env, tmp_path):
    """Arvados' fail_jobs takes every Running job started before the threshold, whatever
    finished_at says (1.4.3 crunch_dispatch.rb:870): so does the default; --no-full-scan
    reads the index on finished_at and misses those rows."""
    summary = h.load(fresh_db, running=8, running_after_boot=1)
    odd, by_uuid, *normal = sorted(summary.running_before_boot)
    with fresh_db.connect(autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET finished_at = started_at + interval '1 minute' WHERE uuid = ANY(%s)", ([odd, by_uuid],)
        )
    opts = options(fresh_db, tmp_path)
    flags = before_flag(summary) + ["--json"]

    fast = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags + ["--no-full-scan"]))
    picked = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags + ["--uuid", by_uuid]))
    full = h.cli_json(h.run_cli(lab_env, tmp_path, opts, flags))

    assert fast["failed_jobs"] == sorted(normal)
    assert fast["running_with_finished_at"] == []
    assert picked["failed_jobs"] == picked["running_with_finished_at"] == [by_uuid]
    assert full["failed_jobs"] == full["running_with_finished_at"] == [odd]
    with fresh_db.connect() as conn:
        assert (
            conn.execute(
                "SELECT count(*) FROM jobs WHERE state = 'Running' AND started_at < %s", (summary.boot_time,)
            ).fetchone()[0]
            == 0
        )


def test_without_full_scan_the_listing_reads_the_index_on_finished_at_not_the_table(fresh_db):
    # Enough finished jobs that reading the table costs more than the index.
    h.load(fresh_db, jobs=5000, running=20, running_after_boot=1, tasks_per_job=0)
    with fresh_db.connect() as conn:
        conn.execute("ANALYZE jobs")
        query, params = cleanup_engine.JobCleaner(
            None, None, cleanup_options.CleanupOptions(full_scan=False)
        )._listing_query()  # pylint: disable=protected-access
        plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + query, params))
        full_query, _params = cleanup_engine.JobCleaner(None, None, cleanup_options.CleanupOptions())._listing_query()  # pylint: disable=protected-access
        full_plan = "\n".join(row[0] for row in conn.execute("EXPLAIN " + full_query, params))
    assert "index_jobs_on_finished_at" in plan and "Seq Scan" not in plan
    assert "Seq Scan on jobs" in full_plan


# -- live or at boot ------------------------------------------------------------------------


def test_auto_is_live_when_another_session_is_connected_and_at_boot_when_none(fresh_db, lab_env, tmp_path):
    summary = h.load(fresh_db, running=6, running_after_boot=1)
    opts = options(fresh_db, tmp_path, batch_size=2)
    alone = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--check", "--json"]))
    with fresh_db.connect(application_name="api-server"):
        busy = h.cli_json(h.run_cli(lab_env, tmp_path, opts, before_flag(summary) + ["--json"]))
    assert alone["live"] is False
    assert busy["live"] is True and busy["warnings"] == []
    assert busy["failed_jobs"] == sorted(summary.running_before_boot)
