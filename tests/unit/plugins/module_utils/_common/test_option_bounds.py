"""The option layer's bounds and errors.shown: the upper bound of every number option, text PostgreSQL
cannot take, and values echoed escaped (issue 26)."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.run import CANCEL_OPTIONS, build_request
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import (
    ConfigError,
    RecoveryError,
    shown,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import Range, check_text, excerpt
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules import support as modules_support
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.run import check_params

NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "squeue_path": "/bin/true"}


@pytest.mark.parametrize(
    "given, message",
    [
        ({"settle": 1e12}, "option settle must be at most 86400, got 1000000000000.0"),
        ({"query_timeout": 1e12}, "option query_timeout must be at most 2147483, got 1000000000000.0"),
        ({"batch_size": 100001}, "option batch_size must be at most 100000, got 100001"),
        ({"command_timeout": 86401.0}, "option command_timeout must be at most 86400, got 86401.0"),
        ({"db_wait": 1e300}, "option db_wait must be at most 86400, got 1e+300"),
        ({"db_port": 65536}, "option db_port must be at most 65535, got 65536"),
    ],
)
def test_the_reconciliation_refuses_numbers_above_their_bound(given, message):
    with pytest.raises(ConfigError) as raised:
        check_params(dict(NO_FILES, **given))
    assert str(raised.value) == message


def test_the_reconciliation_takes_the_bounds_themselves():
    _settings, options = check_params(dict(NO_FILES, settle=86400, query_timeout=2147483, batch_size=100000))
    assert (options.settle, options.query_timeout, options.batch_size) == (86400, 2147483, 100000)


def test_the_reconciliation_refuses_a_nul_in_a_connection_option():
    with pytest.raises(ConfigError, match=r"option db_user must not contain a NUL character \(\\x00\)"):
        check_params(dict(NO_FILES, db_user="arv\x00ados"))


def cancel_params(**given):
    params = {name: spec["default"] for name, spec in CANCEL_OPTIONS.items()}
    params.update(name=["zzzzz-8i9sb-000000000000001"], **given)
    return params


@pytest.mark.parametrize(
    "name, value, bound",
    [
        ("timeout", 1e12, "86400"),
        ("grace_period", 1e300, "86400"),
        ("retry_delay", 86401.0, "86400"),
        ("error_retry_delay", 1e9, "86400"),
        ("command_timeout", 1e9, "86400"),
        ("log_interval", 1e9, "86400"),
        ("terminate_grace", 1e9, "86400"),
        ("term_interval", 3601.0, "3600"),
        ("max_scancel_per_second", 1e6, "1000"),
        ("max_concurrent_scancel", 65, "64"),
        ("max_job_ids_per_scancel", 10001, "10000"),
    ],
)
def test_the_slurm_module_refuses_numbers_above_their_bound(name, value, bound):
    with pytest.raises(ConfigError) as raised:
        build_request(cancel_params(**{name: value}))
    assert str(raised.value) == "option %s must be at most %s, got %s" % (name, bound, value)


def test_a_range_takes_its_bounds_and_refuses_nan():
    bounded = Range(10, minimum=0)
    for value in (0, 9.5, 10):
        assert bounded("x", value) == value
    with pytest.raises(ConfigError, match="option x must be a finite number, got nan"):
        bounded("x", float("nan"))


def test_text_checks_leave_other_types_alone():
    check_text("x", 12)
    check_text("x", ["a", "b"])


def test_an_excerpt_is_cut_and_escaped():
    assert excerpt("a\nb") == "'a\\nb'"
    assert excerpt("y" * 100) == "'%s...' (100 characters)" % ("y" * 60)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("plain é text", "plain é text"),
        ("line\nforged", "line\\nforged"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("cr\rtab\tnul\x00", "cr\\rtab\\tnul\\x00"),
        ("sep\u2028rtl\u202e", "sep\\u2028rtl\\u202e"),
        ("lone\ud800", "lone\\ud800"),
        (12, "12"),
    ],
)
def test_shown_escapes_what_a_terminal_or_log_would_act_on(value, expected):
    assert shown(value) == expected


def test_a_recovery_error_escapes_what_its_lines_leave():
    assert str(RecoveryError("first\nsecond \x1b[2J")) == "first second \\x1b[2J"


class Failed(Exception):
    pass


class FakeModule:
    def __init__(self, params):
        self.params = params
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)

    def fail_json(self, **result):
        raise Failed(result)

    exit_json = fail_json


OPTIONS = {
    "db_password": {"type": "str", "no_log": True},
    "db_user": {"type": "str"},
}


def test_a_failure_says_why_with_the_secret_masked(monkeypatch):
    monkeypatch.setattr(modules_support, "psycopg_import_error", lambda: None)

    def engine(_params):
        raise RecoveryError('password authentication failed for user "arvados" (password hunter2-x, again hunter2-x)')

    module = FakeModule({"db_password": "hunter2-x", "db_user": "arvados"})
    with pytest.raises(Failed) as failed:
        modules_support.run_engine(module, engine, OPTIONS)
    assert failed.value.args[0] == {
        "msg": 'password authentication failed for user "arvados" (password ********, again ********)'
    }


def test_a_failed_result_and_the_warnings_are_masked_too(monkeypatch):
    monkeypatch.setattr(modules_support, "psycopg_import_error", lambda: None)
    module = FakeModule({"db_password": "s3cr3t", "db_user": "arvados"})
    with pytest.raises(Failed) as failed:
        modules_support.run_engine(
            module,
            lambda _params: {"failed": True, "msg": "left at s3cr3t", "warnings": ["s3cr3t\nforged"]},
            OPTIONS,
        )
    assert failed.value.args[0] == {"msg": "left at ********"}
    assert module.warnings == ["********\\nforged"]
