"""_modules/support.py: the argument_spec made from an option table, and the one way the
database modules run their engine and report."""

from __future__ import annotations

import sys
import types

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import argument_spec
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules import support as modules_support
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules.support import (
    canonical_params,
    run_engine,
    run_slurm_module,
)

OPTIONS = {
    "db_host": {"type": "str", "default": None, "aliases": ["login_host"], "help": "database host"},
    "batch_size": {"type": "int", "default": 100, "help": "rows per batch"},
}


@pytest.fixture(autouse=True)
def psycopg_installed(monkeypatch):
    """psycopg counts as installed (the version stage's virtualenvs do not have it)."""
    monkeypatch.setattr(modules_support, "psycopg_import_error", lambda: None)


class Exited(Exception):
    pass


class FakeModule:
    """What run_engine uses of AnsibleModule; exit_json and fail_json end the run as they do."""

    def __init__(self, params):
        self.params = params
        self.warnings = []

    def warn(self, text):
        self.warnings.append(text)

    def exit_json(self, **result):
        raise Exited(dict(result))

    def fail_json(self, **result):
        raise Exited(dict(result, failed=True))


def outcome(module, engine):
    with pytest.raises(Exited) as exited:
        run_engine(module, engine, OPTIONS, lambda library: "%s is missing" % library)
    return exited.value.args[0]


def test_the_argument_spec_has_no_help_and_no_none_default():
    assert argument_spec(OPTIONS) == {
        "db_host": {"type": "str", "aliases": ["login_host"]},
        "batch_size": {"type": "int", "default": 100},
    }


def test_an_option_given_by_its_alias_reaches_the_engine_by_its_name():
    # AnsibleModule keeps the value under the alias too; an engine refuses names it does not know.
    params = {"db_host": "db.example.org", "login_host": "db.example.org", "batch_size": 100}
    assert canonical_params(params, OPTIONS) == {"db_host": "db.example.org", "batch_size": 100}
    seen = {}
    result = outcome(FakeModule(params), lambda given: seen.update(given) or {"changed": False, "warnings": []})
    assert seen == {"db_host": "db.example.org", "batch_size": 100}
    assert result == {"changed": False}


def test_warnings_are_ansible_warnings_not_result_keys():
    module = FakeModule({"batch_size": 1})
    result = outcome(module, lambda given: {"changed": True, "warnings": ["slurm was slow"]})
    assert module.warnings == ["slurm was slow"]
    assert result == {"changed": True}


def test_an_engine_error_is_the_failure_message():
    def refuse(given):
        raise ConfigError("batch_size must be at least 1, not 0")

    assert outcome(FakeModule({"batch_size": 0}), refuse) == {
        "msg": "batch_size must be at least 1, not 0",
        "failed": True,
    }


def test_without_psycopg_it_fails_before_the_engine_runs(monkeypatch):
    monkeypatch.undo()
    # None in sys.modules makes `import psycopg` raise ImportError.
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    monkeypatch.delenv("ARVADOS_RECOVERY_PG_DRIVER", raising=False)

    def never(given):
        raise AssertionError("the engine ran")

    failure = outcome(FakeModule({}), never)
    assert failure["msg"] == (
        "psycopg (version 3) or psycopg2 is missing; install python3-psycopg or python3-psycopg2 "
        '(Debian/Ubuntu; python3-psycopg3 or python3-psycopg2 on EL), or "pip install psycopg[binary]" '
        'or "pip install psycopg2"'
    )
    assert "import of psycopg2 halted" in failure["exception"]


def test_psycopg2_alone_is_enough_to_run_the_engine(monkeypatch):
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg2", types.ModuleType("psycopg2"))
    monkeypatch.delenv("ARVADOS_RECOVERY_PG_DRIVER", raising=False)

    assert outcome(FakeModule({}), lambda given: {"changed": False}) == {"changed": False}


def test_a_forced_driver_that_is_missing_fails_before_the_engine_runs(monkeypatch):
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "psycopg", types.ModuleType("psycopg"))
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    monkeypatch.setenv("ARVADOS_RECOVERY_PG_DRIVER", "psycopg2")

    def never(given):
        raise AssertionError("the engine ran")

    failure = outcome(FakeModule({}), never)
    assert failure["msg"].startswith("psycopg (version 3) or psycopg2 is missing; install python3-psycopg or")
    assert "import of psycopg2 halted" in failure["exception"]


def test_an_engine_without_a_database_runs_without_psycopg(monkeypatch):
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "psycopg", None)
    module = FakeModule({"batch_size": 1})
    with pytest.raises(Exited) as exited:
        run_engine(module, lambda given: {"changed": False}, OPTIONS)
    assert exited.value.args[0] == {"changed": False}


def test_a_failed_result_is_a_failure_that_keeps_what_was_done():
    module = FakeModule({"batch_size": 1})
    result = outcome(module, lambda given: {"changed": True, "failed": True, "msg": "2 jobs left", "warnings": ["w"]})
    assert result == {"changed": True, "msg": "2 jobs left", "failed": True}
    assert module.warnings == ["w"]


class FakeSlurmModule(FakeModule):
    """FakeModule with what run_slurm_module reads: the task's modes. Its get_bin_path
    fails: Slurm's programs are found as the commands find them (require_program)."""

    def __init__(self, params, check_mode, diff):
        super().__init__(params)
        self.check_mode = check_mode
        self._diff = diff

    def get_bin_path(self, program, required=False):
        raise AssertionError("%s looked up with get_bin_path" % program)


@pytest.mark.parametrize("check_mode, diff", [(True, False), (False, True)])
def test_a_slurm_engine_gets_the_tasks_modes(check_mode, diff):
    module = FakeSlurmModule({"batch_size": 5, "login_host": "x"}, check_mode, diff)
    seen = {}

    def engine(params, check_mode, diff):
        seen.update(params=params, check_mode=check_mode, diff=diff)
        return {"changed": False, "warnings": ["slow"]}

    with pytest.raises(Exited) as exited:
        run_slurm_module(module, engine, OPTIONS)
    assert seen == {"params": {"batch_size": 5}, "check_mode": check_mode, "diff": diff}
    assert (exited.value.args[0], module.warnings) == ({"changed": False}, ["slow"])
