"""One way for the role tests to run ansible-playbook from this checkout's virtualenv."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
ANSIBLE_PLAYBOOK = REPO_ROOT / ".venv" / "bin" / "ansible-playbook"


def run_on_localhost(playbook, *options, cwd=REPO_ROOT, environment=None, check=True):
    """ansible-playbook on localhost over the local connection, with this Python."""
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false", **(environment or {}))
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable]
        + [str(playbook)]
        + list(options),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=check,
    )
