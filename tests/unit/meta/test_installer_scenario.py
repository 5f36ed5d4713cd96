# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The `installer` Molecule scenario keeps the shape of Arvados' installer's inventory
(3.2.1 tools/ansible/install-arvados-cluster.yml and its examples) and stays apart from
the `cluster` scenario, and the test scripts run it: an inventory variable of the
collection's own that creeps in (recover_db, a slurm_controllers group), a subnet or a
container name shared with `cluster`, or a lane that no longer runs it fails here."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.unit.molecule_config import RUN_TESTS, SCENARIOS, load_molecule_yml

SCENARIO = SCENARIOS / "installer"
MOLECULE_SH = Path(RUN_TESTS).with_name("molecule.sh")
# The host groups install-arvados-cluster.yml (3.2.1) plays on.
INSTALLER_GROUPS = {
    "arvados_alloy",
    "arvados_api",
    "arvados_controller",
    "arvados_dispatch_cloud",
    "arvados_dispatch_local",
    "arvados_grafana",
    "arvados_keep_web",
    "arvados_keepbalance",
    "arvados_keepproxy",
    "arvados_keepstore",
    "arvados_loki",
    "arvados_postgresql",
    "arvados_prometheus",
    "arvados_shell",
    "arvados_websocket",
    "arvados_workbench",
}
# The collection's own groups, which the installer's inventory has not.
COLLECTION_GROUPS = {"slurm_controllers", "arvados_dispatchers", "crunch_v1_dispatcher", "slurm_compute"}


def platforms():
    return load_molecule_yml(SCENARIO / "molecule.yml")["platforms"]


def inventory_vars():
    return yaml.safe_load((SCENARIO / "inventory" / "group_vars" / "all.yml").read_text())


def test_the_inventory_has_the_installers_groups_two_api_hosts_and_one_site_group():
    groups = [group for platform in platforms() for group in platform["groups"]]
    assert groups.count("arvados_api") == 2
    assert not set(groups) & COLLECTION_GROUPS
    # Besides the installer's groups, only the site's group of its Slurm host.
    assert set(groups) - INSTALLER_GROUPS == {"slurm_site"}


def test_the_inventory_adds_only_where_slurm_is_to_the_installers_variables():
    variables = inventory_vars()
    assert {"arvados_config_file", "arvados_cluster_id"} <= set(variables)
    assert variables["recover_slurm_hosts"] == "slurm_site"
    added = {name for name in variables if name.startswith(("recover_", "reconcile_", "cancel_"))}
    assert added == {"recover_slurm_hosts"}


def test_its_hosts_and_network_are_apart_from_the_cluster_scenarios():
    cluster = load_molecule_yml(SCENARIOS / "cluster" / "molecule.yml")["platforms"]
    ours = platforms()
    assert not {platform["name"] for platform in ours} & {platform["name"] for platform in cluster}
    assert {platform["network"] for platform in ours} == {"arvados-recovery-installer"}
    subnets = {platform["ip"].rsplit(".", 1)[0] for platform in ours}
    assert len(subnets) == 1
    # The cluster scenario's subnets, one per Debian release (scripts/molecule.sh).
    assert not subnets & set(re.findall(r"subnet=([0-9.]+)", MOLECULE_SH.read_text()))


def test_the_cluster_lane_runs_it_after_the_cluster_scenario():
    text = Path(RUN_TESTS).read_text()
    assert re.search(r'^\s*run_lane "\$results" yes molecule:cluster molecule:installer\b', text, re.M)
    # Not also among the one-host scenarios the other lanes share out.
    assert re.search(r"^\s*case \"\$name\" in cluster \| installer\) continue ;; esac$", text, re.M)


def installer_example(path: str) -> str | None:
    """A file of Arvados' installer at 3.2.1 from $ARVADOS_SOURCE_GIT, or None without it."""
    git_dir = os.environ.get("ARVADOS_SOURCE_GIT")
    if not git_dir:
        return None
    shown = subprocess.run(
        ["git", "--git-dir", git_dir, "show", "3.2.1:tools/ansible/" + path],
        capture_output=True,
        text=True,
        check=False,
    )
    return shown.stdout if shown.returncode == 0 else None


def test_its_prometheus_is_the_installers_group_with_the_installers_file():
    groups = [group for platform in platforms() for group in platform["groups"]]
    assert groups.count("arvados_prometheus") == 1
    prometheus_vars = yaml.safe_load((SCENARIO / "inventory" / "group_vars" / "arvados_prometheus.yml").read_text())
    # The installer's variable; the alert's for: duration is the scenario's own, for verify.
    assert set(prometheus_vars) == {"arvados_prometheus_config_file", "recovery_watch_rules_for"}
    assert prometheus_vars["recovery_watch_rules_for"] == {"ArvadosStraySlurmJobs": "0s"}
    # The installer installs no node_exporter: the watch's host gets Debian's from the role.
    assert inventory_vars()["recovery_watch_install_node_exporter"] is True


def test_the_installers_example_defines_that_group_and_variable():
    example = installer_example("examples/full-cluster-inventory.yml")
    if example is None:
        pytest.skip("ARVADOS_SOURCE_GIT (a git directory of Arvados with tag 3.2.1) is not set")
    # Commented out there, as every optional group of the example.
    assert re.search(r"^#arvados_prometheus:\n(#.*\n)*?#    arvados_prometheus_config_file: ", example, re.M)
    playbook = installer_example("install-arvados-cluster.yml")
    assert re.search(r"^  hosts: arvados_prometheus$", playbook, re.M)
