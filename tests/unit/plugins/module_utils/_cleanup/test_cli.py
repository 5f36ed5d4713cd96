# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""_cleanup/cli.py, the arvados-fail-jobs command: flags, options file, summary, JSON,
progress and errors."""

from __future__ import annotations

import io
import json
import os
import stat

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import cli as cleanup_cli
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import CleanupOptions
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.result import CleanupResult
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import options_file, version
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock


def read_fail_jobs_options(path):
    """What the command reads from an options file: its table and its name in the messages."""
    return options_file.read_options_file(path, cleanup_cli.ALL_OPTIONS, cleanup_cli.PROGRAM)


JOB = "zzzzz-8i9sb-%015d"
NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "cancel_slurm_jobs": False}


# -- the command: flags and options file --------------------------------------------------


def parse(argv):
    return cleanup_cli.gather_params(cleanup_cli.build_parser().parse_args(argv))


def test_flags_become_the_modules_options():
    params = parse(
        [
            "--before",
            "reboot",
            "--retry",
            "--no-revoke-tokens",
            "--uuid",
            JOB % 1,
            "--uuids",
            JOB % 2,
            "--batch-size",
            "50",
            "--lock-wait",
            "1.5",
            "--config",
            "/etc/arvados/config.yml",
            "--cluster-id",
            "zzzzz",
            "--cancel-slurm-jobs",
            "false",
            "--slurm-errors",
            "ignore",
            "--db-port",
            "5433",
        ]
    )
    # As text, as an options file may give them: the option layer converts both.
    assert params == {
        "before": "reboot",
        "retry": True,
        "revoke_tokens": False,
        "uuids": [JOB % 1, JOB % 2],
        "batch_size": "50",
        "lock_wait": "1.5",
        "config_file": "/etc/arvados/config.yml",
        "cluster_id": "zzzzz",
        "cancel_slurm_jobs": "false",
        "slurm_errors": "ignore",
        "db_port": "5433",
    }
    typed = cleanup_run.with_defaults(params)
    assert (typed["batch_size"], typed["lock_wait"], typed["db_port"]) == (50, 1.5, 5433)
    assert (typed["cancel_slurm_jobs"], typed["slurm_errors"]) == (False, "ignore")


def test_no_flags_give_no_options():
    assert parse([]) == {}


@pytest.mark.parametrize(
    "argv",
    [
        ["--db-password", "x"],
        ["--batch-size"],
        ["--no-such-flag"],
    ],
)
def test_flags_it_cannot_understand_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as raised:
        parse(argv)
    assert raised.value.code == 2


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch-size", "many"], "option batch_size must be of type int, got 'many'"),
        (["--batch-size", "0"], "option batch_size must be at least 1, got 0"),
        (["--lock-wait", "nan"], "option lock_wait must be a finite number, got nan"),
        (["--slurm-errors", "sometimes"], "option slurm_errors must be one of fail, ignore, got 'sometimes'"),
    ],
)
def test_a_bad_flag_value_gets_the_modules_message_and_exit_1(argv, message):
    stderr = io.StringIO()
    code = cleanup_cli.main(argv, reporter=cleanup_cli.Reporter(stream=stderr))
    assert (code, stderr.getvalue()) == (1, "arvados-fail-jobs: %s\n" % message)


def test_flags_win_over_the_options_file(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("before: reboot\nbatch_size: 10\ndb_password: 'pw: with colon'\nretry: true\n")
    options_file.chmod(0o600)
    params = parse(["--options-file", str(options_file), "--batch-size", "20", "--no-retry"])
    assert params == {"before": "reboot", "batch_size": "20", "db_password": "pw: with colon", "retry": False}


def test_options_file_unknown_option(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("before: reboot\ndb_pasword: hunter2-secret\nzeta: 1\n")
    with pytest.raises(RecoveryError) as raised:
        read_fail_jobs_options(str(options_file))
    assert str(raised.value) == (
        "options file %s has 2 key(s) that are no option of arvados-fail-jobs (not shown: it may not be an "
        "options file); options with a close name: db_password" % options_file
    )
    assert "hunter2" not in str(raised.value)
    assert "zeta" not in str(raised.value)


def test_options_file_invalid_yaml_never_quotes_the_password(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text('db_password: "hunter2-secret\nbefore: [reboot\n')
    with pytest.raises(RecoveryError) as raised:
        read_fail_jobs_options(str(options_file))
    assert str(raised.value) == "options file %s is not valid YAML" % options_file


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", {}),
        ("# nothing\n", {}),
        ('{"retry": true}', {"retry": True}),
    ],
)
def test_options_file_empty_or_json(tmp_path, text, expected):
    options_file = tmp_path / "options.yml"
    options_file.write_text(text)
    assert read_fail_jobs_options(str(options_file)) == expected


def test_options_file_must_be_a_mapping_and_readable(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("- retry\n- before\n")
    with pytest.raises(RecoveryError, match="holds a list, not a mapping of option names to values"):
        read_fail_jobs_options(str(options_file))
    with pytest.raises(RecoveryError, match="cannot read options file .*missing.yml: No such file"):
        read_fail_jobs_options(str(tmp_path / "missing.yml"))


# -- the command: output ------------------------------------------------------------------


def result(**values):
    base = {
        "threshold": "2026-01-01T00:00:00Z",
        "threshold_source": "argument",
        "failed_jobs": [JOB % 1, JOB % 2],
        "revoked_tokens": ["zzzzz-gj3su-000000000000001"],
        "exempt": {"count": 1, "uuids": [JOB % 3]},
        "no_started_at": [],
        "skipped_jobs": [],
        "slurm": {},
        "changed": True,
        "counts": {"jobs": 2, "skipped_jobs": 0, "revoked_tokens": 1, "logs": 2},
    }
    base.update(values)
    return base


def test_summary_of_a_run():
    slurm = {"cancelled": [{"name": JOB % 1}], "squeue_calls": 2, "scancel_calls": 1}
    assert cleanup_cli.summary_lines(
        result(
            slurm=slurm, skipped_jobs=[JOB % 4], counts={"jobs": 2, "skipped_jobs": 1, "revoked_tokens": 1, "logs": 2}
        ),
        False,
    ) == [
        "threshold: 2026-01-01T00:00:00Z (argument)",
        "jobs failed: 2",
        "tokens revoked: 1",
        "exempt (started after the threshold): 1",
        "skipped (changed under us): 1",
        "slurm jobs cancelled: 1 (squeue 2, scancel 1 calls)",
        "changed: yes",
    ]


def test_the_summary_says_when_the_update_audit_rows_are_not_written():
    written = {"written": True, "source": "Arvados' default"}
    assert not [line for line in cleanup_cli.summary_lines(result(audit_logs=written), False) if "audit" in line]
    off = {"written": False, "source": "config_file /etc/arvados/config.yml, AuditLogs (MaxAge 0s, MaxDeleteBatch 9)"}
    lines = cleanup_cli.summary_lines(result(audit_logs=off), False)
    assert lines[-2:] == [
        "update audit rows: not written (config_file /etc/arvados/config.yml, AuditLogs (MaxAge 0s, MaxDeleteBatch 9))",
        "changed: yes",
    ]


def test_the_summary_says_the_pace_the_run_chose():
    pace = {
        "mode": "adaptive",
        "batch_size": 180,
        "batch_size_range": [100, 260],
        "pause_seconds": 312.4,
        "jobs_per_second": 190.5,
        "commit_ms": 4.2,
        "backoffs": 1,
    }
    lines = cleanup_cli.summary_lines(result(pace=pace, batches=600), False)
    assert lines[-2:] == [
        "pace: adaptive, batches of 180 (100-260), 190.5 jobs/s, commits 4.2 ms, 312.4 s paused, 1 back-off(s)",
        "changed: yes",
    ]
    fixed = dict(pace, mode="fixed", batch_size=100, batch_size_range=[100, 100], commit_ms=None, jobs_per_second=None)
    assert cleanup_cli.pace_text(fixed) == (
        "pace: fixed, batches of 100, - jobs/s, commits - ms, 312.4 s paused, 1 back-off(s)"
    )
    assert not [line for line in cleanup_cli.summary_lines(result(pace=pace, batches=0), False) if "pace" in line]


def test_summary_of_a_check_mode_retry_without_threshold():
    values = result(
        threshold=None,
        threshold_source=None,
        changed=False,
        no_started_at=[JOB % i for i in range(7)],
        slurm={"skipped": "cancel_slurm_jobs is false"},
    )
    values["requeued_jobs"] = values.pop("failed_jobs")
    values["not_requeued"] = [JOB % 8]
    values["tokens_left_alone"] = [
        {"uuid": "zzzzz-gj3su-000000000000002", "user_uuid": "zzzzz-tpzed-000000000000009", "could_belong_to": JOB % 9}
    ]
    assert cleanup_cli.summary_lines(values, True) == [
        "threshold: none (every Running job qualifies)",
        "jobs would be requeued: 2",
        "tokens would be revoked: 1",
        "tokens left valid (another job or pipeline of their user could own them): 1 (zzzzz-gj3su-000000000000002: %s)"
        % (JOB % 9),
        "would be failed, not requeued (no user to run them as): 1 (%s)" % (JOB % 8),
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

    monkeypatch.setattr(cleanup_cli, "run_fail_jobs", fake_run)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = cleanup_cli.main(
        ["--check", "--retry"], stdout=stdout, reporter=cleanup_cli.Reporter(stream=stderr, journald=False)
    )
    assert code == 0
    assert seen == {"params": {"retry": True}, "check_mode": True, "diff": False}
    assert stdout.getvalue().splitlines()[-1] == "changed: no"
    assert stderr.getvalue() == "arvados-fail-jobs: slurm was slow\n"


def test_main_json_output(monkeypatch):
    monkeypatch.setattr(cleanup_cli, "run_fail_jobs", lambda *a, **k: result())
    stdout = io.StringIO()
    assert cleanup_cli.main(["--json"], stdout=stdout, reporter=cleanup_cli.Reporter(stream=io.StringIO())) == 0
    assert json.loads(stdout.getvalue()) == result()


def test_main_reports_a_failure_in_one_line_with_journald_priority(monkeypatch):
    def fail(*args, **kwargs):
        raise RecoveryError("cannot connect\nto the database")

    monkeypatch.setattr(cleanup_cli, "run_fail_jobs", fail)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = cleanup_cli.main([], stdout=stdout, reporter=cleanup_cli.Reporter(stream=stderr, journald=True))
    assert code == 1
    assert stdout.getvalue() == ""
    assert stderr.getvalue() == "<3>cannot connect to the database\n"


def test_main_under_json_prints_a_failure_as_the_module_reports_it(monkeypatch):
    def fail(*args, **kwargs):
        raise RecoveryError("cannot connect to the database")

    monkeypatch.setattr(cleanup_cli, "run_fail_jobs", fail)
    stdout, stderr = io.StringIO(), io.StringIO()
    code = cleanup_cli.main(["--json"], stdout=stdout, reporter=cleanup_cli.Reporter(stream=stderr, journald=False))
    assert code == 1
    assert json.loads(stdout.getvalue()) == {"changed": False, "failed": True, "msg": "cannot connect to the database"}
    assert stderr.getvalue() == "arvados-fail-jobs: cannot connect to the database\n"


def test_version_names_the_command_and_the_collection(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cleanup_cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == "arvados-fail-jobs %s (arvados_ops.recovery)\n" % version.COLLECTION_VERSION


def test_help_shows_the_flags_that_turn_an_option_off(capsys):
    with pytest.raises(SystemExit):
        cleanup_cli.main(["--help"])
    help_text = capsys.readouterr().out
    for name, spec in cleanup_run.ALL_OPTIONS.items():
        if spec["type"] == "bool":
            assert "--no-" + name.replace("_", "-") in help_text, name


def test_progress_is_throttled_and_quiet_silences_it():
    clock = FakeClock()
    stream = io.StringIO()
    reporter = cleanup_cli.Reporter(stream=stream, journald=False, clock=clock)
    progress = CleanupResult(CleanupOptions())
    progress.batches = 3
    progress.done_jobs.extend([JOB % 1] * 150)
    reporter.progress(progress)
    assert stream.getvalue() == ""
    clock.time += 5
    reporter.progress(progress)
    reporter.progress(progress)
    assert stream.getvalue() == "arvados-fail-jobs: 3 batch(es): 150 job(s) done, 0 token(s) revoked so far\n"
    quiet = cleanup_cli.Reporter(stream=io.StringIO(), journald=False, quiet=True, clock=clock)
    clock.time += 10
    quiet.progress(progress)
    quiet.say("error", "still said")
    assert quiet.stream.getvalue() == "arvados-fail-jobs: still said\n"


def test_every_module_option_has_a_flag_except_the_password():
    parser = cleanup_cli.build_parser()
    flags = {option for action in parser._actions for option in action.option_strings}
    for name in cleanup_run.ALL_OPTIONS:
        flag = "--" + name.replace("_", "-")
        assert (flag in flags) is (name != "db_password"), name


# -- issue 26: files read as options, never echoed; conflicting flags ---------------------


SHADOW_LIKE = "root:$6$saltsalt$hashhashhashhash:19000:0:99999:7:::\ndaemon:*:19000:0:99999:7:::\n"


@pytest.mark.parametrize(
    "text, kind",
    [
        ("hunter2-secret and more words\n", "text"),
        ("- hunter2-secret\n- other\n", "a list"),
        ("31337\n", "a number"),
        ("true\n", "true or false"),
    ],
)
def test_a_file_that_is_no_mapping_is_refused_by_its_type_and_never_quoted(tmp_path, text, kind):
    options_file = tmp_path / "not-options"
    options_file.write_text(text)
    with pytest.raises(RecoveryError) as raised:
        read_fail_jobs_options(str(options_file))
    assert str(raised.value) == "options file %s holds %s, not a mapping of option names to values" % (
        options_file,
        kind,
    )


def test_a_mapping_of_unknown_keys_is_refused_by_their_count_never_quoted(tmp_path):
    options_file = tmp_path / "secrets.yml"
    options_file.write_text("root: $6$saltsalt$hashhash\nhunter2-secret: x\ndaemon: '*'\n")
    with pytest.raises(RecoveryError) as raised:
        read_fail_jobs_options(str(options_file))
    message = str(raised.value)
    assert message == (
        "options file %s has 3 key(s) that are no option of arvados-fail-jobs (not shown: it may not be an "
        "options file)" % options_file
    )


def test_the_command_never_echoes_a_file_that_is_no_options_file(tmp_path):
    options_file = tmp_path / "shadow"
    options_file.write_text(SHADOW_LIKE)
    stderr, stdout = io.StringIO(), io.StringIO()
    code = cleanup_cli.main(
        ["--options-file", str(options_file)], stdout=stdout, reporter=cleanup_cli.Reporter(stream=stderr)
    )
    assert code == 1
    # Each line ends with ':', so YAML reads it as a key: two keys, none shown.
    assert stderr.getvalue() == (
        "arvados-fail-jobs: options file %s has 2 key(s) that are no option of arvados-fail-jobs "
        "(not shown: it may not be an options file)\n" % options_file
    )
    for secret in ("saltsalt", "hashhash", "daemon", "19000"):
        assert secret not in stderr.getvalue() + stdout.getvalue()


def test_a_large_or_binary_file_is_refused_unread(tmp_path):
    large = tmp_path / "large"
    large.write_text("retry: true\n" + "#" * options_file.MAX_OPTIONS_FILE_BYTES)
    with pytest.raises(RecoveryError, match="is larger than 65536 bytes: refused without reading the rest"):
        read_fail_jobs_options(str(large))
    binary = tmp_path / "binary"
    binary.write_bytes(b"retry: \xff\xfe\n")
    with pytest.raises(RecoveryError, match="is not UTF-8 text"):
        read_fail_jobs_options(str(binary))


def status(mode, uid):
    # os.stat_result from (st_mode, st_ino, st_dev, st_nlink, st_uid, st_gid, st_size, atime, mtime, ctime)
    return os.stat_result((stat.S_IFREG | mode, 1, 1, 1, uid, 0, 10, 0, 0, 0))


@pytest.mark.parametrize(
    "mode, uid, accepted",
    [
        (0o600, 1000, True),
        (0o400, 1000, True),
        (0o600, 0, True),
        (0o640, 0, True),
        (0o640, 1000, False),
        (0o644, 0, False),
        (0o660, 0, False),
        (0o604, 1000, False),
        (0o620, 1000, False),
        (0o601, 0, False),
    ],
)
def test_a_file_holding_the_password_is_checked_as_libpq_checks_pgpass(mode, uid, accepted):
    def check():
        options_file.check_secret_file_mode("/etc/x.yml", status(mode, uid), ["db_password"])

    if accepted:
        check()
        return
    with pytest.raises(RecoveryError) as raised:
        check()
    assert str(raised.value) == (
        "options file /etc/x.yml holds db_password but is mode %04o (owner uid %d): other users could read or "
        "change it; chmod 0600 (or 0640 with owner root)" % (mode, uid)
    )


def test_a_world_readable_file_with_the_password_is_refused_without_showing_it(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("db_password: hunter2-secret\nretry: true\n")
    options_file.chmod(0o644)
    with pytest.raises(RecoveryError) as raised:
        read_fail_jobs_options(str(options_file))
    assert "holds db_password but is mode 0644" in str(raised.value)
    assert "hunter2" not in str(raised.value)
    options_file.chmod(0o600)
    assert read_fail_jobs_options(str(options_file)) == {"db_password": "hunter2-secret", "retry": True}


def test_a_world_readable_file_without_a_password_is_read(tmp_path):
    options_file = tmp_path / "options.yml"
    options_file.write_text("retry: true\ndb_password: ''\n")
    options_file.chmod(0o644)
    assert read_fail_jobs_options(str(options_file)) == {"retry": True, "db_password": ""}


@pytest.mark.parametrize("flag", ["retry", "revoke-tokens", "full-scan"])
def test_a_flag_and_its_no_form_together_are_an_error_naming_both(flag, capsys):
    with pytest.raises(SystemExit) as raised:
        parse(["--%s" % flag, "--no-%s" % flag])
    assert raised.value.code == 2
    assert "argument --no-%s: not allowed with argument --%s" % (flag, flag) in capsys.readouterr().err


def test_a_flag_given_twice_is_no_conflict():
    assert parse(["--retry", "--retry"]) == {"retry": True}


# -- issue 26: echoed values escaped ------------------------------------------------------


def test_progress_and_errors_escape_control_characters():
    stream = io.StringIO()
    reporter = cleanup_cli.Reporter(stream=stream, journald=True)
    reporter.say("error", "cluster_id zz\nzz<3>forged line \x1b[2J")
    assert stream.getvalue() == "<3>cluster_id zz\\nzz<3>forged line \\x1b[2J\n"


def test_a_control_character_in_cluster_id_is_shown_escaped_in_the_error(tmp_path):
    stderr = io.StringIO()
    options_file = tmp_path / "options.json"
    options_file.write_text(json.dumps(dict(NO_FILES, config_file="", cluster_id="zz\nzz\x1b[31m")))
    code = cleanup_cli.main(["--options-file", str(options_file)], reporter=cleanup_cli.Reporter(stream=stderr))
    assert code == 1
    assert stderr.getvalue() == (
        "arvados-fail-jobs: cluster_id zz\\nzz\\x1b[31m given but no config.yml is read "
        "(/etc/arvados/config.yml does not exist or config_file is '')\n"
    )


def test_jobs_left_running_behind_another_users_slurm_jobs_fail_the_command_with_what_it_did(monkeypatch):
    held = [{"uuid": JOB % 3, "job_id": "41", "user": "root", "state": "RUNNING"}]
    values = result(held_by_other_users=held, failed=True, msg="1 job(s) left Running, not failed or requeued: ...")
    monkeypatch.setattr(cleanup_cli, "run_fail_jobs", lambda *a, **k: dict(values))
    stdout, stderr = io.StringIO(), io.StringIO()
    code = cleanup_cli.main([], stdout=stdout, reporter=cleanup_cli.Reporter(stream=stderr, journald=False))
    assert code == 1
    assert stderr.getvalue() == "arvados-fail-jobs: 1 job(s) left Running, not failed or requeued: ...\n"
    assert "left Running (Slurm jobs of another user than slurm_user): 1 (%s: root)" % (JOB % 3) in stdout.getvalue()
    assert "jobs failed: 2" in stdout.getvalue()
