# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every int and float option of every module refuses a number written with other digits
than ASCII's, or with underscores, as the arvados-fail-jobs command does (issue 34):
AnsibleModule's conversion read batch_size '\u0665' as 5 and '1_000' as 1000 before the
option layer saw the value. Each module as Ansible runs it, its arguments handed as the
controller hands them; the refusal comes before the engine runs."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel import run as cancel_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup import run as cleanup_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import NOT_ASCII_NUMBER, NUMBER_TYPES
from ansible_collections.arvados_ops.recovery.plugins.module_utils._modules import support as modules_support
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import run as reconcile_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import node_resume as slurm_node_resume
from ansible_collections.arvados_ops.recovery.plugins.modules import (
    arvados_fail_jobs,
    arvados_reconcile_info,
    slurm_job_cancel,
)
from ansible_collections.arvados_ops.recovery.plugins.modules import (
    slurm_node_resume as slurm_node_resume_module,
)
from tests.unit.plugins.modules.module_args import run_main

# module -> (its table, the arguments it requires besides the number)
MODULES = {
    "arvados_fail_jobs": (arvados_fail_jobs, cleanup_run.ALL_OPTIONS, {}),
    "arvados_reconcile_info": (arvados_reconcile_info, reconcile_run.ALL_OPTIONS, {}),
    "slurm_job_cancel": (slurm_job_cancel, cancel_run.CANCEL_OPTIONS, {"name": ["zzzzz-8i9sb-aaaaaaaaaaaaaaa"]}),
    "slurm_node_resume": (slurm_node_resume_module, slurm_node_resume.NODE_RESUME_OPTIONS, {"name": ["c1"]}),
}
# '\u0665' (ARABIC-INDIC DIGIT FIVE), an underscore, '\uff15' (FULLWIDTH DIGIT FIVE): each
# read as a number by int(), float() and Decimal(); for a float option also 1.5 in
# Arabic-Indic digits (Ansible refuses it for an int option itself: not a whole number).
TEXTS = ["\u0665", "1_000", "\uff15"]
FLOAT_TEXTS = TEXTS + ["\u0661.\u0665"]


def number_options():
    """(module name, option name, the key it is given under, the text): each number option,
    under its name and each alias."""
    cases = []
    for module_name, (_module, table, _required) in sorted(MODULES.items()):
        for name, option in table.items():
            if option.type in NUMBER_TYPES:
                texts = FLOAT_TEXTS if option.type == "float" else TEXTS
                keys = [name] + (option.aliases or [])
                cases.extend((module_name, name, key, text) for key in keys for text in texts)
    return cases


def test_every_module_has_number_options_to_check():
    assert {case[0] for case in number_options()} == set(MODULES)


@pytest.mark.parametrize("module_name, name, key, text", number_options())
def test_a_number_not_in_ascii_digits_is_refused_naming_the_option_and_value(
    module_name, name, key, text, capsys, monkeypatch
):
    module, _table, required = MODULES[module_name]
    ran = []
    for engine in ("run_fail_jobs", "run_reconcile", "run_slurm_job_cancel", "run_slurm_node_resume"):
        if hasattr(module, engine):
            monkeypatch.setattr(module, engine, lambda *args, **kwargs: ran.append(args) or {"changed": False})

    result = run_main(module, dict(required, **{key: text}), capsys)

    assert result["failed"] is True
    assert result["msg"] == "option %s %s, got '%s'" % (name, NOT_ASCII_NUMBER, text)
    assert ran == []


@pytest.mark.parametrize("module_name", ["arvados_fail_jobs", "arvados_reconcile_info"])
def test_a_bad_number_is_named_before_a_missing_database_library(module_name, capsys, monkeypatch):
    """A host without psycopg (the versions stage's Python 3.8) still hears about the task's
    own bad value first: fixing the library would only lead to that refusal next."""
    module, _table, required = MODULES[module_name]
    monkeypatch.setattr(modules_support, "psycopg_import_error", lambda: "No module named 'psycopg'")

    result = run_main(module, dict(required, batch_size="\u0665"), capsys)

    assert result["msg"] == "option batch_size %s, got '\u0665'" % NOT_ASCII_NUMBER
    assert run_main(module, dict(required, batch_size="5"), capsys)["msg"].startswith("Failed to import")


@pytest.mark.parametrize("text, expected", [("5", 5), (" 7 ", 7), (5, 5)])
def test_ascii_digits_pass_to_the_engine(text, expected, capsys, monkeypatch):
    given = []
    monkeypatch.setattr(
        slurm_job_cancel,
        "run_slurm_job_cancel",
        lambda params, **kwargs: given.append(params) or {"changed": False},
    )

    result = run_main(
        slurm_job_cancel, {"name": ["zzzzz-8i9sb-aaaaaaaaaaaaaaa"], "max_concurrent_scancel": text}, capsys
    )

    assert result.get("failed") is None, result
    assert given[0]["max_concurrent_scancel"] == expected
