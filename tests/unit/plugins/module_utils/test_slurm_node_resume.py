# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_node_resume's engine against a scripted scontrol: only Slurm's reboot reason with a
slurmd that answers is resumed, check mode predicts and changes nothing."""

from __future__ import annotations

from typing import Dict, List

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils.slurm_node_resume import run_slurm_node_resume

BEFORE = """\
NodeName=c1 Arch=x86_64 CoresPerSocket=1
   State=DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]
NodeName=c2 Arch=x86_64 CoresPerSocket=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted; PSU swapped [root@2026-12-03T09:00:00]
NodeName=c3 Arch=x86_64 CoresPerSocket=1
   State=DOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]
NodeName=c4 Arch=x86_64 CoresPerSocket=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
"""
AFTER = BEFORE.replace(
    "   State=DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n"
    "   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]\n",
    "   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A\n",
    1,
)


class Handle:
    def __init__(self, returncode, stdout="", stderr=""):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def wait(self, timeout):
        return self.returncode

    def kill(self):
        pass

    def output(self):
        return self.stdout, self.stderr


class ScriptedScontrol:
    """show node answers the current text; update NodeName=c1 State=RESUME turns it to AFTER."""

    def __init__(self, refuse_update=False):
        self.text = BEFORE
        self.calls: List[List[str]] = []
        self.envs: List[Dict[str, str]] = []
        self.refuse_update = refuse_update

    def start(self, argv, env):
        self.calls.append(list(argv))
        self.envs.append(dict(env))
        if argv[-2:] == ["show", "node"]:
            return Handle(0, self.text)
        if self.refuse_update:
            return Handle(1, stderr="Invalid user for SlurmUser slurm, update request denied\n")
        if argv[-2:] == ["NodeName=c1", "State=RESUME"]:
            self.text = AFTER
        return Handle(0)


def run(slurm, names, check_mode=False, diff=False, **params):
    return run_slurm_node_resume(
        dict(params, name=names),
        check_mode=check_mode,
        diff=diff,
        find_program=lambda program: "/usr/bin/" + program,
        runner=slurm,
        environ={"PATH": "/bin", "SCONTROL_FUTURE": "1", "SLURM_CONF": "/etc/slurm/slurm.conf"},
    )


def updates(slurm):
    return [call for call in slurm.calls if "update" in call]


def test_only_slurms_reboot_reason_with_an_answering_slurmd_is_resumed():
    slurm = ScriptedScontrol()
    result = run(slurm, ["c1", "c2", "c3", "c4", "gone"])
    assert result["changed"] is True and result["resumed"] == ["c1"]
    assert updates(slurm) == [["/usr/bin/scontrol", "update", "NodeName=c1", "State=RESUME"]]
    why = {entry["name"]: entry["why"] for entry in result["refused"]}
    assert "an administrator's, left alone" in why["c2"]
    assert "NOT_RESPONDING" in why["c3"]
    assert "no such node" in why["gone"]
    assert result["in_service"] == ["c4"]
    assert result["nodes"]["c1"]["state"] is None and result["nodes"]["c1"]["slurm_state"] == "IDLE"
    assert result["nodes"]["c2"]["state"] == "drain"
    # SCONTROL_FUTURE would change the nodes shown; SLURM_CONF says which cluster.
    assert all("SCONTROL_FUTURE" not in env and env["SLURM_CONF"] for env in slurm.envs)


def test_a_second_run_changes_nothing():
    slurm = ScriptedScontrol()
    run(slurm, ["c1"])
    again = run(slurm, ["c1"])
    assert again["changed"] is False and again["resumed"] == [] and again["in_service"] == ["c1"]


def test_check_mode_says_which_it_would_resume_and_runs_no_update():
    slurm = ScriptedScontrol()
    result = run(slurm, ["c1", "c2"], check_mode=True, diff=True)
    assert result["changed"] is True and result["resumed"] == ["c1"]
    assert updates(slurm) == [] and len(slurm.calls) == 1
    assert result["diff"] == {
        "before": "c1 DOWN Node unexpectedly rebooted\nc2 IDLE+DRAIN Node unexpectedly rebooted; PSU swapped\n",
        "after": "c1 RESUME\nc2 IDLE+DRAIN Node unexpectedly rebooted; PSU swapped\n",
    }
    assert run(slurm, ["c2"], check_mode=True)["changed"] is False


def test_a_refused_update_fails_with_slurms_words():
    slurm = ScriptedScontrol(refuse_update=True)
    result = run(slurm, ["c1"])
    assert result["failed"] is True and result["changed"] is False and result["resumed"] == []
    assert "update request denied" in result["msg"] and result["errors"][0]["name"] == "c1"


@pytest.mark.parametrize(
    "names, message",
    [
        ([], "give at least one node name"),
        (["c[1-4]"], "no hostlist expression"),
        (["c1 State=DOWN"], "not a node name"),
        (["-h"], "not a node name"),
    ],
)
def test_bad_names_are_refused_before_scontrol_runs(names, message):
    slurm = ScriptedScontrol()
    with pytest.raises(ConfigError, match=message.replace("[", "\\[")):
        run(slurm, names)
    assert slurm.calls == []


def test_the_cluster_is_passed_to_every_scontrol():
    slurm = ScriptedScontrol()
    run(slurm, ["c1"], clusters="east")
    assert all("--clusters=east" in call for call in slurm.calls)
    with pytest.raises(ConfigError, match="clusters: one Slurm cluster"):
        run(ScriptedScontrol(), ["c1"], clusters="east,west")
