# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every recovery playbook has an integration test marked `cores`, which
scripts/integration-cores.sh runs with the oldest and the newest ansible-core. site.yml,
which installs the roles, is left out: the version stage runs the roles with each core."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
INTEGRATION = REPO_ROOT / "tests" / "integration"
NOT_RECOVERY = {"site.yml"}


def is_cores_mark(decorator: ast.expr) -> bool:
    return ast.unparse(decorator) == "pytest.mark.cores"


def playbook_constants(tree: ast.Module) -> dict[str, str]:
    """NAME -> playbook file name, for module-level `NAME = ... / "x.yml"`."""
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names = [
                leaf.value
                for leaf in ast.walk(node.value)
                if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) and leaf.value.endswith(".yml")
            ]
            if len(names) == 1:
                constants[node.targets[0].id] = names[0]
    return constants


def playbooks_of_cores_tests() -> dict[str, list[str]]:
    """Playbook file name -> the `cores` tests that run it."""
    covered: dict[str, list[str]] = {}
    for path in sorted(INTEGRATION.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        constants = playbook_constants(tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(is_cores_mark(d) for d in node.decorator_list):
                used = {leaf.id for leaf in ast.walk(node) if isinstance(leaf, ast.Name)}
                for name in used & set(constants):
                    covered.setdefault(constants[name], []).append("%s::%s" % (path.name, node.name))
    return covered


def test_every_recovery_playbook_has_one_test_on_the_oldest_and_newest_core():
    recovery = {path.name for path in (REPO_ROOT / "playbooks").glob("*.yml")} - NOT_RECOVERY
    covered = playbooks_of_cores_tests()
    assert sorted(recovery - set(covered)) == []
    # One each keeps the stage short (scripts/integration-cores.sh runs them twice).
    assert {playbook: len(tests) for playbook, tests in covered.items()} == dict.fromkeys(covered, 1)


def test_playbook_constants_reads_the_paths_the_tests_use():
    tree = ast.parse('PLAYBOOKS = ROOT / "playbooks"\nCANCEL = PLAYBOOKS / "cancel_slurm_jobs.yml"\nN = 3\n')
    assert playbook_constants(tree) == {"CANCEL": "cancel_slurm_jobs.yml"}
