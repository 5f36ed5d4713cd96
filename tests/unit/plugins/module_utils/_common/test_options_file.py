# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""options_file.add_option_flag, the flags of both commands: a bad value gets the message
the modules' parse gives, from arvados-fail-jobs and from arvados-recovery-watch alike."""

from __future__ import annotations

import argparse
import io
import os
import pwd
import time

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import cli as cleanup_cli
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import options_file
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError, RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import Option, parse
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import run as reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_cli

# (option, the value as Ansible types it for a module, the flag's text, the message):
# mistakes Ansible lets through to the modules' parse.
SAME_MISTAKES = [
    ("db_port", 0, "0", "option db_port must be at least 1, got 0"),
    ("db_port", 70000, "70000", "option db_port must be at most 65535, got 70000"),
    ("db_connect_timeout", 0, "0", "option db_connect_timeout must be at least 1, got 0"),
    ("db_connect_timeout", 10**9, "1e9", "option db_connect_timeout must be at most 86400, got 1000000000"),
    # What Python makes of a byte of argv that is no UTF-8 (surrogateescape).
    (
        "db_host",
        "db\udcff",
        "db\udcff",
        "option db_host must not contain a lone surrogate, which is no character UTF-8 can encode, got 'db\\udcff'",
    ),
]


def module_message(table, name, value):
    with pytest.raises(ConfigError) as raised:
        parse(table, {name: value})
    return str(raised.value)


def fail_jobs_message(argv):
    stderr = io.StringIO()
    code = cleanup_cli.main(argv, reporter=cleanup_cli.Reporter(stream=stderr, journald=False))
    assert code == 1
    return stderr.getvalue()


def watch_message(argv, tmp_path):
    stderr = io.StringIO()
    metrics_file = str(tmp_path / "watch.prom")
    code = watch_cli.main(
        argv + ["--metrics-file", metrics_file],
        stdout=io.StringIO(),
        reporter=watch_cli.Reporter(stream=stderr, journald=False),
        read=pytest.fail,
    )
    assert code == 2
    return stderr.getvalue()


@pytest.mark.parametrize("name, typed, text, message", SAME_MISTAKES)
def test_the_same_mistake_gets_the_same_message_from_the_modules_and_both_commands(
    name, typed, text, message, tmp_path
):
    from_fail_jobs_module = module_message(cleanup_run.ALL_OPTIONS, name, typed)
    from_reconcile_module = module_message(reconcile_run.ALL_OPTIONS, name, typed)
    assert from_fail_jobs_module == from_reconcile_module == message
    argv = ["--" + name.replace("_", "-"), text]
    assert fail_jobs_message(argv) == "arvados-fail-jobs: %s\n" % from_fail_jobs_module
    assert watch_message(argv, tmp_path) == "arvados-recovery-watch: %s\n" % from_fail_jobs_module


def test_a_bad_choice_gets_the_option_layers_message_from_both_commands(tmp_path):
    # A module's bad choice is refused by Ansible before the module runs; the commands
    # say it as the option layer does for every other mistake.
    message = "option db_sslmode must be one of %s, got 'sometimes'" % ", ".join(
        cleanup_run.ALL_OPTIONS["db_sslmode"].choices
    )
    assert module_message(cleanup_run.ALL_OPTIONS, "db_sslmode", "sometimes") == message
    argv = ["--db-sslmode", "sometimes"]
    assert fail_jobs_message(argv) == "arvados-fail-jobs: %s\n" % message
    assert watch_message(argv, tmp_path) == "arvados-recovery-watch: %s\n" % message


def flags_of(option, **given):
    parser = argparse.ArgumentParser()
    options_file.add_option_flag(parser, "some_option", option, **given)
    return parser


def test_a_flag_keeps_its_value_as_text_for_the_option_layer():
    for option in (Option("int"), Option("float"), Option("str", choices=["a", "b"]), Option("raw")):
        assert flags_of(option).parse_args(["--some-option", "1e3"]).some_option == "1e3"


def test_a_list_flag_repeats_and_an_alias_is_the_same_flag():
    parser = flags_of(Option("list", elements="str"), aliases=["--one"], metavar="ITEM")
    assert parser.parse_args(["--some-option", "a", "--one", "b"]).some_option == ["a", "b"]
    assert "--one ITEM" in parser.format_help()


def test_a_bool_flag_has_a_no_form_and_both_together_are_refused(capsys):
    parser = flags_of(Option("bool"), help_text="does it")
    assert parser.parse_args([]).some_option is None
    assert parser.parse_args(["--some-option"]).some_option is True
    assert parser.parse_args(["--no-some-option"]).some_option is False
    with pytest.raises(SystemExit) as raised:
        parser.parse_args(["--some-option", "--no-some-option"])
    assert raised.value.code == 2
    assert "argument --no-some-option: not allowed with argument --some-option" in capsys.readouterr().err


