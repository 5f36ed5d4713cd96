"""The roles' tags, as ansible-playbook itself resolves them (`--list-tasks`): each role's
tag selects all of its tasks, each group tag the checks and its own part, and no task of a
role is left without the role's tag (it would be skipped under `--tags <role>`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.roles.playbook_runs import run_ansible_playbook

REPO_ROOT = Path(__file__).resolve().parents[3]
SITE = REPO_ROOT / "playbooks" / "site.yml"
INVENTORY = REPO_ROOT / "playbooks" / "inventory" / "example.yml"
TASK_LINE = re.compile(r"^\s+arvados_ops\.recovery\.(\w+) : (.+?)\tTAGS: \[(.*)\]$")
ROLES = {
    "boot_recovery": ("boot_recovery_command", "boot_recovery_unit"),
    "dispatcher_config": ("dispatcher_config_settings", "dispatcher_config_unit"),
}


def listed_tasks(tags=None):
    """role -> {task name: set of tags} of the tasks site.yml would run with these tags."""
    arguments = ["-i", INVENTORY, SITE, "--list-tasks"]
    if tags:
        arguments += ["--tags", tags]
    completed = run_ansible_playbook(arguments, timeout=120, check=True)
    tasks = {}
    for line in completed.stdout.splitlines():
        match = TASK_LINE.match(line)
        if match and not match.group(2).startswith("Validating arguments"):
            tasks.setdefault(match.group(1), {})[match.group(2)] = set(filter(None, match.group(3).split(", ")))
    return tasks


@pytest.fixture(scope="module")
def every_task():
    return listed_tasks()


@pytest.mark.parametrize("role", sorted(ROLES))
def test_the_role_tag_selects_every_task_of_the_role(every_task, role):
    assert listed_tasks(role)[role] == every_task[role]


@pytest.mark.parametrize("role", sorted(ROLES))
def test_each_group_tag_selects_the_checks_and_its_own_part(every_task, role):
    groups = ROLES[role]
    checks = {name for name, tags in every_task[role].items() if set(groups) <= tags}
    assert checks, "no task runs under every tag of %s" % role
    parts = [set(listed_tasks(group)[role]) - checks for group in groups]
    assert all(parts), parts
    assert not parts[0] & parts[1]
    assert checks | parts[0] | parts[1] == set(every_task[role])
