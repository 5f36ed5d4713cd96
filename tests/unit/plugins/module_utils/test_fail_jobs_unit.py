# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The pure parts of the fail-jobs cleanup, with fakes for the database, clock and Slurm:
option validation, merging Slurm results, waiting for the advisory lock, connection
retries, the command's flags, options file, summary and error reporting."""
from __future__ import annotations

import io
import json
import random
from datetime import datetime, timedelta

import pytest

from plugins.module_utils import fail_jobs, fail_jobs_cli, fail_jobs_run, pg_connect
from plugins.module_utils.errors import ConfigError, RecoveryError
from plugins.module_utils.fail_jobs import (
    ADVISORY_LOCK_KEY,
    DEFAULT_FAIL_MESSAGE,
    DEFAULT_RETRY_MESSAGE,
    CleanupOptions,
    CleanupResult,
    merge_slurm_results,
    take_advisory_lock,
)

JOB = "zzzzz-8i9sb-%015d"
NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test",
            "cancel_slurm_jobs": False}


class FakeClock(object):
    """monotonic() and sleep() on a clock that moves only when slept on."""

    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


# -- CleanupOptions -----------------------------------------------------------------------

@pytest.mark.parametrize("batch_size", [0, -1, True, "5", 2.5, None])
def test_batch_size_must_be_a_positive_integer(batch_size):
    with pytest.raises(RecoveryError, match="batch_size must be a positive integer"):
        CleanupOptions(batch_size=batch_size)


def test_negative_lock_wait_and_blank_message_are_refused():
    with pytest.raises(RecoveryError, match="lock_wait must not be negative, got -1"):
        CleanupOptions(lock_wait=-1)
    with pytest.raises(RecoveryError, match="message must not be empty"):
        CleanupOptions(message="  \n ")


def test_uuids_must_be_job_uuids_and_are_deduplicated_and_sorted():
    options = CleanupOptions(uuids=[JOB % 2, JOB % 1, JOB % 2])
    assert options.uuids == [JOB % 1, JOB % 2]
    container = "zzzzz-dz642-000000000000001"
    with pytest.raises(RecoveryError) as raised:
        CleanupOptions(uuids=[JOB % 1, container, "zzzzz-8i9sb-short", JOB % 3 + "\n"])
    assert str(raised.value) == (
        "not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): %r, 'zzzzz-8i9sb-short', %r"
        % (JOB % 3 + "\n", container))


def test_default_messages_and_target_state_follow_retry():
    assert CleanupOptions().message == DEFAULT_FAIL_MESSAGE
    assert CleanupOptions().target_state == "Failed"
    assert CleanupOptions(retry=True).message == DEFAULT_RETRY_MESSAGE
    assert CleanupOptions(retry=True).target_state == "Queued"
    assert CleanupOptions(retry=True, message="mine").message == "mine"


def test_result_dict_names_the_job_list_after_the_mode_and_diffs_each_job():
    result = CleanupResult(CleanupOptions(retry=True, diff=True))
    result.done_jobs.extend([JOB % 1, JOB % 2])
    result.exempt = [JOB % 3]
    as_dict = result.to_dict()
    assert as_dict["changed"] is True
    assert as_dict["requeued_jobs"] == [JOB % 1, JOB % 2]
    assert "failed_jobs" not in as_dict
    assert as_dict["exempt"] == {"count": 1, "uuids": [JOB % 3]}
    assert as_dict["threshold"] is None and as_dict["threshold_source"] is None
    assert as_dict["slurm"] == {}
    assert as_dict["counts"] == {"jobs": 2, "skipped_jobs": 0, "revoked_tokens": 0, "logs": 0}
    assert as_dict["diff"] == {
        "before": "%s: Running\n%s: Running\n" % (JOB % 1, JOB % 2),
        "after": "%s: Queued\n%s: Queued\n" % (JOB % 1, JOB % 2),
    }
    nothing = CleanupResult(CleanupOptions()).to_dict()
    assert nothing["changed"] is False and nothing["failed_jobs"] == []
    assert "diff" not in nothing


