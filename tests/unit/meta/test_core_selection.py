# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The version stage runs on each ansible-core only the unit tests marked `cores`
(tests/unit/conftest.py): a test that reaches ansible-core's code and is not marked would be
tested on one core alone. These tests keep the selection whole, and show that the mark
reaches the tests pytest collects."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.unit import conftest as unit_conftest

REPO_ROOT = Path(__file__).resolve().parents[3]
UNIT_TESTS = REPO_ROOT / "tests" / "unit"

# An import of Ansible, of the collection's code that imports it (its modules, filters and
# the modules' support), or of the helper that runs ansible-playbook.
REACHES_ANSIBLE_CORE = re.compile(
    r"^\s*(from ansible(\.| import)|import ansible\b)"
    r"|^\s*(from|import) \S*(plugins\.modules|plugins\.filter|module_utils\._modules)\b"
    r"|^from tests\.unit\.roles\.playbook_runs import",
    re.M,
)
# Files that reach ansible-core's code on a core chosen on purpose, not the one they run on.
ON_ONE_CORE = {
    # Renders the Molecule scenario's template: Molecule runs on the project's ansible-core.
    "lab/test_slurm_conf_shared.py",
    # Reads the filters' documentation with .venv's ansible-doc, the project's core.
    "meta/test_filter_docs.py",
}


def python_files() -> list[str]:
    return sorted(path.relative_to(UNIT_TESTS).as_posix() for path in UNIT_TESTS.rglob("*.py"))


def test_every_file_that_reaches_ansible_core_is_run_on_each_core():
    unmarked = [
        name
        for name in python_files()
        if REACHES_ANSIBLE_CORE.search((UNIT_TESTS / name).read_text(encoding="utf-8"))
        and not unit_conftest.runs_ansible_core(name)
        and name not in ON_ONE_CORE
    ]
    assert unmarked == [], "add them to RUNS_ANSIBLE_CORE in tests/unit/conftest.py, or say why in ON_ONE_CORE"


def test_every_entry_of_the_selection_names_something_that_exists():
    for entry in unit_conftest.RUNS_ANSIBLE_CORE + tuple(ON_ONE_CORE):
        assert (UNIT_TESTS / entry).exists(), entry


def test_the_pure_logic_stays_out_and_the_roles_are_in():
    assert not unit_conftest.runs_ansible_core("plugins/module_utils/_cleanup/test_engine_locks.py")
    assert not unit_conftest.runs_ansible_core("bench/test_fail_jobs_bench.py")
    assert unit_conftest.runs_ansible_core("roles/test_recovery_watch.py")
    assert unit_conftest.runs_ansible_core("plugins/modules/test_slurm_job_cancel.py")


def test_pytest_collects_under_the_mark_exactly_the_selected_files():
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", "cores", "tests/unit"],
        cwd=str(REPO_ROOT),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    files = {line.split("::", 1)[0] for line in listed.splitlines() if "::" in line}
    assert files, listed[-2000:]
    assert all(unit_conftest.runs_ansible_core(name[len("tests/unit/") :]) for name in files), sorted(files)
    assert "tests/unit/roles/test_recovery_watch.py" in files
    assert "tests/unit/plugins/modules/test_slurm_job_cancel.py" in files
