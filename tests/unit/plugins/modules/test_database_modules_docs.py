"""The modules' documentation and the command's flags against the option tables they are
made from: every option documented with the type, default, choices, aliases and elements
the module takes (and a no_log one said to be so) (the arvados_db fragment's options included), nothing documented
that it does not take, and each of the command's flags typed, limited and explained as its
table says. The three modules and the command are made from options.Option tables, so one
recipe adds an option to any of them (CONTRIBUTING.md)."""

from __future__ import annotations

import argparse

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.doc_fragments.arvados_db import ModuleDocFragment
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel import run as cancel_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import cli as cleanup_cli
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import Option, argument_spec
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import run as reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.modules import (
    arvados_fail_jobs,
    arvados_reconcile_info,
    slurm_job_cancel,
)

MODULES = {
    "arvados_fail_jobs": (arvados_fail_jobs, cleanup_run.ALL_OPTIONS),
    "arvados_reconcile_info": (arvados_reconcile_info, reconcile_run.ALL_OPTIONS),
    "slurm_job_cancel": (slurm_job_cancel, cancel_run.CANCEL_OPTIONS),
}


def documented_options(module):
    options = {}
    if "arvados_ops.recovery.arvados_db" in module.DOCUMENTATION:
        options.update(yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"])
    options.update(yaml.safe_load(module.DOCUMENTATION)["options"])
    return options


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_table_entry_is_an_option(name):
    _module, options = MODULES[name]
    assert all(isinstance(option, Option) for option in options.values())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_option_is_documented_as_the_module_takes_it(name):
    module, options = MODULES[name]
    documented = documented_options(module)
    spec = argument_spec(options)
    assert sorted(documented) == sorted(spec)
    for option, entry in spec.items():
        doc = documented[option]
        for key in ("type", "default", "choices", "aliases", "elements"):
            assert doc.get(key) == entry.get(key), "%s: %s documented %r, taken %r" % (
                option,
                key,
                doc.get(key),
                entry.get(key),
            )
        if entry.get("no_log"):
            assert "no_log" in " ".join(doc["description"]), option


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_module_takes_the_argument_spec_of_its_table(name, monkeypatch):
    module, options = MODULES[name]
    taken = {}

    class Stop(Exception):
        pass

    def fake_module(argument_spec, **_kwargs):
        taken.update(argument_spec)
        raise Stop

    monkeypatch.setattr(module, "AnsibleModule", fake_module)
    with pytest.raises(Stop):
        module.main()
    assert taken == argument_spec(options)


def command_flags():
    """The first flag of each option (a bool's --no- form comes second)."""
    flags = {}
    for action in cleanup_cli.build_parser()._actions:
        if action.option_strings:
            flags.setdefault(action.dest, action)
    return flags


def test_each_flag_of_the_command_is_explained_as_its_table_says_and_checked_by_it():
    flags = command_flags()
    for name, option in cleanup_run.ALL_OPTIONS.items():
        if name == "db_password":
            assert name not in flags
            continue
        flag = flags[name]
        assert flag.help == option.help and option.help, name
        if option.type == "bool":
            assert isinstance(flag, argparse._StoreTrueAction), name
            continue
        # The text goes to the option layer, which types it and checks its choices and
        # bounds with the modules' message (_common/test_options_file.py).
        assert (flag.type, flag.choices) == (None, None), name


def test_the_options_file_takes_the_tables_names():
    assert set(cleanup_cli.ALL_OPTIONS) == set(cleanup_run.ALL_OPTIONS)
