# SPDX-License-Identifier: GPL-3.0-or-later
"""The units boot_recovery holds back until the cleanup is done, per Arvados release, as
Ansible itself resolves the role's variables (defaults/main.yml and vars/main.yml)."""

from __future__ import annotations

import json

import pytest

from tests.unit.roles.playbook_runs import REPO_ROOT, run_on_localhost

ROLE = REPO_ROOT / "roles" / "boot_recovery"

# 1.x: Nginx/Passenger serves the API, runit runs crunch-dispatch.rb (1.4.3 install docs);
# the websocket server (services/ws/arvados-ws.service, in the tags from 1.1.0) and from 1.2.0
# the controller (cmd/arvados-server/arvados-controller.service; lib/controller/handler.go at
# 1.4.3 opens the database) come with their units;
# 2.0 to 3.0: Nginx/Passenger still, plus controller and websocket; 3.1 on: arvados-railsapi.
UNITS_1_1 = ["nginx.service", "arvados-ws.service", "runit.service", "crunch-dispatch-slurm.service"]
UNITS_1_2 = [
    "nginx.service",
    "arvados-controller.service",
    "arvados-ws.service",
    "runit.service",
    "crunch-dispatch-slurm.service",
]
EXPECTED = {
    "1.1": UNITS_1_1,
    "1.1.4": UNITS_1_1,
    "1.2.0": UNITS_1_2,
    "1.4": UNITS_1_2,
    "1.4.3": UNITS_1_2,
    "2.0.0": ["nginx.service", "arvados-controller.service", "arvados-ws.service", "crunch-dispatch-slurm.service"],
    "2.7.4": ["nginx.service", "arvados-controller.service", "arvados-ws.service", "crunch-dispatch-slurm.service"],
    "3.0.0": ["nginx.service", "arvados-controller.service", "arvados-ws.service", "crunch-dispatch-slurm.service"],
    "3.1.2": [
        "arvados-railsapi.service",
        "arvados-controller.service",
        "arvados-ws.service",
        "crunch-dispatch-slurm.service",
    ],
    "3.2.1": [
        "arvados-railsapi.service",
        "arvados-controller.service",
        "arvados-ws.service",
        "crunch-dispatch-slurm.service",
    ],
}

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars_files: [%(role)s/defaults/main.yml, %(role)s/vars/main.yml]
  tasks:
    - name: Resolve the units held back, per release
      ansible.builtin.set_fact:
        resolved: "{{ resolved | default({}) | combine({item: __boot_recovery_before_units}) }}"
      loop: %(releases)s
      vars:
        boot_recovery_arvados_version: "{{ item }}"
    - name: Write them out
      ansible.builtin.copy:
        content: "{{ resolved | to_json }}"
        dest: %(output)s
        mode: "0600"
"""


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    directory = tmp_path_factory.mktemp("units")
    output = directory / "resolved.json"
    playbook = directory / "units.yml"
    playbook.write_text(PLAYBOOK % {"role": ROLE, "releases": json.dumps(sorted(EXPECTED)), "output": output})
    run_on_localhost(playbook)
    return json.loads(output.read_text())


@pytest.mark.parametrize("release", sorted(EXPECTED))
def test_the_units_held_back_are_the_releases_own(resolved, release):
    assert resolved[release] == EXPECTED[release]
