"""The recovery playbooks give the database settings to the modules of the `database`
action group (meta/runtime.yml) only as module_defaults of that group, from recover_db or
reconcile_db: no task passes a database option by hand, so no option can be left out of a
hand-made copy again (db_ca_cert once was), and every database task hides its output when
a key of those settings names a password."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
PLAYBOOKS = sorted((REPO_ROOT / "playbooks").glob("*.yml"))
GROUP = "group/arvados_ops.recovery.database"
# The play variable each playbook builds from the user's variable, and that variable.
SETTINGS = {"{{ recover__db }}": "recover_db", "{{ reconcile__db }}": "reconcile_db"}


def database_modules() -> set[str]:
    groups = yaml.safe_load((REPO_ROOT / "meta" / "runtime.yml").read_text())["action_groups"]
    return {"arvados_ops.recovery." + name for name in groups["database"]}


def database_options() -> set[str]:
    """The options of the doc fragment the database modules share, and their aliases."""
    tree = ast.parse((REPO_ROOT / "plugins" / "doc_fragments" / "arvados_db.py").read_text())
    text = next(
        node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DOCUMENTATION" for t in node.targets)
    )
    options = yaml.safe_load(text)["options"]
    return set(options) | {alias for spec in options.values() for alias in spec.get("aliases", [])}


def tasks_of(tasks) -> Iterator[dict]:
    for task in tasks or []:
        yield task
        for section in ("block", "rescue", "always"):
            yield from tasks_of(task.get(section))


def play_vars(playbook: Path, play: dict) -> dict:
    """The play's variables: its vars_files (relative to the playbook), then its vars."""
    files = play.get("vars_files") or []
    merged: dict = {}
    for name in [files] if isinstance(files, str) else files:
        merged.update(yaml.safe_load((playbook.parent / name).read_text()))
    merged.update(play.get("vars") or {})
    return merged


def database_tasks() -> list[tuple[str, dict, str, dict]]:
    """(playbook, play, module, task) for every task of a database module; each play
    given its variables merged as play_vars reads them, under "vars"."""
    modules = database_modules()
    found = []
    for playbook in PLAYBOOKS:
        for play in yaml.safe_load(playbook.read_text()):
            play = dict(play, vars=play_vars(playbook, play))
            for task in tasks_of(play.get("tasks")):
                for module in modules.intersection(task):
                    found.append((playbook.name, play, module, task))
    return found


DATABASE_TASKS = database_tasks()


def test_both_recovery_playbooks_have_database_tasks():
    assert sorted({playbook for playbook, *_rest in DATABASE_TASKS}) == [
        "recover_after_node_reboot.yml",
        "recover_after_reboot.yml",
    ]
    assert len(DATABASE_TASKS) == 4


@pytest.mark.parametrize(
    ("play", "module", "task"),
    [entry[1:] for entry in DATABASE_TASKS],
    ids=["%s: %s" % (entry[0], entry[3]["name"]) for entry in DATABASE_TASKS],
)
def test_a_database_task_takes_its_settings_from_the_groups_module_defaults(play, module, task):
    settings = play.get("module_defaults", {}).get(GROUP)
    assert settings in SETTINGS, "play %r: module_defaults %r" % (play["name"], play.get("module_defaults"))
    play_variable = settings.strip("{} ")
    # The user's variable first (an installer's arvados_config_file is read only without it).
    assert play["vars"][play_variable].startswith("{{ %s if %s is defined" % ((SETTINGS[settings],) * 2))
    assert sorted(database_options().intersection(task[module])) == []
    # The play's own test for a key naming a password, of the same settings.
    secret = task["no_log"].strip("{} ")
    assert play["vars"][secret] == "{{ %s | arvados_ops.recovery.names_a_password }}" % play_variable
