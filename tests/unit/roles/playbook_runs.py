"""One way for the role tests to run ansible-playbook from this checkout's virtualenv."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]


def ansible_playbook():
    """$TEST_ANSIBLE_PLAYBOOK (an integration file run by hand on another core: the modules
    still run on this Python), else the ansible-playbook of the virtualenv these tests run
    in, so that the version stage runs the roles on each ansible-core it tests; the
    project's .venv when there is none."""
    if os.environ.get("TEST_ANSIBLE_PLAYBOOK"):
        return Path(os.environ["TEST_ANSIBLE_PLAYBOOK"])
    beside_python = Path(sys.executable).with_name("ansible-playbook")
    return beside_python if beside_python.exists() else REPO_ROOT / ".venv" / "bin" / "ansible-playbook"


ANSIBLE_PLAYBOOK = ansible_playbook()
# A core outside meta/runtime.yml's requires_ansible refuses the collection instead of
# warning, as CI setups often configure it.
STRICT_VERSION = {"ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH": "error"}
CHANGED = re.compile(r"^localhost\s+:.*\bchanged=(\d+).*\bfailed=(\d+)", re.M)


def run_ansible_playbook(arguments, env=None, cwd=REPO_ROOT, timeout=300, check=False):
    """The one way the tests run ansible-playbook: ANSIBLE_PLAYBOOK with these arguments,
    in `env` (default: this process's) with a UTF-8 locale (ansible-core refuses another;
    the modules set LC_ALL=C for Slurm themselves) and the version mismatch made an error;
    a deprecation warning fails the test."""
    completed = subprocess.run(
        [str(ANSIBLE_PLAYBOOK)] + [str(argument) for argument in arguments],
        cwd=str(cwd),
        env=dict(os.environ if env is None else env, LC_ALL="C.UTF-8", **STRICT_VERSION),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )
    assert_no_deprecation(completed)
    return completed


def run_on_localhost(playbook, *options, cwd=REPO_ROOT, environment=None, check=True):
    """ansible-playbook on localhost over the local connection, with this Python."""
    return run_ansible_playbook(
        ["-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable, playbook, *options],
        env=dict(os.environ, ANSIBLE_LOCALHOST_WARNING="false", **(environment or {})),
        cwd=cwd,
        check=check,
    )


def assert_no_deprecation(completed):
    """What a core deprecates in the roles shows on the core that announces it, long before
    the one that removes it."""
    output = completed.stdout + completed.stderr
    assert "[DEPRECATION WARNING]" not in output, output[-4000:]


def collections_in(tmp_path):
    """The collection under the name the roles are called by, from this checkout."""
    namespace = tmp_path / "collections" / "ansible_collections" / "arvados_ops"
    namespace.mkdir(parents=True)
    (namespace / "recovery").symlink_to(REPO_ROOT)
    return tmp_path / "collections"


def run(collections, tmp_path, play, variables, *options, succeeds=True):
    """ansible-playbook of this play with these variables (extra vars): (stdout, changed)."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps(variables))
    completed = run_on_localhost(
        playbook,
        "-e",
        "@%s" % extra,
        *options,
        cwd=tmp_path,
        environment={"ANSIBLE_COLLECTIONS_PATH": str(collections), "ANSIBLE_NOCOLOR": "1"},
        check=False,
    )
    recap = CHANGED.search(completed.stdout)
    assert recap, completed.stdout[-4000:] + completed.stderr
    ran_clean = completed.returncode == 0 and recap.group(2) == "0"
    assert ran_clean == succeeds, completed.stdout[-4000:] + completed.stderr
    return completed.stdout, int(recap.group(1))


def dispatcher_variables(tmp_path, release):
    variables = {
        "dispatcher_config_arvados_version": release,
        "dispatcher_config_cluster_file": str(tmp_path / "config.yml"),
        "dispatcher_config_legacy_file": str(tmp_path / "crunch-dispatch-slurm" / "crunch-dispatch-slurm.yml"),
        "dispatcher_config_helper_dir": str(tmp_path / "helper"),
        "dispatcher_config_python": sys.executable,
        "dispatcher_config_install_packages": False,
        "dispatcher_config_restart_on_change": False,
        # The handlers would reload the host's systemd where it runs: this says it does not.
        "__dispatcher_config_systemd": {"stat": {"exists": False}},
    }
    if release == "1.4":
        variables.update(dispatcher_config_api_host="zzzzz.example:443", dispatcher_config_auth_token="secret-token")
    else:
        variables.update(
            dispatcher_config_cluster_id="zzzzz",
            dispatcher_config_system_root_token="secret-root-token",
            dispatcher_config_controller_url="https://zzzzz.example",
            dispatcher_config_internal_urls=["http://localhost:9006"],
            dispatcher_config_postgresql_connection={"host": "db", "password": "secret-pw"},
        )
    return variables


def role_tasks_play(tasks_from, name, role="arvados_ops.recovery.boot_recovery"):
    """A play on localhost that runs one task file of a role (its checks, its options file)."""
    return {
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [{"name": name, "ansible.builtin.include_role": {"name": role, "tasks_from": tasks_from}}],
    }


DISPATCHER_PLAY = {
    "hosts": "localhost",
    "gather_facts": False,
    "roles": ["arvados_ops.recovery.dispatcher_config"],
}
