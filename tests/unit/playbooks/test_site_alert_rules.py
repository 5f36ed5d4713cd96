# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""site.yml's play of the alert rules, run for real on this machine (local connection, every
path in a temporary directory, the real promtool): on an inventory of Arvados' installer it
runs on the arvados_prometheus hosts, reads the installer's prometheus.yml on the controller
(arvados_prometheus_config_file) and says what to add to it, editing neither that file nor
the host's copy; --check writes nothing, a second run changes nothing; recover_prometheus_hosts
names other hosts; without such a host there is no play, and no warning about it."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit.roles.playbook_runs import collections_in, run_ansible_playbook

REPO_ROOT = Path(__file__).resolve().parents[3]
SITE = REPO_ROOT / "playbooks" / "site.yml"
RULES = REPO_ROOT / "prometheus" / "arvados_recovery_rules.yml"
RULES_PLAY = "PLAY [Install the watch's alert rules where Prometheus runs]"
SAY_TASK = "TASK [arvados_ops.recovery.recovery_watch : Say whether Prometheus reads the alert rules]"
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes the rules as root:root")


def write_config(path: Path, rule_files) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"global": {"evaluation_interval": "15s"}, "rule_files": rule_files}))
    return path.read_bytes()


def installer_inventory(tmp_path: Path, groups: dict, **all_vars) -> Path:
    """The installer's variables in `all` (no Slurm or API host: only the rules' play runs),
    these groups of the local host, the role's paths in the temporary directory."""
    inventory = {
        "all": {
            "vars": {
                "arvados_cluster_id": "zzzzz",
                "recovery_watch_rules_dir": str(tmp_path / "rules"),
                "recovery_watch_prometheus_config": str(tmp_path / "host" / "prometheus.yml"),
                **all_vars,
            }
        },
        **{name: {"hosts": {"monitor": LOCAL}, "vars": variables} for name, variables in groups.items()},
    }
    path = tmp_path / "inventory.yml"
    path.write_text(json.dumps(inventory))
    return path


def run_site(tmp_path: Path, inventory: Path, *options: str):
    completed = run_ansible_playbook(
        ["-i", inventory, SITE, *options],
        env=dict(
            os.environ,
            ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_LOCALHOST_WARNING="false",
        ),
        cwd=tmp_path,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr
    recap = re.search(r"^monitor\s+:.*\bchanged=(\d+)", completed.stdout, re.M)
    return completed, int(recap.group(1)) if recap else None


def said(stdout: str) -> list:
    task = stdout.split(SAY_TASK)[1]
    return yaml.safe_load(task[task.index("{") : task.index("\n}") + 2])["msg"]


def test_on_the_installers_prometheus_hosts_the_rules_go_in_and_its_file_is_only_read(tmp_path):
    collections_in(tmp_path)
    controller = tmp_path / "controller" / "prometheus.yml"
    controller_before = write_config(controller, None)
    host_before = write_config(tmp_path / "host" / "prometheus.yml", None)
    inventory = installer_inventory(
        tmp_path, {"arvados_prometheus": {"arvados_prometheus_config_file": str(controller)}}
    )
    installed = tmp_path / "rules" / "arvados_recovery_rules.yml"

    predicted, changed = run_site(tmp_path, inventory, "--check")
    assert RULES_PLAY in predicted.stdout
    assert changed == 2 and not installed.exists()

    done, changed = run_site(tmp_path, inventory)
    assert changed == 2 and installed.read_bytes() == RULES.read_bytes()
    message = said(done.stdout)
    assert ("no rule_files entry of %s on the controller" % controller) in message[0]
    assert message[1:3] == ["rule_files:", "  - %s/*.yml" % (tmp_path / "rules")]
    command = "ansible-playbook -i %s install-arvados-cluster.yml" % inventory
    assert message[3].startswith("Then run the installer, `%s`" % command)
    assert controller.read_bytes() == controller_before
    assert (tmp_path / "host" / "prometheus.yml").read_bytes() == host_before

    assert run_site(tmp_path, inventory)[1] == 0


def test_recover_prometheus_hosts_names_another_group(tmp_path):
    collections_in(tmp_path)
    write_config(tmp_path / "host" / "prometheus.yml", [str(tmp_path / "rules" / "*.yml")])
    inventory = installer_inventory(tmp_path, {"monitoring": {}}, recover_prometheus_hosts="monitoring")

    done, changed = run_site(tmp_path, inventory)
    assert changed == 2 and (tmp_path / "rules" / "arvados_recovery_rules.yml").exists()
    assert said(done.stdout)[0].startswith("recovery_watch: Prometheus reads the alert rules")


@pytest.mark.parametrize("inventory_vars", [{}, {"recover_site_watch": False}])
def test_without_a_prometheus_host_or_with_the_watch_left_out_nothing_is_installed(tmp_path, inventory_vars):
    collections_in(tmp_path)
    groups = {"arvados_prometheus": {}} if inventory_vars else {"arvados_keepstore": {}}
    done = run_site(tmp_path, installer_inventory(tmp_path, groups, **inventory_vars))[0]
    assert not (tmp_path / "rules").exists()
    rules_play = done.stdout.split(RULES_PLAY)[1]
    if inventory_vars:
        assert "ok: [monitor]" not in rules_play and "changed: [monitor]" not in rules_play
    else:
        assert rules_play.lstrip("* \n").startswith("skipping: no hosts matched")
    assert "Could not match supplied host pattern, ignoring: recover__prometheus" not in done.stdout + done.stderr