# -- merge_slurm_results ------------------------------------------------------------------

def test_merge_slurm_results_concatenates_lists_ors_flags_and_sums_counts():
    first = {"cancelled": [{"name": JOB % 1}], "already_absent": [], "changed": True,
             "failed": False, "scancel_calls": 2, "squeue_calls": 3, "elapsed": 0.5,
             "msg": "first"}
    second = {"cancelled": [{"name": JOB % 2}], "already_absent": [JOB % 3], "changed": False,
              "failed": False, "scancel_calls": 1, "squeue_calls": 1, "elapsed": 0.25,
              "msg": "second"}
    merged = merge_slurm_results([first, second])
    assert merged == {
        "cancelled": [{"name": JOB % 1}, {"name": JOB % 2}], "already_absent": [JOB % 3],
        "changed": True, "failed": False, "scancel_calls": 3, "squeue_calls": 4,
        "elapsed": 0.75, "msg": "second",
    }
    # the inputs are not modified
    assert first["cancelled"] == [{"name": JOB % 1}] and first["already_absent"] == []


def test_merge_of_no_batches_is_empty():
    assert merge_slurm_results([]) == {}


# -- the advisory lock --------------------------------------------------------------------

class LockConnection(object):
    """Answers pg_try_advisory_lock with the scripted answers, then True for ever."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def execute(self, query, params=None):
        self.calls.append(("execute", query, params))
        answer = self.answers.pop(0) if self.answers else True
        return _Rows([(answer,)])

    def commit(self):
        self.calls.append(("commit",))

    def rollback(self):
        self.calls.append(("rollback",))


class _Rows(object):
    def __init__(self, rows):
        self.rows = rows

    def fetchone(self):
        return self.rows[0]

    def fetchall(self):
        return self.rows


def test_lock_taken_at_once_is_committed_without_sleeping():
    conn, clock = LockConnection([True]), FakeClock()
    take_advisory_lock(conn, 5, sleep=clock.sleep, clock=clock)
    assert conn.calls == [("execute", "SELECT pg_try_advisory_lock(%s)", (ADVISORY_LOCK_KEY,)),
                          ("commit",)]
    assert clock.sleeps == []


def test_lock_is_retried_with_growing_pauses_until_it_is_free():
    conn, clock = LockConnection([False] * 5 + [True]), FakeClock()
    take_advisory_lock(conn, 30, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6])
    assert [c[0] for c in conn.calls].count("rollback") == 5
    assert conn.calls[-1] == ("commit",)


def test_lock_wait_is_bounded_and_the_message_names_the_lock():
    conn, clock = LockConnection([False] * 1000), FakeClock()
    with pytest.raises(RecoveryError) as raised:
        take_advisory_lock(conn, 3, sleep=clock.sleep, clock=clock)
    assert sum(clock.sleeps) == pytest.approx(3.0)
    assert max(clock.sleeps) <= 2.0
    assert str(raised.value) == (
        "another arvados_fail_jobs run holds the cleanup lock (PostgreSQL advisory lock %d); "
        "waited 3 s. Try again when it has finished." % ADVISORY_LOCK_KEY)
    assert ("commit",) not in conn.calls


def test_lock_wait_zero_tries_once():
    conn, clock = LockConnection([False]), FakeClock()
    with pytest.raises(RecoveryError, match="waited 0 s"):
        take_advisory_lock(conn, 0, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []
    assert len([c for c in conn.calls if c[0] == "execute"]) == 1


def test_the_lock_key_is_a_fixed_positive_bigint():
    assert ADVISORY_LOCK_KEY == int.from_bytes(b"arvfailj", "big")
    assert 0 < ADVISORY_LOCK_KEY < 2 ** 63


# -- connecting ---------------------------------------------------------------------------

class FakeOperationalError(Exception):
    def __init__(self, text, sqlstate=None):
        super().__init__(text)
        self.sqlstate = sqlstate


class FakePsycopg(object):
    OperationalError = FakeOperationalError

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def connect(self, **kwargs):
        self.calls.append(kwargs)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


KWARGS = {"host": "db.example", "port": 5432, "dbname": "arvados_production",
          "user": "arvados", "password": "s3cr3t-pw"}
REFUSED = 'connection failed: connection to server at "db.example", port 5432 failed: ' \
          'Connection refused'


def test_transient_errors_are_retried_until_the_database_answers():
    clock = FakeClock()
    fake = FakePsycopg([FakeOperationalError(REFUSED), FakeOperationalError(REFUSED), "conn"])
    assert pg_connect.connect(KWARGS, wait=30, psycopg=fake, sleep=clock.sleep,
                              clock=clock) == "conn"
    assert clock.sleeps == [0.5, 1.0]
    assert fake.calls == [KWARGS] * 3


def test_retries_stop_at_the_deadline_and_say_how_many_attempts():
    clock = FakeClock()
    fake = FakePsycopg([FakeOperationalError(REFUSED)] * 10)
    with pytest.raises(pg_connect.DatabaseUnavailable) as raised:
        pg_connect.connect(KWARGS, wait=4, psycopg=fake, sleep=clock.sleep, clock=clock)
    # 0.5 + 1 + 2 = 3.5 s slept; the next pause (4 s) would pass the deadline
    assert clock.sleeps == [0.5, 1.0, 2.0]
    assert str(raised.value) == (
        "cannot connect to the database 'arvados_production' as 'arvados' on db.example:5432 "
        "after 4 attempt(s): " + REFUSED)


@pytest.mark.parametrize("error", [
    FakeOperationalError('FATAL: password authentication failed for user "arvados"',
                         sqlstate="28P01"),
    FakeOperationalError('connection failed: FATAL: password authentication failed for '
                         'user "arvados"'),
    FakeOperationalError('FATAL: database "arvados_production" does not exist',
                         sqlstate="3D000"),
    FakeOperationalError('FATAL: no pg_hba.conf entry for host "10.0.0.1"'),
])
def test_permanent_errors_fail_at_once(error):
    clock = FakeClock()
    fake = FakePsycopg([error, "conn"])
    with pytest.raises(pg_connect.DatabaseUnavailable, match="after 1 attempt"):
        pg_connect.connect(KWARGS, wait=60, psycopg=fake, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []


def test_the_password_is_masked_in_connection_errors():
    clock = FakeClock()
    leaky = FakeOperationalError("invalid dsn: password=s3cr3t-pw host=db.example\n"
                                 "  missing \"=\" after s3cr3t-pw")
    fake = FakePsycopg([leaky])
    with pytest.raises(pg_connect.DatabaseUnavailable) as raised:
        pg_connect.connect(KWARGS, wait=0, psycopg=fake, sleep=clock.sleep, clock=clock)
    message = str(raised.value)
    assert "s3cr3t-pw" not in message
    assert "password=******** host=db.example missing \"=\" after ********" in message
    assert "\n" not in message


def test_is_permanent_and_describe_target():
    assert pg_connect.is_permanent(FakeOperationalError("x", sqlstate="28000"))
    assert not pg_connect.is_permanent(FakeOperationalError(REFUSED))
    assert not pg_connect.is_permanent(FakeOperationalError("x", sqlstate="57P03"))
    assert pg_connect.describe_target({"dbname": "d", "user": "u"}) == \
        "database 'd' as 'u' on the local socket"
    assert pg_connect.redact("a pw b pw", "pw") == "a ******** b ********"
    assert pg_connect.redact("text", None) == "text"


# -- options of a run ---------------------------------------------------------------------

def test_unknown_options_are_refused():
    with pytest.raises(ConfigError, match="unknown option.s.: bogus, colour"):
        fail_jobs_run.with_defaults({"bogus": 1, "colour": "red", "retry": True})


def test_with_defaults_fills_every_option():
    full = fail_jobs_run.with_defaults({"retry": True, "before": None})
    assert set(full) == set(fail_jobs_run.ALL_OPTIONS)
    assert full["retry"] is True
    assert full["revoke_tokens"] is True and full["batch_size"] == 1000
    assert full["cancel_slurm_jobs"] == "auto"


@pytest.mark.parametrize("value, mode", [
    ("auto", "auto"), (" AUTO ", "auto"), (True, True), (False, False), ("yes", True),
    ("on", True), ("1", True), ("no", False), ("off", False), ("0", False), ("False", False),
])
def test_cancel_slurm_mode_words(value, mode):
    assert fail_jobs_run.cancel_slurm_mode(value) == mode


def test_cancel_slurm_mode_refuses_other_words():
    with pytest.raises(ConfigError, match="cancel_slurm_jobs must be auto, true or false, got 'sometimes'"):
        fail_jobs_run.cancel_slurm_mode("sometimes")


def test_slurm_step_auto_without_squeue_is_skipped_with_a_reason():
    params = fail_jobs_run.with_defaults({})
    assert fail_jobs_run.slurm_step(params, which=lambda name: None) == (
        None, "cancel_slurm_jobs is auto and squeue is not on this host")
    step, reason = fail_jobs_run.slurm_step(params, which=lambda name: "/usr/bin/squeue")
    assert isinstance(step, fail_jobs_run.SlurmStep) and reason is None
    assert fail_jobs_run.slurm_step(dict(params, cancel_slurm_jobs="false")) == (
        None, "cancel_slurm_jobs is false")


class FakeOutcome(object):
    def __init__(self, values):
        self.values = values

    def to_dict(self):
        return dict(self.values)


def test_slurm_step_builds_a_request_for_the_batch_and_drops_the_diff():
    requests = []

    def cancel(request):
        requests.append(request)
        return FakeOutcome({"failed": False, "cancelled": [], "diff": {"before": "x"}})

    step = fail_jobs_run.SlurmStep(fail_jobs_run.with_defaults(
        {"slurm_user": "crunch", "slurm_timeout": 7}), cancel=cancel)
    outcome = step([JOB % 1, JOB % 2], True)
    assert outcome == {"failed": False, "cancelled": []}
    (request,) = requests
    assert tuple(request.names) == (JOB % 1, JOB % 2)
    assert request.check_mode is True
    assert request.user == "crunch" and request.timeout == 7
    assert request.name_pattern == r"^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$"


def test_slurm_step_failure_stops_the_batch_unless_ignored():
    def cancel(request):
        return FakeOutcome({"failed": True, "msg": "squeue failed: Unable to contact slurm "
                                                   "controller", "cancelled": []})

    step = fail_jobs_run.SlurmStep(fail_jobs_run.with_defaults({}), cancel=cancel)
    with pytest.raises(RecoveryError) as raised:
        step([JOB % 1], False)
    assert str(raised.value) == (
        "Slurm jobs of 1 job(s) could not be made absent: squeue failed: Unable to contact "
        "slurm controller (nothing of this batch was changed in the database; "
        "slurm_errors=ignore goes on regardless)")

    lenient = fail_jobs_run.SlurmStep(fail_jobs_run.with_defaults({"slurm_errors": "ignore"}),
                                      cancel=cancel)
    assert lenient([JOB % 1], False)["failed"] is False
    assert lenient.warnings == [
        "Slurm jobs of 1 job(s) could not be made absent: squeue failed: Unable to contact "
        "slurm controller (ignored: slurm_errors=ignore)"]


def test_prepare_checks_everything_before_connecting():
    settings, options, slurm, skipped, db_wait = fail_jobs_run.prepare(
        dict(NO_FILES, before="@1448378837", retry=True, batch_size=20, db_wait=3))
    assert settings.dbname == "arvados_test"
    assert options.threshold.to_iso8601() == "2015-11-24T15:27:17Z"
    assert options.retry is True and options.batch_size == 20
    assert slurm is None and skipped == "cancel_slurm_jobs is false"
    assert db_wait == 3


def test_run_fail_jobs_refuses_a_bad_before_without_connecting():
    def connect_db(*args, **kwargs):
        raise AssertionError("must not connect")

    with pytest.raises(RecoveryError, match="accepted forms: 'reboot'"):
        fail_jobs_run.run_fail_jobs(dict(NO_FILES, before="soonish"), connect_db=connect_db)


@pytest.mark.parametrize("name", ["retry", "revoke_tokens"])
def test_options_file_strings_for_booleans_are_read_or_refused(name):
    try:
        _settings, options, _slurm, _slurm_skipped, _db_wait = fail_jobs_run.prepare(
            dict(NO_FILES, **{name: "false"}))
    except RecoveryError:
        return  # refusing the value is as good as reading it right
    assert getattr(options, name) is False


def test_a_mistyped_option_in_the_options_file_is_a_one_line_reason(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text(json.dumps(dict(NO_FILES, lock_wait="ten")))
    stderr = io.StringIO()
    reporter = fail_jobs_cli.Reporter(stream=stderr, journald=False)
    assert fail_jobs_cli.main(["--options-file", str(options_file)], stdout=io.StringIO(),
                              reporter=reporter) == 1
    assert "lock_wait" in stderr.getvalue()


# -- the command: flags and options file --------------------------------------------------

def parse(argv):
    return fail_jobs_cli.gather_params(fail_jobs_cli.build_parser().parse_args(argv))


def test_flags_become_the_modules_options():
    params = parse(["--before", "reboot", "--retry", "--no-revoke-tokens", "--uuid", JOB % 1,
                    "--uuids", JOB % 2, "--batch-size", "50", "--lock-wait", "1.5",
                    "--config", "/etc/arvados/config.yml", "--cluster-id", "zzzzz",
                    "--cancel-slurm-jobs", "false", "--slurm-errors", "ignore",
                    "--db-port", "5433"])
    assert params == {
        "before": "reboot", "retry": True, "revoke_tokens": False,
        "uuids": [JOB % 1, JOB % 2], "batch_size": 50, "lock_wait": 1.5,
        "config_file": "/etc/arvados/config.yml", "cluster_id": "zzzzz",
        "cancel_slurm_jobs": "false", "slurm_errors": "ignore", "db_port": 5433,
    }


def test_no_flags_give_no_options():
    assert parse([]) == {}


@pytest.mark.parametrize("argv", [
    ["--db-password", "x"], ["--batch-size", "many"], ["--slurm-errors", "sometimes"],
    ["--no-such-flag"],
])
def test_flags_it_cannot_understand_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as raised:
        parse(argv)
    assert raised.value.code == 2


def test_flags_win_over_the_options_file(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("before: reboot\nbatch_size: 10\ndb_password: 'pw: with colon'\n"
                            "retry: true\n")
    params = parse(["--options-file", str(options_file), "--batch-size", "20", "--no-retry"])
    assert params == {"before": "reboot", "batch_size": 20, "db_password": "pw: with colon",
                      "retry": False}


def test_options_file_unknown_option(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("before: reboot\ndb_pasword: hunter2-secret\nzeta: 1\n")
    with pytest.raises(RecoveryError) as raised:
        fail_jobs_cli.read_options_file(str(options_file))
    assert str(raised.value) == "options file %s has unknown option(s): db_pasword, zeta" % options_file
    assert "hunter2" not in str(raised.value)


def test_options_file_invalid_yaml_never_quotes_the_password(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text('db_password: "hunter2-secret\nbefore: [reboot\n')
    with pytest.raises(RecoveryError) as raised:
        fail_jobs_cli.read_options_file(str(options_file))
    assert str(raised.value) == "options file %s is not valid YAML" % options_file


@pytest.mark.parametrize("text, expected", [
    ("", {}), ("# nothing\n", {}), ('{"retry": true}', {"retry": True}),
])
def test_options_file_empty_or_json(tmp_path, text, expected):
    options_file = tmp_path / "options.yml"
    options_file.write_text(text)
    assert fail_jobs_cli.read_options_file(str(options_file)) == expected


def test_options_file_must_be_a_mapping_and_readable(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("- retry\n- before\n")
    with pytest.raises(RecoveryError, match="must hold a mapping of option names to values"):
        fail_jobs_cli.read_options_file(str(options_file))
    with pytest.raises(RecoveryError, match="cannot read options file .*missing.yml: No such file"):
        fail_jobs_cli.read_options_file(str(tmp_path / "missing.yml"))


# -- the command: output ------------------------------------------------------------------

def result(**values):
    base = {"threshold": "2026-01-01T00:00:00Z", "threshold_source": "argument",
            "failed_jobs": [JOB % 1, JOB % 2], "revoked_tokens": ["zzzzz-gj3su-000000000000001"],
            "exempt": {"count": 1, "uuids": [JOB % 3]}, "no_started_at": [], "skipped_jobs": [],
            "slurm": {}, "changed": True,
            "counts": {"jobs": 2, "skipped_jobs": 0, "revoked_tokens": 1, "logs": 2}}
    base.update(values)
    return base


def test_summary_of_a_run():
    slurm = {"cancelled": [{"name": JOB % 1}], "squeue_calls": 2, "scancel_calls": 1}
    assert fail_jobs_cli.summary_lines(result(slurm=slurm, skipped_jobs=[JOB % 4],
                                              counts={"jobs": 2, "skipped_jobs": 1,
                                                      "revoked_tokens": 1, "logs": 2}), False) == [
        "threshold: 2026-01-01T00:00:00Z (argument)",
        "jobs failed: 2",
        "tokens revoked: 1",
        "exempt (started after the threshold): 1",
        "skipped (changed under us): 1",
        "slurm jobs cancelled: 1 (squeue 2, scancel 1 calls)",
        "changed: yes",
    ]


def test_summary_of_a_check_mode_retry_without_threshold():
    values = result(threshold=None, threshold_source=None, changed=False,
                    no_started_at=[JOB % i for i in range(7)],
                    slurm={"skipped": "cancel_slurm_jobs is false"})
    values["requeued_jobs"] = values.pop("failed_jobs")
    assert fail_jobs_cli.summary_lines(values, True) == [
        "threshold: none (every Running job qualifies)",
        "jobs would be requeued: 2",
        "tokens would be revoked: 1",
        "exempt (started after the threshold): 1",
        "Running without started_at: 7 (%s)" % ", ".join(JOB % i for i in range(5)),
        "slurm: not asked (cancel_slurm_jobs is false)",
        "changed: no",
    ]


def test_main_prints_the_summary_and_exits_0(monkeypatch):
    seen = {}

    def fake_run(params, check_mode, diff, progress, **kwargs):
        seen.update(params=params, check_mode=check_mode, diff=diff)
        return dict(result(changed=False, failed_jobs=[]), warnings=["slurm was slow"])

    monkeypatch.setattr(fail_jobs_cli, "run_fail_jobs", fake_run)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = fail_jobs_cli.main(["--check", "--retry"], stdout=stdout,
                              reporter=fail_jobs_cli.Reporter(stream=stderr, journald=False))
    assert code == 0
    assert seen == {"params": {"retry": True}, "check_mode": True, "diff": False}
    assert stdout.getvalue().splitlines()[-1] == "changed: no"
    assert stderr.getvalue() == "arvados-fail-jobs: slurm was slow\n"


def test_main_json_output(monkeypatch):
    monkeypatch.setattr(fail_jobs_cli, "run_fail_jobs", lambda *a, **k: result())
    stdout = io.StringIO()
    assert fail_jobs_cli.main(["--json"], stdout=stdout,
                              reporter=fail_jobs_cli.Reporter(stream=io.StringIO())) == 0
    assert json.loads(stdout.getvalue()) == result()


def test_main_reports_a_failure_in_one_line_with_journald_priority(monkeypatch):
    def fail(*args, **kwargs):
        raise RecoveryError("cannot connect\nto the database")

    monkeypatch.setattr(fail_jobs_cli, "run_fail_jobs", fail)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = fail_jobs_cli.main([], stdout=stdout,
                              reporter=fail_jobs_cli.Reporter(stream=stderr, journald=True))
    assert code == 1
    assert stdout.getvalue() == ""
    assert stderr.getvalue() == "<3>cannot connect to the database\n"


def test_progress_is_throttled_and_quiet_silences_it():
    clock = FakeClock()
    stream = io.StringIO()
    reporter = fail_jobs_cli.Reporter(stream=stream, journald=False, clock=clock)
    progress = CleanupResult(CleanupOptions())
    progress.batches = 3
    progress.done_jobs.extend([JOB % 1] * 150)
    reporter.progress(progress)
    assert stream.getvalue() == ""
    clock.now += 5
    reporter.progress(progress)
    reporter.progress(progress)
    assert stream.getvalue() == \
        "arvados-fail-jobs: 3 batch(es): 150 job(s) done, 0 token(s) revoked so far\n"
    quiet = fail_jobs_cli.Reporter(stream=io.StringIO(), journald=False, quiet=True, clock=clock)
    clock.now += 10
    quiet.progress(progress)
    quiet.say("error", "still said")
    assert quiet.stream.getvalue() == "arvados-fail-jobs: still said\n"


def test_every_module_option_has_a_flag_except_the_password():
    parser = fail_jobs_cli.build_parser()
    flags = {option for action in parser._actions for option in action.option_strings}
    for name in fail_jobs_run.ALL_OPTIONS:
        flag = "--" + name.replace("_", "-")
        assert (flag in flags) is (name != "db_password"), name


# -- token windows ------------------------------------------------------------------------

def _at(minute):
    return datetime(2026, 1, 1) + timedelta(minutes=minute)


def test_a_token_belongs_to_a_window_of_its_own_user_only():
    windows = fail_jobs.JobWindows([(1, _at(0), _at(10)), (2, _at(20), _at(30))])
    assert windows.contain(1, _at(5)) and windows.contain(2, _at(25))
    assert not windows.contain(2, _at(5)) and not windows.contain(1, _at(25))
    assert not windows.contain(3, _at(5))


def test_window_edges_are_inside_and_gaps_between_windows_outside():
    windows = fail_jobs.JobWindows([(1, _at(0), _at(10)), (1, _at(20), _at(30))])
    assert windows.contain(1, _at(0)) and windows.contain(1, _at(10))
    assert windows.contain(1, _at(20)) and windows.contain(1, _at(30))
    assert not windows.contain(1, _at(15))
    assert not windows.contain(1, _at(-1)) and not windows.contain(1, _at(31))


def test_a_long_window_covers_the_short_ones_opening_inside_it():
    # Sorted by start, the short window (5, 6) comes last; an instant after it is still
    # inside the long window that opened before it.
    windows = fail_jobs.JobWindows([(1, _at(0), _at(100)), (1, _at(5), _at(6))])
    assert windows.contain(1, _at(50))
    assert not windows.contain(1, _at(101))


def test_bounds_span_each_users_windows():
    windows = fail_jobs.JobWindows([(2, _at(20), _at(30)), (1, _at(5), _at(6)), (1, _at(0), _at(3))])
    assert windows.bounds() == {"user_ids": [1, 2], "lo": [_at(0), _at(20)], "hi": [_at(6), _at(30)]}
    assert len(windows) == 2
    assert len(fail_jobs.JobWindows([])) == 0


def test_windows_agree_with_a_plain_scan_of_every_window():
    rng = random.Random(7)
    spans = []
    for _index in range(200):
        start = rng.randint(0, 1000)
        spans.append((rng.randint(1, 5), _at(start), _at(start + rng.randint(0, 60))))
    windows = fail_jobs.JobWindows(spans)
    for user in range(1, 6):
        for minute in range(-5, 1070, 3):
            expected = any(u == user and lo <= _at(minute) <= hi for u, lo, hi in spans)
            assert windows.contain(user, _at(minute)) is expected, (user, minute)


def test_with_last_marks_the_final_item_only():
    assert list(fail_jobs.with_last([])) == []
    assert list(fail_jobs.with_last(["a"])) == [("a", True)]
    assert list(fail_jobs.with_last(iter("abc"))) == [("a", False), ("b", False), ("c", True)]


def test_bulk_settings_raise_and_the_last_batch_keeps_the_servers_gin_limit():
    server = {"gin_pending_list_limit": 4096, "work_mem": 4096}
    assert fail_jobs.bulk_settings(server, last_batch=False) == {
        "gin_pending_list_limit": "262144kB", "work_mem": "65536kB"}
    assert fail_jobs.bulk_settings(server, last_batch=True) == {"work_mem": "65536kB"}


def test_bulk_settings_never_lower_and_skip_what_the_server_lacks():
    generous = {"gin_pending_list_limit": 10 ** 7, "work_mem": 10 ** 7}
    assert fail_jobs.bulk_settings(generous, last_batch=False) == {}
    assert fail_jobs.bulk_settings({"work_mem": 4096}, last_batch=False) == {"work_mem": "65536kB"}


class SettingsConnection(object):
    """Answers the pg_settings query with `server_kb` and records every statement."""

    def __init__(self, server_kb):
        self.server_kb = server_kb
        self.statements = []

    def execute(self, query, params=None):
        self.statements.append((query, params))
        rows = list(self.server_kb.items()) if "pg_settings" in query else []
        return _Rows(rows)

    def commit(self):
        self.statements.append(("COMMIT", None))

    def rollback(self):
        self.statements.append(("ROLLBACK", None))


def test_settings_are_read_once_and_set_for_each_batch_transaction_only():
    conn = SettingsConnection({"gin_pending_list_limit": 4096, "work_mem": 4096})
    cleaner = fail_jobs.JobCleaner(conn, None, CleanupOptions())

    cleaner._raise_bulk_settings(last=False)  # pylint: disable=protected-access
    cleaner._raise_bulk_settings(last=True)  # pylint: disable=protected-access

    reads = [q for q, _p in conn.statements if "pg_settings" in q]
    sets = [p for q, p in conn.statements if "set_config" in q]
    assert len(reads) == 1
    assert all("true)" in q for q, _p in conn.statements if "set_config" in q)  # SET LOCAL
    assert sets == [
        {"names": ["gin_pending_list_limit", "work_mem"], "values": ["262144kB", "65536kB"]},
        {"names": ["work_mem"], "values": ["65536kB"]}]


def test_nothing_is_set_when_the_server_gives_more():
    conn = SettingsConnection({"gin_pending_list_limit": 10 ** 7, "work_mem": 10 ** 7})
    cleaner = fail_jobs.JobCleaner(conn, None, CleanupOptions())
    cleaner._raise_bulk_settings(last=False)  # pylint: disable=protected-access
    assert [q for q, _p in conn.statements if "set_config" in q] == []


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_batch_raises_the_settings_unless_it_only_reads(check_mode):
    conn = SettingsConnection({"gin_pending_list_limit": 4096, "work_mem": 4096})
    cleaner = fail_jobs.JobCleaner(conn, None, CleanupOptions(check_mode=check_mode))
    cleaner._write_batch = lambda uuids: (uuids, [], [], [])  # pylint: disable=protected-access

    cleaner._clean_batch([JOB % 1], last=False)  # pylint: disable=protected-access

    raised = [q for q, _p in conn.statements if "set_config" in q]
    assert len(raised) == (0 if check_mode else 1)
    assert conn.statements[-1][0] == ("ROLLBACK" if check_mode else "COMMIT")
