"""One import path for the collection's code in every test and lab process, and the
layering of plugins/module_utils' rooms.

A module imported both as `plugins.module_utils._common.errors` and as
`ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors` is two modules:
an error raised by one copy is not caught as the other's `RecoveryError`.

The rooms (the subpackages of plugins/module_utils) form layers: a file imports its own
room and the rooms below it, never one beside or above it, so no import cycle can run
between rooms; within a room the files form no cycle either.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
MODULE_UTILS = REPO_ROOT / "plugins" / "module_utils"
SHORT_IMPORT = re.compile(r"^\s*(from|import)\s+(plugins\b|slurm_fakes\b)", re.MULTILINE)
COLLECTION = "ansible_collections.arvados_ops.recovery"

# The rooms, bottom layer first; rooms of one layer may not import each other.
ROOMS = [
    ["_common"],
    ["_database", "_dispatcher"],
    ["_slurm"],
    ["_cancel"],
    ["_cleanup"],
    ["_reconcile"],
    ["_modules"],
]
LAYER = {room: layer for layer, rooms in enumerate(ROOMS) for room in rooms}


def test_tests_and_lab_import_the_collection_by_its_ansible_name():
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for folder in ("tests", "lab")
        for path in sorted((REPO_ROOT / folder).rglob("*.py"))
        if SHORT_IMPORT.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_this_process_holds_one_copy_of_the_engines():
    # Everything the unit tests import is loaded by now in a full run; alone, this test
    # still sees what conftest.py and the lab package imported.
    short_names = sorted(name for name in sys.modules if name == "plugins" or name.startswith("plugins."))
    assert short_names == []


def source_files() -> dict[str, Path]:
    """Every file of plugins/module_utils by its dotted name there ("_common.errors")."""
    return {
        ".".join(path.relative_to(MODULE_UTILS).with_suffix("").parts): path
        for path in sorted(MODULE_UTILS.rglob("*.py"))
        if path.name != "__init__.py"
    }


FULL_NAME = (
    "%s line %d imports the collection by its full name: import relatively (from .x, from ..room.x), "
    "as the boot-time commands carry these files under another package name"
)


def imported_files(name: str, path: Path, known: set[str]) -> set[str]:
    """The files of plugins/module_utils that file `name` imports, found from its
    relative imports; an import of the collection's code by its full name is refused (the
    boot-time commands carry these files under another package name)."""
    package = name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            assert not any(alias.name.startswith(COLLECTION) for alias in node.names), FULL_NAME % (name, node.lineno)
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0:
            assert not (node.module or "").startswith(COLLECTION), FULL_NAME % (name, node.lineno)
            continue
        assert node.level - 1 <= len(package), "%s line %d imports above plugins/module_utils" % (name, node.lineno)
        base = package[: len(package) - node.level + 1] + (node.module.split(".") if node.module else [])
        for alias in node.names:
            target = ".".join(base + [alias.name])
            found.add(target if target in known else ".".join(base))
    assert found <= known, (name, sorted(found - known))
    return found


def import_graph() -> dict[str, set[str]]:
    files = source_files()
    return {name: imported_files(name, path, set(files)) for name, path in files.items()}


def test_the_rooms_are_the_layers_and_each_is_a_package():
    on_disk = sorted(path.name for path in MODULE_UTILS.iterdir() if path.is_dir() and path.name != "__pycache__")
    assert on_disk == sorted(LAYER)
    for room in on_disk:
        assert (MODULE_UTILS / room / "__init__.py").read_text() == "", room
    assert sorted(path.name for path in MODULE_UTILS.glob("*.py")) == [], "a file outside the rooms"


def test_the_tests_mirror_the_rooms():
    tests = REPO_ROOT / "tests" / "unit" / "plugins" / "module_utils"
    for room in LAYER:
        assert (tests / room / "__init__.py").read_text() == "", room
    strays = [
        str(path.relative_to(tests))
        for path in sorted(tests.rglob("test_*.py"))
        if path.parent != tests
        and not any(
            path.stem[len("test_") :].startswith(source.stem)
            for source in (MODULE_UTILS / path.parent.name).glob("*.py")
        )
    ]
    assert strays == []


def test_no_room_imports_a_room_beside_or_above_it():
    upward = [
        "%s imports %s" % (name, target)
        for name, targets in import_graph().items()
        for target in targets
        if name.split(".")[0] != target.split(".")[0] and LAYER[target.split(".")[0]] >= LAYER[name.split(".")[0]]
    ]
    assert upward == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`, each as the path that closes it."""
    found = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_boot_time_commands_carry_every_room():
    """roles/boot_recovery globs each room's directory (fileglob does not glob directories)."""
    variables = yaml.safe_load((REPO_ROOT / "roles" / "boot_recovery" / "vars" / "main.yml").read_text())
    assert sorted(variables["__boot_recovery_code_dirs"]) == sorted(LAYER)


def ansible_imports(path: Path) -> list[str]:
    """The modules of Ansible itself (not of a collection) that `path` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        found += [name for name in names if name == "ansible" or name.startswith("ansible.")]
    return found


def test_the_engines_import_nothing_of_ansible():
    """The engines are shared by the modules and the boot-time commands, which run where
    Ansible is not installed: only plugins/modules and the modules' frame (_modules, which
    imports it inside the call that fails a module) may import it."""
    importing = {name: ansible_imports(path) for name, path in source_files().items()}
    assert {name: modules for name, modules in importing.items() if modules} == {
        "_modules.support": ["ansible.module_utils"]
    }


def test_ansible_imports_are_found_however_written(tmp_path):
    source = tmp_path / "source.py"
    source.write_text(
        "import os\nimport ansible.module_utils.basic\nfrom ansible.module_utils import six\n"
        "from ansible_collections.x.y import z\nfrom . import sibling\n"
    )
    assert ansible_imports(source) == ["ansible.module_utils.basic", "ansible.module_utils"]
