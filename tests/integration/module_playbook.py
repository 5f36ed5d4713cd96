"""A playbook that runs one module a few times and keeps each result in a JSON file, and
the real ansible-playbook run of it.

Shared by the integration tests of every module: the results are read back from the
files, which a task writes even in check mode, and a failing task does not stop the play.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.unit.roles.playbook_runs import ansible_playbook

REPO_ROOT = Path(__file__).resolve().parents[2]
PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
ANSIBLE_PLAYBOOK = ansible_playbook()


def module_playbook(
    module: str, tasks: Sequence[Mapping[str, Any]], result_files: Sequence[Path]
) -> list[dict[str, Any]]:
    """Each task is {'args': ..., 'check': bool, 'diff': bool}; results land in result_files."""
    play_tasks: list[dict[str, Any]] = []
    for number, (task, result_file) in enumerate(zip(tasks, result_files, strict=False)):
        play_tasks.append(
            {
                "name": "%s %d" % (module.rsplit(".", 1)[-1], number),
                module: dict(task["args"]),
                "register": "outcome_%d" % number,
                "ignore_errors": True,
                "check_mode": bool(task.get("check", False)),
                "diff": bool(task.get("diff", False)),
            }
        )
        play_tasks.append(
            {
                "name": "keep result %d" % number,
                "ansible.builtin.copy": {
                    "content": "{{ outcome_%d | to_json }}" % number,
                    "dest": str(result_file),
                    "mode": "0600",
                },
                "check_mode": False,
                "diff": False,
            }
        )
    return [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": str(PYTHON)},
            "tasks": play_tasks,
        }
    ]


@dataclasses.dataclass
class PlaybookRun:
    """A finished ansible-playbook run: each task's result, its output, its wall time."""

    results: list[dict[str, Any]]
    stdout: str
    stderr: str
    wall: float


@dataclasses.dataclass
class RunningPlaybook:
    process: subprocess.Popen
    result_files: list[Path]
    started: float

    def finish(self, timeout: float = 300) -> PlaybookRun:
        stdout, stderr = self.process.communicate(timeout=timeout)
        wall = time.monotonic() - self.started
        assert self.process.returncode == 0, "ansible-playbook failed:\n%s\n%s" % (stdout[-4000:], stderr[-4000:])
        results = [json.loads(path.read_text()) for path in self.result_files]
        return PlaybookRun(results, stdout, stderr, wall)


def start_playbook(
    module: str, env: Mapping[str, str], directory: Path, tasks: Sequence[Mapping[str, Any]]
) -> RunningPlaybook:
    """ansible-playbook running module_playbook(module, tasks) in the background."""
    run_id = uuid.uuid4().hex[:8]
    result_files = [directory / ("result-%s-%d.json" % (run_id, number)) for number in range(len(tasks))]
    playbook_path = directory / ("playbook-%s.yml" % run_id)
    playbook_path.write_text(json.dumps(module_playbook(module, tasks, result_files), indent=2))
    started = time.monotonic()
    process = subprocess.Popen(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", str(playbook_path)],
        # ansible-core refuses a non-UTF-8 locale; the modules set LC_ALL=C for Slurm itself.
        cwd=str(REPO_ROOT),
        env=dict(env, LC_ALL="C.UTF-8"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return RunningPlaybook(process, result_files, started)


def run_playbook(
    module: str, env: Mapping[str, str], directory: Path, tasks: Sequence[Mapping[str, Any]], timeout: float = 300
) -> PlaybookRun:
    return start_playbook(module, env, directory, tasks).finish(timeout)
