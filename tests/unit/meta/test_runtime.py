# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""meta/runtime.yml's action_groups against the modules in plugins/modules."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
MODULES_DIR = REPO_ROOT / "plugins" / "modules"
DATABASE_FRAGMENT = "arvados_ops.recovery.arvados_db"


def action_groups():
    return yaml.safe_load((REPO_ROOT / "meta" / "runtime.yml").read_text())["action_groups"]


def modules():
    return sorted(path.stem for path in MODULES_DIR.glob("*.py") if path.stem != "__init__")


def documentation(module):
    """The module's DOCUMENTATION, read without importing the module."""
    tree = ast.parse((MODULES_DIR / (module + ".py")).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(target, "id", None) == "DOCUMENTATION" for target in node.targets
        ):
            return yaml.safe_load(node.value.value)
    raise AssertionError("%s has no DOCUMENTATION" % module)


def test_every_module_is_in_an_action_group():
    grouped = {name for members in action_groups().values() for name in members}
    assert [module for module in modules() if module not in grouped] == []


def test_the_database_group_is_the_modules_that_take_the_database_settings():
    # module_defaults hands each setting to every module of a group, and a module refuses
    # an option it does not have.
    takes_database_settings = [
        module
        for module in modules()
        if DATABASE_FRAGMENT in documentation(module).get("extends_documentation_fragment", [])
    ]
    assert takes_database_settings == sorted(action_groups()["database"])
    assert takes_database_settings != []
