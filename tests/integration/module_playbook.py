"""A playbook that runs one module a few times and keeps each result in a JSON file.

Shared by the integration tests of every module: the results are read back from the
files, which a task writes even in check mode, and a failing task does not stop the play.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Sequence

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
ANSIBLE_PLAYBOOK = REPO_ROOT / ".venv" / "bin" / "ansible-playbook"


def module_playbook(module: str, tasks: Sequence[Mapping[str, Any]],
                    result_files: Sequence[Path]) -> List[Dict[str, Any]]:
    """Each task is {'args': ..., 'check': bool, 'diff': bool}; results land in result_files."""
    play_tasks: List[Dict[str, Any]] = []
    for number, (task, result_file) in enumerate(zip(tasks, result_files)):
        play_tasks.append({
            "name": "%s %d" % (module.rsplit(".", 1)[-1], number),
            module: dict(task["args"]),
            "register": "outcome_%d" % number,
            "ignore_errors": True,
            "check_mode": bool(task.get("check", False)),
            "diff": bool(task.get("diff", False)),
        })
        play_tasks.append({
            "name": "keep result %d" % number,
            "ansible.builtin.copy": {
                "content": "{{ outcome_%d | to_json }}" % number,
                "dest": str(result_file),
                "mode": "0600",
            },
            "check_mode": False,
            "diff": False,
        })
    return [{
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": str(PYTHON)},
        "tasks": play_tasks,
    }]
