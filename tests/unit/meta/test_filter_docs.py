# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every filter of the collection has the documentation ansible-doc shows (a YAML file beside
its plugin, plugins/filter/<name>.yml), whose options are the function's parameters, and
whose EXAMPLES run: one real ansible-playbook on localhost runs them all."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.roles.playbook_runs import collections_in

REPO_ROOT = Path(__file__).resolve().parents[3]
FILTER_DIR = REPO_ROOT / "plugins" / "filter"
VENV_BIN = REPO_ROOT / ".venv" / "bin"


def filter_functions() -> dict:
    """Filter name -> its function's parameters [(name, has a default, the default)], read
    from the source: importing the plugins here would load Ansible's controller code into
    the process, which changes how the modules' unit tests collect warnings."""
    functions = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        (filter_module,) = [
            node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "FilterModule"
        ]
        (table,) = [node for node in ast.walk(filter_module) if isinstance(node, ast.Dict)]
        for key, value in zip(table.keys, table.values, strict=True):
            functions[key.value] = parameters(defs[value.id])
    return functions


def parameters(function: ast.FunctionDef) -> list:
    names = [argument.arg for argument in function.args.args]
    defaults = [ast.literal_eval(default) for default in function.args.defaults]
    missing = len(names) - len(defaults)
    return [
        (name, index >= missing, defaults[index - missing] if index >= missing else None)
        for index, name in enumerate(names)
    ]


def docs() -> dict:
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(FILTER_DIR.glob("*.yml"))}


def test_each_filter_has_its_documentation_and_no_documentation_lacks_a_filter():
    assert sorted(docs()) == sorted(filter_functions())


@pytest.mark.parametrize("name", sorted(filter_functions()))
def test_the_documented_options_are_the_function_s_parameters(name):
    documentation = docs()[name]["DOCUMENTATION"]
    assert documentation["name"] == name
    function = filter_functions()[name]
    options = documentation["options"]
    assert list(options) == ["_input"] + [parameter for parameter, _default, _value in function[1:]]
    assert documentation.get("positional", "") == ", ".join(parameter for parameter, _default, _value in function[1:])
    for (parameter, has_default, default), option in zip(function, options.values(), strict=True):
        assert option.get("required", False) is not has_default, (name, parameter)
        if has_default and option.get("default") is not None:
            assert option["default"] == (list(default) if isinstance(default, tuple) else default), (name, parameter)
    assert docs()[name]["RETURN"]["_value"]["description"]


def run(command, tmp_path):
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(collections_in(tmp_path)),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
    )
    return subprocess.run(command, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, check=False)


def test_ansible_doc_shows_every_filter_without_a_warning(tmp_path):
    names = ["arvados_ops.recovery." + name for name in sorted(filter_functions())]
    shown = run([str(VENV_BIN / "ansible-doc"), "-t", "filter", "--json", *names], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "WARNING" not in shown.stderr, shown.stderr
    assert sorted(json.loads(shown.stdout)) == names


def test_every_example_runs(tmp_path):
    tasks = []
    for name, documentation in docs().items():
        for task in yaml.safe_load(documentation["EXAMPLES"]):
            tasks.append(dict(task, name="%s: %s" % (name, task.get("name", "example"))))
    playbook = tmp_path / "examples.yml"
    playbook.write_text(
        yaml.safe_dump([{"name": "The filters' examples", "hosts": "localhost", "gather_facts": False, "tasks": tasks}])
    )
    ran = run([str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook)], tmp_path)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert "ok=%d" % len(tasks) in ran.stdout
