# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_node_resume as Ansible runs it: its argument spec, check mode and diff, with a
stand-in scontrol found on PATH that prints a node list and logs its updates."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.modules import slurm_node_resume
from tests.unit.plugins.module_utils.slurm_fakes import REBOOT_REASON, FakeNode, scontrol_on_path
from tests.unit.plugins.modules.module_args import run_main

NODES = [
    FakeNode("c1", "DOWN", REBOOT_REASON),
    FakeNode("c2", "IDLE+DRAIN", "bad DIMM [root@2026-12-03T09:00:00]"),
]


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    """A scontrol on PATH: `show node` prints NODES, `update` appends its arguments to the
    log returned."""
    log = scontrol_on_path(tmp_path, NODES)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % tmp_path)
    return log


def run_module(args, capsys, check=False, diff=False):
    return run_main(slurm_node_resume, dict(args, _ansible_check_mode=check, _ansible_diff=diff), capsys)


def test_check_mode_predicts_and_runs_no_update(scontrol, capsys):
    result = run_module({"nodes": ["c1", "c2"]}, capsys, check=True, diff=True)
    assert result["changed"] is True and result["resumed"] == ["c1"]
    assert [entry["name"] for entry in result["refused"]] == ["c2"]
    assert result["diff"]["after"].startswith("c1 RESUME\n")
    assert not scontrol.exists()


def test_a_real_run_resumes_only_the_rebooted_node(scontrol, capsys):
    result = run_module({"name": ["c1", "c2"]}, capsys)
    assert result["changed"] is True and result["resumed"] == ["c1"]
    assert scontrol.read_text() == "update NodeName=c1 State=RESUME\n"


def test_name_is_required(scontrol, capsys):
    result = run_module({}, capsys)
    assert result["failed"] and "name" in result["msg"]
