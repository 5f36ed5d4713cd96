# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""_cleanup/run.py: the option table checked and completed, the Slurm step, prepare(),
one message style for bad numbers, and what a database error says was done."""

from __future__ import annotations

import io
import json
import os
import types

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import cli as cleanup_cli
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import engine as cleanup_engine
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import options as cleanup_options
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import CleanupOptions
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError, RecoveryError
from tests.unit.plugins.module_utils.slurm_fakes import fake_client_directory

JOB = "zzzzz-8i9sb-%015d"
NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "cancel_slurm_jobs": False}


# -- options of a run ---------------------------------------------------------------------


def test_unknown_options_are_refused():
    with pytest.raises(ConfigError, match="unknown option.s.: bogus, colour"):
        cleanup_run.with_defaults({"bogus": 1, "colour": "red", "retry": True})


def test_with_defaults_fills_every_option():
    full = cleanup_run.with_defaults({"retry": True, "before": None})
    assert set(full) == set(cleanup_run.ALL_OPTIONS)
    assert full["retry"] is True
    assert full["revoke_tokens"] is True and full["batch_size"] is None
    assert full["cancel_slurm_jobs"] == "auto"


@pytest.mark.parametrize(
    "value, mode",
    [
        ("auto", "auto"),
        (" AUTO ", "auto"),
        (True, True),
        (False, False),
        ("yes", True),
        ("on", True),
        ("1", True),
        ("no", False),
        ("off", False),
        ("0", False),
        ("False", False),
    ],
)
def test_cancel_slurm_mode_words(value, mode):
    assert cleanup_run.cancel_slurm_mode(value) == mode


def test_cancel_slurm_mode_refuses_other_words():
    with pytest.raises(ConfigError, match="cancel_slurm_jobs must be auto, true or false, got 'sometimes'"):
        cleanup_run.cancel_slurm_mode("sometimes")


@pytest.fixture
def slurm_clients_on_path(tmp_path, monkeypatch):
    """squeue and scancel on PATH, as on a Slurm host: the tests fake the cancel itself, and
    a host without Slurm's clients (the version stage's Debian 13 rootfs) runs them too."""
    monkeypatch.setenv("PATH", "%s:%s" % (fake_client_directory(tmp_path), os.environ["PATH"]))


@pytest.mark.usefixtures("slurm_clients_on_path")
def test_slurm_step_auto_without_squeue_is_refused_saying_what_to_set():
    # Issue 34: it used to skip Slurm and fail the jobs, their Slurm jobs running on.
    params = cleanup_run.with_defaults({})
    with pytest.raises(ConfigError) as refused:
        cleanup_run.slurm_step(params, which=lambda name: None)
    assert str(refused.value) == cleanup_run.NO_SQUEUE_MESSAGE
    assert str(refused.value).startswith("cancel_slurm_jobs is auto but squeue is not on this host")
    assert "Set cancel_slurm_jobs to false when this site runs no Slurm" in str(refused.value)
    step, reason = cleanup_run.slurm_step(params, which=lambda name: "/usr/bin/squeue")
    assert isinstance(step, cleanup_run.SlurmStep) and reason is None
    assert cleanup_run.slurm_step(dict(params, cancel_slurm_jobs="false")) == (None, "cancel_slurm_jobs is false")


class FakeOutcome:
    def __init__(self, values):
        self.values = values

    def to_dict(self):
        return dict(self.values)


@pytest.mark.usefixtures("slurm_clients_on_path")
def test_slurm_step_builds_a_request_for_the_batch_and_drops_the_diff():
    requests = []

    def cancel(request):
        requests.append(request)
        return FakeOutcome({"failed": False, "cancelled": [], "diff": {"before": "x"}})

    step = cleanup_run.SlurmStep(cleanup_run.with_defaults({"slurm_user": "crunch", "slurm_timeout": 7}), cancel=cancel)
    outcome = step([JOB % 1, JOB % 2], True)
    assert outcome == {"failed": False, "cancelled": []}
    (request,) = requests
    assert tuple(request.names) == (JOB % 1, JOB % 2)
    assert request.check_mode is True
    assert request.user == "crunch" and request.timeout == 7
    assert request.name_pattern == r"^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$"


@pytest.mark.usefixtures("slurm_clients_on_path")
def test_slurm_step_failure_stops_the_batch_unless_ignored():
    def cancel(request):
        return FakeOutcome(
            {"failed": True, "msg": "squeue failed: Unable to contact slurm controller", "cancelled": []}
        )

    step = cleanup_run.SlurmStep(cleanup_run.with_defaults({}), cancel=cancel)
    with pytest.raises(RecoveryError) as raised:
        step([JOB % 1], False)
    assert str(raised.value) == (
        "Slurm jobs of 1 job(s) could not be made absent: squeue failed: Unable to contact "
        "slurm controller (nothing of this batch was changed in the database; "
        "slurm_errors=ignore goes on regardless)"
    )

    lenient = cleanup_run.SlurmStep(cleanup_run.with_defaults({"slurm_errors": "ignore"}), cancel=cancel)
    assert lenient([JOB % 1], False)["failed"] is False
    assert lenient.warnings == [
        "Slurm jobs of 1 job(s) could not be made absent: squeue failed: Unable to contact "
        "slurm controller (ignored: slurm_errors=ignore)"
    ]


def test_prepare_checks_everything_before_connecting():
    settings, options, slurm, skipped, db_wait, audit_logs = cleanup_run.prepare(
        dict(NO_FILES, before="@1448378837", retry=True, batch_size=20, db_wait=3)
    )
    assert settings.dbname == "arvados_test"
    assert options.before.to_iso8601() == "2015-11-24T15:27:17Z"
    assert options.retry is True and options.batch_size == 20
    assert slurm is None and skipped == "cancel_slurm_jobs is false"
    assert db_wait == 3
    # no config.yml read: Arvados' default, audit rows written
    assert audit_logs.written is True and options.audit_logs is True
    assert audit_logs.source.startswith("Arvados' default (no config.yml read")


def test_run_fail_jobs_refuses_a_bad_before_without_connecting():
    def connect_db(*args, **kwargs):
        raise AssertionError("must not connect")

    with pytest.raises(RecoveryError, match="accepted forms: 'reboot'"):
        cleanup_run.run_fail_jobs(dict(NO_FILES, before="soonish"), connect_db=connect_db)


@pytest.mark.parametrize("name", ["retry", "revoke_tokens"])
def test_options_file_strings_for_booleans_are_read_or_refused(name):
    try:
        options = cleanup_run.prepare(dict(NO_FILES, **{name: "false"})).options
    except RecoveryError:
        return  # refusing the value is as good as reading it right
    assert getattr(options, name) is False


def test_a_mistyped_option_in_the_options_file_is_a_one_line_reason(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text(json.dumps(dict(NO_FILES, lock_wait="ten")))
    stderr = io.StringIO()
    reporter = cleanup_cli.Reporter(stream=stderr, journald=False)
    assert cleanup_cli.main(["--options-file", str(options_file)], stdout=io.StringIO(), reporter=reporter) == 1
    assert "lock_wait" in stderr.getvalue()


# -- numbers: nan, inf and negatives, one message style for module and command ------------


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("lock_wait", float("nan"), "option lock_wait must be a finite number, got nan"),
        ("lock_wait", "inf", "option lock_wait must be a finite number, got inf"),
        ("lock_wait", -1, "option lock_wait must be at least 0, got -1.0"),
        ("db_wait", "nan", "option db_wait must be a finite number, got nan"),
        ("db_wait", float("inf"), "option db_wait must be a finite number, got inf"),
        ("db_wait", -0.5, "option db_wait must be at least 0, got -0.5"),
        ("slurm_timeout", "-inf", "option slurm_timeout must be a finite number, got -inf"),
        ("slurm_timeout", 0, "option slurm_timeout must be above 0, got 0.0"),
        ("slurm_max_scancel_per_second", "nan", "option slurm_max_scancel_per_second must be a finite number, got nan"),
        ("batch_size", 0, "option batch_size must be at least 1, got 0"),
        ("slurm_max_concurrent_scancel", -2, "option slurm_max_concurrent_scancel must be at least 1, got -2"),
    ],
)
def test_numbers_out_of_range_are_refused_with_one_message_style(name, value, message):
    with pytest.raises(ConfigError) as raised:
        cleanup_run.with_defaults({name: value})
    assert str(raised.value) == message


@pytest.mark.parametrize("value", [2.5, float("nan"), float("inf"), "1e400"])
def test_an_int_option_refuses_what_is_not_a_whole_number(value):
    with pytest.raises(ConfigError, match="option batch_size must be of type int"):
        cleanup_run.with_defaults({"batch_size": value})


def test_zero_waits_are_allowed():
    full = cleanup_run.with_defaults({"lock_wait": 0, "db_wait": "0"})
    assert (full["lock_wait"], full["db_wait"]) == (0.0, 0.0)


def test_the_engine_refuses_nan_and_inf_waits_too():
    for value in (float("nan"), float("inf")):
        with pytest.raises(RecoveryError, match="lock_wait must be a finite number"):
            CleanupOptions(lock_wait=value)


def test_nan_from_the_command_line_is_refused_before_the_database_is_opened():
    stderr = io.StringIO()
    reporter = cleanup_cli.Reporter(stream=stderr, journald=False)
    assert (
        cleanup_cli.main(
            ["--config", "", "--db-name", "x", "--db-wait", "nan"], stdout=io.StringIO(), reporter=reporter
        )
        == 1
    )
    assert stderr.getvalue() == "arvados-fail-jobs: option db_wait must be a finite number, got nan\n"


# -- database errors: what failed, and what was done by then -------------------------------


class FakeDatabaseError(Exception):
    def __init__(self, text, sqlstate=None):
        super().__init__(text)
        self.sqlstate = sqlstate


def test_a_missing_privilege_before_any_batch_names_the_user_and_the_step():
    cleaner = cleanup_engine.JobCleaner(None, None, CleanupOptions())
    cleaner.step = "taking the cleanup lock (pg_try_advisory_lock)"
    error = FakeDatabaseError("permission denied for function pg_try_advisory_lock", "42501")
    assert cleanup_run.database_error_message(error, cleaner, "arvados", None) == (
        "the database user arvados lacks a privilege the cleanup needs, while taking the "
        "cleanup lock (pg_try_advisory_lock), nothing was changed: permission denied for "
        "function pg_try_advisory_lock"
    )


def test_an_error_in_a_batch_says_it_was_rolled_back_and_after_batches_what_was_kept():
    cleaner = cleanup_engine.JobCleaner(None, None, CleanupOptions())
    cleaner._batch_under_way = True
    assert cleanup_run.database_error_message(
        FakeDatabaseError("deadlock detected pw", "40P01"), cleaner, "arvados", "pw"
    ) == ("database error, the batch under way was rolled back (a rerun finishes the work): deadlock detected ********")
    cleaner._batch_under_way = False
    cleaner.result.batches = 3
    cleaner.step = "listing the Running jobs"
    assert cleanup_run.database_error_message(
        FakeDatabaseError("server closed the connection"), cleaner, "arvados", None
    ) == (
        "database error, while listing the Running jobs, after 3 batch(es) committed whole "
        "(a rerun finishes the work): server closed the connection"
    )


# -- issue 26: every input checked against what its consumer accepts ----------------------


@pytest.mark.parametrize(
    "given, message",
    [
        ({"row_lock_wait": 1e308}, "option row_lock_wait must be at most 2147483, got 1e+308"),
        ({"row_lock_wait": 3000000}, "option row_lock_wait must be at most 2147483, got 3000000.0"),
        ({"batch_pause": 1e300}, "option batch_pause must be at most 86400, got 1e+300"),
        ({"batch_size": 10**23}, "option batch_size must be at most 100000, got %d" % 10**23),
        ({"batch_size": 1e23}, "option batch_size must be at most 100000, got %d" % int(1e23)),
        ({"lock_wait": 86400.5}, "option lock_wait must be at most 86400, got 86400.5"),
        ({"db_wait": "1e9"}, "option db_wait must be at most 86400, got 1000000000.0"),
        ({"slurm_timeout": 1e12}, "option slurm_timeout must be at most 86400, got 1000000000000.0"),
        (
            {"slurm_max_scancel_per_second": 1001},
            "option slurm_max_scancel_per_second must be at most 1000, got 1001.0",
        ),
        ({"slurm_max_concurrent_scancel": 65}, "option slurm_max_concurrent_scancel must be at most 64, got 65"),
        ({"db_port": 70000}, "option db_port must be at most 65535, got 70000"),
        ({"db_connect_timeout": 10**6}, "option db_connect_timeout must be at most 86400, got 1000000"),
    ],
)
def test_numbers_above_their_bound_are_refused_by_name_before_connecting(given, message):
    with pytest.raises(ConfigError) as raised:
        cleanup_run.run_fail_jobs(dict(NO_FILES, **given), connect_db=refuse_to_connect)
    assert str(raised.value) == message


def refuse_to_connect(*_args, **_kwargs):
    raise AssertionError("connected with a bad option")


@pytest.mark.parametrize(
    "name, value", [("row_lock_wait", 2147483), ("batch_size", 100000), ("batch_pause", 86400), ("db_wait", 0)]
)
def test_numbers_at_their_bound_are_taken(name, value):
    assert cleanup_run.with_defaults(dict(NO_FILES, **{name: value}))[name] == value


@pytest.mark.parametrize("name", ["log_message", "cluster_id", "before", "db_host", "db_name", "slurm_user"])
def test_a_nul_in_any_text_option_is_refused_by_name_with_the_value_escaped(name):
    with pytest.raises(ConfigError) as raised:
        cleanup_run.run_fail_jobs(dict(NO_FILES, **{name: "a\x00b"}), connect_db=refuse_to_connect)
    assert str(raised.value) == (
        "option %s must not contain a NUL character (\\x00), which PostgreSQL text cannot hold, got 'a\\x00b'" % name
    )


def test_a_nul_in_a_uuid_list_or_the_password_is_refused_and_the_password_not_shown():
    with pytest.raises(ConfigError, match="option uuids must not contain a NUL"):
        cleanup_run.prepare(dict(NO_FILES, uuids=[JOB % 1, "x\x00"]))
    with pytest.raises(ConfigError) as raised:
        cleanup_run.prepare(dict(NO_FILES, db_password="hunter2\x00"))
    assert (
        str(raised.value)
        == "option db_password must not contain a NUL character (\\x00), which PostgreSQL text cannot hold"
    )


def test_a_lone_surrogate_is_refused():
    with pytest.raises(ConfigError, match="option log_message must not contain a lone surrogate"):
        cleanup_run.prepare(dict(NO_FILES, log_message="a\ud800"))


def test_a_long_log_message_is_refused_with_its_size_in_bytes():
    with pytest.raises(RecoveryError) as raised:
        cleanup_run.run_fail_jobs(dict(NO_FILES, log_message="x" * 3000), connect_db=refuse_to_connect)
    assert str(raised.value) == (
        "option log_message is 3000 bytes of UTF-8, more than the 2500 the logs' summary index takes"
    )


def test_the_bound_counts_bytes_and_with_retry_the_note_added():
    cleanup_run.prepare(dict(NO_FILES, log_message="x" * cleanup_options.MAX_SUMMARY_BYTES))
    with pytest.raises(RecoveryError, match="option log_message is 2502 bytes"):
        cleanup_run.prepare(dict(NO_FILES, log_message="é" * 1251))
    note = len(cleanup_options.UNRUNNABLE_NOTE.encode("utf-8"))
    fits = "x" * (cleanup_options.MAX_SUMMARY_BYTES - note)
    cleanup_run.prepare(dict(NO_FILES, log_message=fits, retry=True))
    with pytest.raises(RecoveryError) as raised:
        cleanup_run.prepare(dict(NO_FILES, log_message=fits + "x", retry=True))
    assert str(raised.value) == (
        "option log_message is %d bytes of UTF-8, more than the %d the logs' summary index takes with retry "
        "(which adds a %d-byte note for a job failed instead)" % (len(fits) + 1, len(fits), note)
    )


def test_a_log_message_that_reads_as_a_dispatch_attempt_is_refused():
    """The token rule tells a cleanup's `dispatch` row from crunch-dispatch.rb's row of an
    attempt ("dispatching to <hosts>") by its summary: a cleanup must not write the latter."""
    with pytest.raises(RecoveryError) as raised:
        cleanup_run.run_fail_jobs(dict(NO_FILES, log_message="dispatching to nowhere"), connect_db=refuse_to_connect)
    assert str(raised.value) == (
        "option log_message must not start with 'dispatching to ': crunch-dispatch.rb's rows of a dispatch attempt do"
    )
    cleanup_run.prepare(dict(NO_FILES, log_message="Dispatching to nowhere was stopped"))


def test_the_default_messages_fit():
    for retry in (False, True):
        cleanup_options.check_summary(
            cleanup_options.DEFAULT_RETRY_MESSAGE if retry else cleanup_options.DEFAULT_FAIL_MESSAGE, retry
        )


def test_the_command_refuses_the_trial_inputs_before_connecting(tmp_path):
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps(dict(NO_FILES, log_message="a\u0000b")))
    stderr = io.StringIO()
    code = cleanup_cli.main(["--options-file", str(options_file)], reporter=cleanup_cli.Reporter(stream=stderr))
    assert code == 1
    assert stderr.getvalue() == (
        "arvados-fail-jobs: option log_message must not contain a NUL character (\\x00), which PostgreSQL text "
        "cannot hold, got 'a\\x00b'\n"
    )
    for flags, message in (
        (["--row-lock-wait", "1e308"], "option row_lock_wait must be at most 2147483, got 1e+308"),
        (["--batch-pause", "1e300"], "option batch_pause must be at most 86400, got 1e+300"),
    ):
        options_file.write_text(json.dumps(NO_FILES))
        stderr = io.StringIO()
        code = cleanup_cli.main(
            ["--options-file", str(options_file)] + flags, reporter=cleanup_cli.Reporter(stream=stderr)
        )
        assert code == 1
        assert stderr.getvalue() == "arvados-fail-jobs: %s\n" % message
    # A flag's text is converted as the file's: 1e23 is a whole number, past the bound.
    stderr = io.StringIO()
    code = cleanup_cli.main(["--batch-size", "1e23"], reporter=cleanup_cli.Reporter(stream=stderr))
    assert code == 1
    assert stderr.getvalue() == "arvados-fail-jobs: option batch_size must be at most 100000, got %d\n" % int(1e23)


def test_a_whole_number_written_with_an_exponent_is_a_whole_number_and_bounded():
    # YAML reads `batch_size: 1e23` as the text '1e23'.
    assert cleanup_run.with_defaults(dict(NO_FILES, batch_size="1e3"))["batch_size"] == 1000
    with pytest.raises(ConfigError, match="option batch_size must be at most 100000, got 99999999999999991611392"):
        cleanup_run.with_defaults(dict(NO_FILES, batch_size="1e23"))


def test_a_value_of_the_wrong_type_is_shown_unless_it_is_the_password():
    with pytest.raises(ConfigError) as raised:
        cleanup_run.with_defaults(dict(NO_FILES, batch_size="many\n"))
    assert str(raised.value) == "option batch_size must be of type int, got 'many\\n'"
    with pytest.raises(ConfigError) as raised:
        cleanup_run.with_defaults(dict(NO_FILES, db_password=["hunter2"]))
    assert str(raised.value) == "option db_password must be of type str"


def test_held_by_other_users_names_the_jobs_of_the_batch_whose_slurm_jobs_another_user_owns():
    from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.engine import held_by_other_users

    job = "zzzzz-8i9sb-%015d"
    slurm = {
        "skipped_other_user": [
            {"name": job % 2, "job_id": "12", "state": "RUNNING", "user": "root"},
            # Not of this batch (a name the listing matched for another reason): not held here.
            {"name": job % 9, "job_id": "19", "state": "RUNNING", "user": "root"},
            {"name": job % 1, "job_id": "11", "state": "PENDING", "user": "alice"},
        ],
        "cancelled": [{"name": job % 3, "job_id": "13"}],
    }
    assert held_by_other_users([job % 1, job % 2, job % 3], slurm) == [
        {"uuid": job % 1, "job_id": "11", "user": "alice", "state": "PENDING"},
        {"uuid": job % 2, "job_id": "12", "user": "root", "state": "RUNNING"},
    ]
    assert held_by_other_users([job % 1], {"cancelled": []}) == []


def test_the_message_of_held_jobs_names_the_option_its_value_the_users_and_the_slurm_jobs():
    job = "zzzzz-8i9sb-%015d"
    held = [
        {"uuid": job % 1, "job_id": "11", "user": "root", "state": "RUNNING"},
        {"uuid": job % 2, "job_id": "12", "user": "alice", "state": "PENDING"},
    ]
    assert cleanup_run.held_message(held, "crunch") == (
        "2 job(s) left Running, not failed or requeued: Slurm jobs of their name are queued under user(s) "
        "alice, root, not slurm_user=crunch, and this run cancels only that user's: "
        "%s (Slurm job 11 of user root, RUNNING), %s (Slurm job 12 of user alice, PENDING). Set slurm_user "
        "to the user that owns them (or leave it unset, as root), or cancel them, and run again" % (job % 1, job % 2)
    )
    assert cleanup_run.held_message(held[:1], "crunch", check_mode=True).startswith("1 job(s) would be left Running")


@pytest.mark.parametrize("more_than_a_page", [False, True])
def test_the_listings_connection_opens_only_when_asked_for_and_is_closed(monkeypatch, more_than_a_page):
    """A no-op rerun's list fits a page: the run opens one connection. A longer list's
    second connection is closed by the run, after an error too, not left to the collector."""
    opened = []

    class Conn:
        closed = False

        def close(self):
            self.closed = True

    def connect_db(*_args, **_kwargs):
        opened.append(Conn())
        return opened[-1]

    class Cleaner:
        def __init__(self, conn, listing_conn, options, cancel_slurm=None, progress=None, open_listing=None):
            self.listing_conn, self.open_listing = listing_conn, open_listing

        def run(self):
            if more_than_a_page:
                self.listing_conn = self.open_listing()
            raise RecoveryError("squeue timed out")

    class DriverError(Exception):
        pass

    monkeypatch.setattr(cleanup_run, "load_driver", lambda: types.SimpleNamespace(Error=DriverError))
    monkeypatch.setattr(cleanup_run, "JobCleaner", Cleaner)
    with pytest.raises(RecoveryError, match="squeue timed out"):
        cleanup_run.run_fail_jobs(dict(NO_FILES), connect_db=connect_db)
    assert len(opened) == (2 if more_than_a_page else 1)
    assert all(conn.closed for conn in opened)
