# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""options_file.add_option_flag, the flags of both commands: a bad value gets the message
the modules' parse gives, from arvados-fail-jobs and from arvados-recovery-watch alike."""

from __future__ import annotations

import argparse
import io

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils import (
    fail_jobs_cli,
    fail_jobs_run,
    options_file,
    reconcile_run,
    watch_cli,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils.options import Option, parse

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
    code = fail_jobs_cli.main(argv, reporter=fail_jobs_cli.Reporter(stream=stderr, journald=False))
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
    from_fail_jobs_module = module_message(fail_jobs_run.ALL_OPTIONS, name, typed)
    from_reconcile_module = module_message(reconcile_run.ALL_OPTIONS, name, typed)
    assert from_fail_jobs_module == from_reconcile_module == message
    argv = ["--" + name.replace("_", "-"), text]
    assert fail_jobs_message(argv) == "arvados-fail-jobs: %s\n" % from_fail_jobs_module
    assert watch_message(argv, tmp_path) == "arvados-recovery-watch: %s\n" % from_fail_jobs_module


def test_a_bad_choice_gets_the_option_layers_message_from_both_commands(tmp_path):
    # A module's bad choice is refused by Ansible before the module runs; the commands
    # say it as the option layer does for every other mistake.
    message = "option db_sslmode must be one of %s, got 'sometimes'" % ", ".join(
        fail_jobs_run.ALL_OPTIONS["db_sslmode"].choices
    )
    assert module_message(fail_jobs_run.ALL_OPTIONS, "db_sslmode", "sometimes") == message
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
