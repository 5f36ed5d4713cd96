# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_node_resume's engine against a scripted scontrol: only Slurm's reboot reason with a
slurmd that answers is resumed, check mode predicts and changes nothing."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import runner as slurm_runner
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.node_resume import run_slurm_node_resume
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.runner import CommandNotFoundError
from tests.unit.plugins.module_utils.slurm_fakes import REBOOT_REASON, FakeNode, FakeScontrol


def scripted_scontrol(refuse_update=False):
    """c1 down after a reboot (resumable), c2 drained by root with Slurm's words in its
    reason, c3 down after a reboot but its slurmd not answering, c4 in service."""
    return FakeScontrol(
        [
            FakeNode("c1", "DOWN", REBOOT_REASON),
            FakeNode("c2", "IDLE+DRAIN", "Node unexpectedly rebooted; PSU swapped [root@2026-12-03T09:00:00]"),
            FakeNode("c3", "DOWN+NOT_RESPONDING", REBOOT_REASON),
            FakeNode("c4", "IDLE"),
        ],
        refuse_update=refuse_update,
    )


@pytest.fixture(autouse=True)
def scontrol(tmp_path, monkeypatch):
    """An scontrol on PATH, where the engine finds it (the scripted runner answers for it)."""
    path = tmp_path / "scontrol"
    path.write_text("")
    path.chmod(0o700)
    monkeypatch.setenv("PATH", str(tmp_path))
    return str(path)


def run(slurm, names, check_mode=False, diff=False, **params):
    return run_slurm_node_resume(
        dict(params, name=names),
        check_mode=check_mode,
        diff=diff,
        runner=slurm,
        environ={"PATH": "/bin", "SCONTROL_FUTURE": "1", "SLURM_CONF": "/etc/slurm/slurm.conf"},
    )


def test_only_slurms_reboot_reason_with_an_answering_slurmd_is_resumed(scontrol):
    slurm = scripted_scontrol()
    result = run(slurm, ["c1", "c2", "c3", "c4", "gone"])
    assert result["changed"] is True and result["resumed"] == ["c1"]
    assert slurm.updates() == [[scontrol, "update", "NodeName=c1", "State=RESUME"]]
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
    slurm = scripted_scontrol()
    run(slurm, ["c1"])
    again = run(slurm, ["c1"])
    assert again["changed"] is False and again["resumed"] == [] and again["in_service"] == ["c1"]


def test_check_mode_says_which_it_would_resume_and_runs_no_update():
    slurm = scripted_scontrol()
    result = run(slurm, ["c1", "c2"], check_mode=True, diff=True)
    assert result["changed"] is True and result["resumed"] == ["c1"]
    assert slurm.updates() == [] and len(slurm.calls) == 1
    assert result["diff"] == {
        "before": "c1 DOWN Node unexpectedly rebooted\nc2 IDLE+DRAIN Node unexpectedly rebooted; PSU swapped\n",
        "after": "c1 RESUME\nc2 IDLE+DRAIN Node unexpectedly rebooted; PSU swapped\n",
    }
    assert run(slurm, ["c2"], check_mode=True)["changed"] is False


def test_a_refused_update_fails_with_slurms_words():
    slurm = scripted_scontrol(refuse_update=True)
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
    slurm = scripted_scontrol()
    with pytest.raises(ConfigError, match=message.replace("[", "\\[")):
        run(slurm, names)
    assert slurm.calls == []


def test_a_call_without_names_is_refused_by_the_option_layer_before_scontrol_runs():
    slurm = scripted_scontrol()
    with pytest.raises(ConfigError, match="missing required option\\(s\\): name"):
        run(slurm, None)
    assert slurm.calls == []


def test_the_cluster_is_passed_to_every_scontrol():
    slurm = scripted_scontrol()
    run(slurm, ["c1"], clusters="east")
    assert all("--clusters=east" in call for call in slurm.calls)
    with pytest.raises(ConfigError, match="clusters: one Slurm cluster"):
        run(scripted_scontrol(), ["c1"], clusters="east,west")


def test_a_missing_scontrol_is_refused_naming_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(slurm_runner, "SBIN_DIRECTORIES", ())
    slurm = scripted_scontrol()
    with pytest.raises(CommandNotFoundError, match=r"^scontrol: not found in PATH, /sbin, /usr/sbin, /usr/local/sbin$"):
        run(slurm, ["c1"])
    assert slurm.calls == []
