# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rulebook arvados_ops.recovery.heal against what it names: the source's findings and the
collection's remedy playbooks. Its conditions run in ansible-rulebook in
tests/integration/test_heal.py; here, that each remedy rule can be switched to notify-only,
and that the rule telling the rest leaves out exactly the findings healed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import findings

REPO_ROOT = Path(__file__).resolve().parents[3]
RULEBOOK = REPO_ROOT / "extensions" / "eda" / "rulebooks" / "heal.yml"
FINDING = re.compile(r'^event\.arvados_recovery\.finding == "(\w+)"\s+and "(\w+)" not in vars\.heal_notify_only$')


def rules():
    (ruleset,) = yaml.safe_load(RULEBOOK.read_text())
    return ruleset["rules"]


def remedies():
    """{finding: playbook} of the rules that run one."""
    healed = {}
    for rule in rules():
        if "run_playbook" in rule["action"]:
            match = FINDING.match(rule["condition"])
            assert match and match.group(1) == match.group(2), rule["condition"]
            assert match.group(1) not in healed, match.group(1)
            healed[match.group(1)] = rule["action"]["run_playbook"]["name"]
    return healed


def test_each_remedy_rule_heals_a_finding_of_the_source_unless_told_to_notify_only():
    healed = remedies()
    assert set(healed) <= set(findings.KINDS)
    assert healed == {
        "nodes_down_after_reboot": "arvados_ops.recovery.heal_nodes",
        "orphaned_jobs": "arvados_ops.recovery.heal_orphans",
        "stray_slurm_jobs": "arvados_ops.recovery.heal_orphans",
        "orphaned_containers": "arvados_ops.recovery.heal_orphans",
    }


def test_each_remedy_is_a_wrapper_importing_a_playbook_of_the_collection():
    for name in set(remedies().values()):
        wrapper = REPO_ROOT / "playbooks" / ("%s.yml" % name.rsplit(".", 1)[1])
        (play,) = yaml.safe_load(wrapper.read_text())
        imported = play["ansible.builtin.import_playbook"]
        assert imported.startswith("arvados_ops.recovery.heal."), imported
        assert (REPO_ROOT / "playbooks" / "heal" / ("%s.yml" % imported.rsplit(".", 1)[1])).is_file(), imported


def test_the_rule_that_tells_the_rest_leaves_out_exactly_the_findings_healed():
    (tell,) = [rule for rule in rules() if "print_event" in rule["action"]]
    left_out = re.match(
        r"^event\.arvados_recovery\.finding not in \[([^]]*)\]\s+"
        r"or event\.arvados_recovery\.finding in vars\.heal_notify_only$",
        tell["condition"],
    )
    assert left_out, tell["condition"]
    assert sorted(re.findall(r'"(\w+)"', left_out.group(1))) == sorted(remedies())


def test_the_remedies_decide_on_localhost_within_the_limit_the_rulebook_gives(tmp_path):
    """ansible-rulebook runs each remedy with --limit set to its ruleset's hosts; the remedies'
    gate and decision plays run on localhost, which an operator's inventory seldom names."""
    (ruleset,) = yaml.safe_load(RULEBOOK.read_text())
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"api1": {"ansible_host": "192.0.2.1"}}}}))
    playbook = tmp_path / "decide.yml"
    playbook.write_text(
        yaml.safe_dump(
            [{"name": "Decide", "hosts": "localhost", "gather_facts": False, "tasks": [{"ansible.builtin.ping": {}}]}]
        )
    )
    ansible_playbook = Path(sys.executable).parent / "ansible-playbook"
    run = subprocess.run(
        [str(ansible_playbook), "-i", str(inventory), "--limit", ruleset["hosts"], str(playbook)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert re.search(r"^localhost\s+: ok=1 ", run.stdout, re.M), run.stdout
    for name in ("nodes", "orphans"):
        plays = yaml.safe_load((REPO_ROOT / "playbooks" / "heal" / ("%s.yml" % name)).read_text())
        assert any(play.get("hosts") == "localhost" for play in plays), name