@pytest.mark.parametrize("text, error", [('{"a": 1', "not JSON"), ("[1]", "not a JSON mapping")])
def test_a_dict_flag_takes_a_json_mapping(text, error, capsys):
    parser = flags_of(Option("dict"))
    assert parser.parse_args(["--some-option", '{"a": 1}']).some_option == {"a": 1}
    with pytest.raises(SystemExit):
        parser.parse_args(["--some-option", text])
    assert "argument --some-option: %s" % error in capsys.readouterr().err


# -- the options file: a regular file nobody else can change ------------------------------

NOBODY = pwd.getpwnam("nobody").pw_uid
EVIL = "scontrol_path: /tmp/evil.sh\n"


def read_watch_options(path):
    return options_file.read_options_file(str(path), watch_cli.ALL_OPTIONS, watch_cli.PROGRAM)


def refusal(path):
    with pytest.raises(RecoveryError) as raised:
        read_watch_options(path)
    return str(raised.value)


@pytest.mark.parametrize("mode, who", [(0o666, "its group and others"), (0o602, "others"), (0o620, "its group")])
def test_an_options_file_others_can_write_is_refused_whatever_it_holds(tmp_path, mode, who):
    for text in (EVIL, "", "{}\n"):
        path = tmp_path / "watch.yml"
        path.write_text(text)
        os.chmod(path, mode)
        assert refusal(path) == (
            "options file %s is mode %04o, writable by %s: whoever can write it chooses what this command runs "
            "and changes, so it is refused whatever it holds; chmod go-w it" % (path, mode, who)
        )


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_an_options_file_owned_by_another_user_is_refused_even_read_only(tmp_path):
    path = tmp_path / "watch.yml"
    path.write_text(EVIL)
    os.chmod(path, 0o444)
    os.chown(path, NOBODY, NOBODY)
    assert refusal(path) == (
        "options file %s is owned by uid %d (nobody), neither root nor this command's user (uid 0 (root)): its "
        "owner could change what this command runs and changes, so it is refused whatever it holds; chown it "
        "to root" % (path, NOBODY)
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_root_owned_symlink_to_a_file_of_another_user_is_refused(tmp_path):
    target = tmp_path / "theirs.yml"
    target.write_text(EVIL)
    os.chmod(target, 0o644)
    os.chown(target, NOBODY, NOBODY)
    link = tmp_path / "watch.yml"
    link.symlink_to(target)
    assert refusal(link).startswith(
        "options file %s (a symlink to '%s') is owned by uid %d (nobody)," % (link, target, NOBODY)
    )


def test_a_trusted_options_file_is_read(tmp_path):
    path = tmp_path / "watch.yml"
    path.write_text(EVIL)
    os.chmod(path, 0o644)
    assert read_watch_options(path) == {"scontrol_path": "/tmp/evil.sh"}
    link = tmp_path / "link.yml"
    link.symlink_to(path)
    assert read_watch_options(link) == {"scontrol_path": "/tmp/evil.sh"}


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "options.fifo"
    os.mkfifo(fifo)
    link = tmp_path / "options.yml"
    link.symlink_to(fifo)
    started = time.monotonic()
    assert refusal(fifo) == (
        "options file %s is a FIFO (named pipe), not a regular file: refused without reading it" % fifo
    )
    assert refusal(link) == (
        "options file %s is a symlink to '%s', which is a FIFO (named pipe), not a regular file: "
        "refused without reading it" % (link, fifo)
    )
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    "path, kind", [("/dev/zero", "a character device"), ("/dev/null", "a character device"), ("/", "a directory")]
)
def test_other_files_that_are_no_regular_file_are_refused(path, kind):
    assert refusal(path) == "options file %s is %s, not a regular file: refused without reading it" % (path, kind)


def test_a_missing_file_and_a_dangling_symlink_say_so(tmp_path):
    missing = tmp_path / "missing.yml"
    assert refusal(missing) == "cannot read options file %s: No such file or directory" % missing
    link = tmp_path / "dangling.yml"
    link.symlink_to(missing)
    assert refusal(link) == "cannot read options file %s (a symlink to '%s'): No such file or directory" % (
        link,
        missing,
    )


def test_a_long_path_is_cut_in_the_message():
    path = "/tmp/" + "x" * 100000
    message = refusal(path)
    assert message == "cannot read options file %s... (100005 characters): File name too long" % path[:200]


