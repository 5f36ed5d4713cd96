"""Which unit tests the version stage runs again on each other ansible-core.

Most unit tests exercise plugins/module_utils, which imports nothing of Ansible: on another
core they would run the same code on the same Python, so scripts/versions.sh does not repeat
them there (it runs the module_utils tests on the oldest and newest managed-host Pythons
instead). The tests below run ansible-core's own code, the core of the virtualenv they run
in: the modules on its AnsibleModule, the filters in its templar, the roles and playbooks in
its ansible-playbook, the collection installed by its ansible-galaxy. They are marked
`cores`, and `scripts/versions.sh` runs `pytest -m cores tests/unit` on each core.
tests/unit/meta/test_core_selection.py keeps this list whole."""

from __future__ import annotations

from pathlib import Path

import pytest

UNIT_TESTS = Path(__file__).resolve().parent

# Directories end with a slash; the rest are single files.
RUNS_ANSIBLE_CORE = (
    "plugins/modules/",
    "plugins/filter/",
    "plugins/module_utils/_modules/",
    "plugins/module_utils/_common/test_option_bounds.py",
    "roles/",
    "playbooks/",
    "meta/test_install_from_git.py",
)


def runs_ansible_core(relative_path: str) -> bool:
    """Whether the test file at this path under tests/unit is one of RUNS_ANSIBLE_CORE."""
    return relative_path.startswith(RUNS_ANSIBLE_CORE)


def pytest_collection_modifyitems(items):
    for item in items:
        path = Path(item.path).resolve()
        if UNIT_TESTS in path.parents and runs_ansible_core(path.relative_to(UNIT_TESTS).as_posix()):
            item.add_marker(pytest.mark.cores)
