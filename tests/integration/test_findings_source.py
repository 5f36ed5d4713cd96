"""The event source arvados_ops.recovery.findings in a real ansible-rulebook (PyPI's, on
Debian's Java 17), on the lab: PostgreSQL with a fresh database per test and Slurm with a
real Slurm job. The rulebook prints the first event of the source and shuts down; the test
reads the event back from ansible-rulebook's own output."""

from __future__ import annotations

import ast
import os
import subprocess
import time
from pathlib import Path

import yaml

from tests.integration import reconcile_helpers as rh
from tests.integration.module_playbook import REPO_ROOT

RULEBOOK_CLI = REPO_ROOT / ".venv" / "bin" / "ansible-rulebook"
INTERVAL = 5


# Where nothing listens: tcpmux's port, which no Debian service serves.
NO_DATABASE_PORT = 1


def rulebook_env(lab_env) -> dict:
    env = {key: value for key, value in lab_env.items() if key != "JOURNAL_STREAM"}
    # ansible-rulebook finds the collection with ansible-galaxy (through ansible.cfg's
    # path), which refuses a locale that is not UTF-8.
    env["PATH"] = "%s:%s" % (RULEBOOK_CLI.parent, env.get("PATH", os.defpath))
    env["LC_ALL"] = "C.UTF-8"
    return env


def run_rulebook(lab_env, tmp_path: Path, rulebook: list, timeout: float) -> subprocess.CompletedProcess:
    (tmp_path / "rulebook.yml").write_text(yaml.safe_dump(rulebook))
    (tmp_path / "inventory.yml").write_text("all: {hosts: {localhost: {ansible_connection: local}}}\n")
    return subprocess.run(
        [str(RULEBOOK_CLI), "-r", str(tmp_path / "rulebook.yml"), "-i", str(tmp_path / "inventory.yml")],
        cwd=str(REPO_ROOT),
        env=rulebook_env(lab_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def first_event(lab_env, tmp_path: Path, source_args: dict, finding: str, timeout: float = 120):
    """ansible-rulebook run until the source's first `finding` event: (event, seconds, output)."""
    rulebook = [
        {
            "name": "the first finding",
            "hosts": "all",
            "sources": [{"arvados_ops.recovery.findings": dict(source_args, interval=INTERVAL)}],
            "rules": [
                {
                    "name": "print it and stop",
                    "condition": 'event.arvados_recovery.finding == "%s"' % finding,
                    "actions": [{"print_event": None}, {"shutdown": {"delay": 0}}],
                }
            ],
        }
    ]
    began = time.monotonic()
    completed = run_rulebook(lab_env, tmp_path, rulebook, timeout)
    seconds = time.monotonic() - began
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    printed = [line for line in completed.stdout.splitlines() if line.startswith("{'arvados_recovery'")]
    assert len(printed) == 1, output
    return ast.literal_eval(printed[0])["arvados_recovery"], seconds, output


def source_args(fresh_db, tmp_path: Path) -> dict:
    return {
        "config_file": str(fresh_db.write_arvados_config(tmp_path / "config.yml")),
        "cluster_prefix": rh.PREFIX,
        "settle": 1,
        "db_wait": 0,
    }


def test_an_orphan_two_reads_see_is_one_event_naming_it_alone(
    lab_env, linked_collection, fresh_db, slurm, records, tmp_path
):
    orphan = records.container("Locked")
    # A live container with its Slurm job: no finding, and the evidence that Slurm lists.
    live = records.container("Running")
    slurm.submit(live, hold=True)

    event, seconds, output = first_event(lab_env, tmp_path, source_args(fresh_db, tmp_path), "orphaned_containers")

    assert (event["names"], event["count"], event["read_ok"]) == ([orphan], 1, True)
    assert event["details"][orphan]["state"] == "Locked"
    assert event["cluster_prefix"] == rh.PREFIX and event["database_is_standby"] is False
    assert event["first_read_at"] < event["read_at"]
    # The second read, an interval after the first: not sooner.
    assert seconds >= INTERVAL
    assert fresh_db.lab.db_password() not in output


def test_a_database_that_does_not_answer_is_a_read_failed_event_after_two_reads(lab_env, linked_collection, tmp_path):
    args = {
        "db_host": "127.0.0.1",
        "db_port": NO_DATABASE_PORT,
        "db_name": "arvados",
        "db_user": "arvados",
        "db_wait": 0,
    }

    event, _seconds, output = first_event(lab_env, tmp_path, args, "read_failed")

    assert (event["names"], event["read_ok"], event["dispatcher"]) == (["read"], False, None)
    assert "cannot connect to the database" in event["details"]["read"]["message"]
    assert output.count("read failed: cannot connect") >= 2


def test_a_bad_option_stops_the_rulebook_with_the_option_s_name(lab_env, linked_collection, tmp_path):
    rulebook = [
        {
            "name": "bad",
            "hosts": "all",
            "sources": [{"arvados_ops.recovery.findings": {"interval": 1}}],
            "rules": [{"name": "never", "condition": "event.x is defined", "action": {"print_event": None}}],
        }
    ]
    completed = run_rulebook(lab_env, tmp_path, rulebook, timeout=60)
    assert completed.returncode != 0
    assert "interval" in completed.stdout + completed.stderr