def test_a_swap_between_the_look_and_the_open_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "watch.yml"
    path.write_text(EVIL)
    other = tmp_path / "other.yml"
    other.write_text("{}\n")
    real_open = os.open

    def swapping_open(name, flags, *args):
        os.replace(other, path)
        return real_open(name, flags, *args)

    monkeypatch.setattr(options_file.os, "open", swapping_open)
    assert refusal(path) == "options file %s changed while it was opened: refused; try again" % path


def test_the_command_refuses_a_writable_options_file_with_status_1(tmp_path):
    path = tmp_path / "fail-jobs.yml"
    path.write_text("squeue_path: /tmp/evil.sh\n")
    os.chmod(path, 0o666)
    stderr = io.StringIO()
    reporter = cleanup_cli.Reporter(stream=stderr, journald=False)
    assert cleanup_cli.main(["--options-file", str(path)], stdout=io.StringIO(), reporter=reporter) == 1
    assert "is mode 0666, writable by its group and others" in stderr.getvalue()


# -- the options file: numbers as YAML 1.1 writes them ------------------------------------
# Before: PyYAML's YAML 1.1 resolver read batch_size 1_000 as 1000, 0x1F as 31, 017 as 15
# and 1:20 as 80, and the option layer saw a number nobody wrote.

YAML_11_NUMBERS = ["1_000", "0x1F", "017", "1:20", "0b101", "0o17", "+0x1f", "1_0.5", "1:20.5", ".inf", "-.inf", ".nan"]


def fail_jobs_options_file(tmp_path, text):
    path = tmp_path / "fail-jobs.yml"
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("text", YAML_11_NUMBERS)
@pytest.mark.parametrize("name", ["batch_size", "lock_wait"])
def test_a_number_yaml_1_1_reads_otherwise_is_refused_naming_the_file_option_and_value(tmp_path, name, text):
    path = fail_jobs_options_file(tmp_path, "%s: %s\n" % (name, text))
    with pytest.raises(RecoveryError) as raised:
        options_file.read_options_file(str(path), cleanup_cli.ALL_OPTIONS, cleanup_cli.PROGRAM)
    assert str(raised.value) == "options file %s: option %s %s, got '%s'" % (
        path,
        name,
        options_file.NOT_DECIMAL,
        text,
    )


def test_both_commands_refuse_it_before_anything_runs(tmp_path):
    path = fail_jobs_options_file(tmp_path, "batch_size: 1_000\n")
    message = "options file %s: option batch_size %s, got '1_000'" % (path, options_file.NOT_DECIMAL)
    assert fail_jobs_message(["--options-file", str(path)]) == "arvados-fail-jobs: %s\n" % message
    assert watch_message(["--options-file", str(path)], tmp_path) == "arvados-recovery-watch: %s\n" % message


def test_plain_decimal_numbers_are_read_and_other_forms_stay_text_in_text_options(tmp_path):
    path = fail_jobs_options_file(
        tmp_path,
        "batch_size: 500\nlock_wait: 0.5\nslurm_timeout: 1.5e2\nrow_lock_wait: '7'\ndb_wait: 1e3\n"
        "db_connect_timeout: -0\nlog_message: 1:20\ndb_password: 0x1F\nslurm_user: 017\nretry: yes\n",
    )
    assert options_file.read_options_file(str(path), cleanup_cli.ALL_OPTIONS, cleanup_cli.PROGRAM) == {
        "batch_size": 500,
        "lock_wait": 0.5,
        "slurm_timeout": 150.0,
        "row_lock_wait": "7",
        "db_wait": "1e3",
        "db_connect_timeout": 0,
        "log_message": "1:20",
        "db_password": "0x1F",
        "slurm_user": "017",
        "retry": True,
    }


def test_a_secret_number_option_is_refused_without_its_value():
    table = {"pin": Option("int", no_log=True)}
    with pytest.raises(RecoveryError) as raised:
        options_file.check_numbers("f.yml", {"pin": "1_234"}, table)
    assert str(raised.value) == "options file f.yml: option pin %s" % options_file.NOT_DECIMAL


@pytest.mark.parametrize("text", ["nan", "inf", "-Infinity"])
def test_the_words_the_option_layer_reads_pass_to_it_for_its_own_message(tmp_path, text):
    path = fail_jobs_options_file(tmp_path, "lock_wait: %s\n" % text)
    assert fail_jobs_message(["--options-file", str(path)]) == (
        "arvados-fail-jobs: option lock_wait must be a finite number, got %s\n"
        % text.lower().replace("infinity", "inf")
    )
