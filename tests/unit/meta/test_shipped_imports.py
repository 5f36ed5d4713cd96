# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every package the shipped code imports is one requirements.txt declares.

An execution or decision environment gets the collection's Python dependencies from
requirements.txt (meta/execution-environment.yml) and nothing else: a module, a filter or
the event source that imports an undeclared package works on the developer's machine and
fails there. The check reads the imports from the source, so it covers files no test
imports (the event source runs inside ansible-rulebook).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ("plugins", "extensions/eda")
# What the code may import besides the standard library and requirements.txt: Ansible
# itself (ansible-core is the environment), PyYAML (a requirement of ansible-core), the
# collection, and the database driver psycopg's older alternative, taken only where a host
# has no psycopg 3 (a requirement cannot name two alternatives: requirements.txt says so).
PROVIDED = {"ansible", "ansible_collections", "yaml", "psycopg2"}
# Distribution names whose import name differs.
IMPORT_NAMES = {"ruamel.yaml": "ruamel"}


def shipped_files():
    for top in SHIPPED:
        yield from sorted((REPO_ROOT / top).rglob("*.py"))


def top_level_imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def declared_imports():
    names = set()
    for line in (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name = Requirement(line).name
            names.add(IMPORT_NAMES.get(name, name))
    return names


def undeclared(paths, declared, root=REPO_ROOT):
    allowed = set(sys.stdlib_module_names) | PROVIDED | declared | {"__future__"}
    return sorted(
        "%s imports %s" % (path.relative_to(root), name)
        for path in paths
        for name in set(top_level_imports(path))
        if name not in allowed
    )


def test_the_shipped_code_imports_only_what_requirements_txt_declares():
    files = list(shipped_files())
    assert any(path.parts[-2:] == ("event_source", "findings.py") for path in files)
    assert undeclared(files, declared_imports()) == []


def test_an_undeclared_import_is_named(tmp_path):
    source = tmp_path / "source.py"
    source.write_text("import json\nimport aiohttp.web\nfrom ruamel.yaml import YAML\n", encoding="utf-8")
    assert undeclared([source], {"ruamel"}, root=tmp_path) == ["source.py imports aiohttp"]
    assert undeclared([source], set(), root=tmp_path) == ["source.py imports aiohttp", "source.py imports ruamel"]
