"""The lab's slurm.conf and the Molecule cluster scenario's carry the settings of one file,
lab/slurm_conf/shared-settings.conf, as written there; each adds only its own.

The scenario's template is rendered by ansible.builtin.template in a small playbook run
on this host, with the scenario's inventory variables and molecule.yml's hosts and groups
(no containers: Molecule itself does not run here).
"""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from lab import labctl
from tests.unit.lab.test_labctl import SLURMD_C, settings_for
from tests.unit.molecule_config import load_molecule_yml
from tests.unit.roles.playbook_runs import REPO_ROOT, run_ansible_playbook

SHARED_FILE = REPO_ROOT / "lab" / "slurm_conf" / "shared-settings.conf"
SCENARIO = REPO_ROOT / "extensions" / "molecule" / "cluster"
# What each site sets besides the shared settings: hosts, ports, paths, nodes, and the
# settings where they differ on purpose (each template's comments say why).
LAB_OWN = {
    "ClusterName",
    "SlurmctldHost",
    "SlurmctldPort",
    "SlurmdPort",
    "AuthInfo",
    "StateSaveLocation",
    "SlurmdSpoolDir",
    "SlurmctldPidFile",
    "SlurmdPidFile",
    "SlurmctldLogFile",
    "SlurmdLogFile",
    "SlurmdTimeout",
    "MaxJobCount",
    "Epilog",
    "NodeName",
    "PartitionName",
}
CLUSTER_OWN = {
    "ClusterName",
    "SlurmctldHost",
    "StateSaveLocation",
    "SlurmdSpoolDir",
    "SlurmctldPidFile",
    "SlurmdPidFile",
    "SlurmdTimeout",
    "SlurmdParameters",
    "NodeName",
    "PartitionName",
}


def settings(text: str) -> list[tuple[str, str]]:
    """(name, value) of every setting line, in order (NodeName lines too)."""
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _separator, value = line.partition("=")
            pairs.append((name, value))
    return pairs


SHARED = settings(SHARED_FILE.read_text())


def lab_conf() -> str:
    values = labctl.slurm_template_values(settings_for("/srv/lab"), labctl.parse_node_config(SLURMD_C))
    return labctl.render_template("slurm.conf.in", values)


@pytest.fixture(scope="module")
def cluster_conf(tmp_path_factory) -> str:
    """The scenario's slurm.conf.j2 as its prepare.yml renders it for the slurmctld host."""
    work = tmp_path_factory.mktemp("cluster-slurm-conf")
    molecule_yml = load_molecule_yml(SCENARIO / "molecule.yml")
    inventory = {"all": {"children": {}}}
    for platform in molecule_yml["platforms"]:
        for group in platform["groups"]:
            hosts = inventory["all"]["children"].setdefault(group, {"hosts": {}})["hosts"]
            hosts[platform["name"]] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (work / "inventory").mkdir()
    (work / "inventory" / "hosts.yml").write_text(json.dumps(inventory))
    (work / "inventory" / "group_vars").symlink_to(SCENARIO / "inventory" / "group_vars")
    (work / "molecule_yml.json").write_text(json.dumps({"molecule_yml": molecule_yml}))
    rendered = work / "slurm.conf"
    playbook = work / "render.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render the cluster scenario's slurm.conf",
                    "hosts": "slurm_controllers",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Write slurm.conf",
                            "ansible.builtin.template": {
                                "src": str(SCENARIO / "templates" / "slurm.conf.j2"),
                                "dest": str(rendered),
                                "mode": "0644",
                            },
                        }
                    ],
                }
            ]
        )
    )
    completed = run_ansible_playbook(
        ["-i", work / "inventory" / "hosts.yml", "-e", "@%s" % (work / "molecule_yml.json"), playbook],
        env=dict(os.environ, MOLECULE_PROJECT_DIRECTORY=str(REPO_ROOT), MOLECULE_EPHEMERAL_DIRECTORY=str(work)),
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return rendered.read_text()


@pytest.mark.parametrize("site", ["lab", "cluster"])
def test_each_slurm_conf_has_every_shared_setting_once_as_the_shared_file_says(site, request):
    conf = settings(lab_conf() if site == "lab" else request.getfixturevalue("cluster_conf"))
    for name, value in SHARED:
        assert [found for setting, found in conf if setting == name] == [value], name


@pytest.mark.parametrize(("site", "own"), [("lab", LAB_OWN), ("cluster", CLUSTER_OWN)])
def test_each_slurm_conf_adds_only_its_own_settings(site, own, request):
    """A setting added to one template only fails here: share it, or list it as the site's own."""
    conf = settings(lab_conf() if site == "lab" else request.getfixturevalue("cluster_conf"))
    assert {name for name, _value in conf} - {name for name, _value in SHARED} == own


def test_the_shared_settings_are_the_ones_both_sites_need(cluster_conf):
    shared = dict(SHARED)
    # The settings the two sites had drifted on, decided once.
    assert shared["UnkillableStepTimeout"] == "600" and shared["JobRequeue"] == "0"
    assert "SlurmdTimeout" not in shared
    assert dict(settings(lab_conf()))["SlurmdTimeout"] == "300"
    assert dict(settings(cluster_conf))["SlurmdTimeout"] == "10"


def test_the_cluster_conf_names_the_scenarios_hosts(cluster_conf):
    nodes = [value for name, value in settings(cluster_conf) if name == "NodeName"]
    assert [node.split()[:2] for node in nodes] == [
        ["compute1", "NodeAddr=10.89.67.21"],
        ["compute2", "NodeAddr=10.89.67.22"],
    ]
    assert dict(settings(cluster_conf))["SlurmctldHost"] == "slurmctld(10.89.67.11)"
