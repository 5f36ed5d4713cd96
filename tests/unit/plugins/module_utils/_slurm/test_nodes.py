# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Nodes down or drained, read from scontrol show node of each release, and which may resume."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.nodes import (
    SLURM_REBOOT_REASON,
    is_unexpected_reboot,
    node_reason_class,
    nodes_line,
    parse_show_node,
    parse_state,
    resume_command,
    show_node_command,
    unavailable,
    why_not_resumable,
)

# 20.11 (src/api/node_info.c): node_state_string of the state less DRAIN, then "+DRAIN";
# Reason= ends the lines before Comment=.
SHOW_NODE_20_11 = """\
NodeName=compute1 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUTot=2 CPULoad=0.01
   AvailableFeatures=(null)
   NodeAddr=10.0.0.1 NodeHostName=compute1 Version=20.11.9
   RealMemory=2000 AllocMem=0 FreeMem=1500 Sockets=2 Boards=1
   State=DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug
   BootTime=2026-12-03T10:00:00 SlurmdStartTime=2026-12-03T10:00:05
   CfgTRES=cpu=2,mem=2000M,billing=2
   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]
   Comment=(null)

NodeName=compute2 Arch=x86_64 CoresPerSocket=1
   State=DOWN*+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]
   Comment=(null)

NodeName=compute3 Arch=x86_64 CoresPerSocket=1
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=disk | replaced, State=IDLE soon [root@2026-12-03T09:00:00]
   Comment=(null)

NodeName=compute4 Arch=x86_64 CoresPerSocket=1
   State=ALLOCATED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   NextState=IDLE
   Reason=Node unexpectedly rebooted: and then some [admin@2026-12-03T09:00:00]
   Comment=(null)

NodeName=compute5 Arch=x86_64 CoresPerSocket=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Comment=(null)

NodeName=compute6 Arch=x86_64 CoresPerSocket=1
   State=DOWN~ ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]
   Comment=(null)

"""

# 22.05.8, as the lab's slurmctld printed it; 24.11 and 25.11 print the same lines, Comment=
# and Extra= only when set.
SHOW_NODE_22_05 = """\
NodeName=localhost Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.28
   AvailableFeatures=(null)
   ActiveFeatures=(null)
   Gres=(null)
   NodeAddr=127.0.0.1 NodeHostName=localhost Version=22.05.8
   OS=Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0
   RealMemory=24105 AllocMem=0 FreeMem=22751 Sockets=2 Boards=1
   State=DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug
   BootTime=2026-12-03T07:45:44 SlurmdStartTime=2026-12-03T14:25:26
   LastBusyTime=2026-12-03T14:25:26
   CfgTRES=cpu=2,mem=24105M,billing=2
   AllocTRES=
   CapWatts=n/a
   CurrentWatts=0 AveWatts=0
   ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s
   Reason=Node unexpectedly rebooted [root@2026-12-03T14:30:14]

"""

SHOW_NODE_25_11 = """\
NodeName=c1 Arch=x86_64 CoresPerSocket=1
   State=DOWN+DRAIN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]
   Comment=rack 4
NodeName=c2 Arch=x86_64 CoresPerSocket=1
   State=IDLE+DRAIN+POWERED_DOWN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=first line [root@2026-12-03T09:00:00]
          second line | with = signs
   Extra=x
NodeName=c3 Arch=x86_64 CoresPerSocket=1
   State=MIXED+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted
NodeName=c4 Arch=x86_64 CoresPerSocket=1
   State=DOWN+REBOOT_REQUESTED ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Reason=Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]
"""


def by_name(text):
    return {node.name: node for node in parse_show_node(text)}


@pytest.mark.parametrize(
    "text, base, flags",
    [
        ("DOWN", "DOWN", ()),
        ("DOWN*", "DOWN", ("NOT_RESPONDING",)),
        ("DOWN*+DRAIN", "DOWN", ("DRAIN", "NOT_RESPONDING")),
        ("DOWN+DRAIN+NOT_RESPONDING", "DOWN", ("DRAIN", "NOT_RESPONDING")),
        ("IDLE+DRAIN", "IDLE", ("DRAIN",)),
        ("IDLE~+DRAIN", "IDLE", ("DRAIN", "POWERED_DOWN")),
        ("MIXED#", "MIXED", ("POWERING_UP",)),
        ("ALLOCATED%+DRAIN", "ALLOCATED", ("DRAIN", "POWERING_DOWN")),
        ("IDLE!", "IDLE", ("POWER_DOWN",)),
        ("DRAINED$", "DRAINED", ("MAINTENANCE",)),
        ("DOWN@", "DOWN", ("REBOOT_REQUESTED",)),
        ("DOWN^", "DOWN", ("REBOOT_ISSUED",)),
        ("MIXED-", "MIXED", ("PLANNED",)),
    ],
)
def test_states_of_every_release_give_base_and_flags(text, base, flags):
    assert parse_state(text) == (base, flags)


def test_scontrol_of_20_11():
    nodes = by_name(SHOW_NODE_20_11)
    assert sorted(nodes) == ["compute%d" % n for n in range(1, 7)]
    assert (nodes["compute1"].state, nodes["compute1"].reason) == ("down", SLURM_REBOOT_REASON)
    assert (nodes["compute1"].reason_user, nodes["compute1"].reason_time) == ("slurm", "2026-12-03T10:00:06")
    assert nodes["compute2"].state == "down" and not nodes["compute2"].slurmd_responding
    assert nodes["compute3"].state == "drain"
    # A reason holding spaces, "|", "=" and even "State=" stays whole, and State= is the node's.
    assert nodes["compute3"].reason == "disk | replaced, State=IDLE soon"
    assert nodes["compute3"].slurm_state == "IDLE+DRAIN"
    assert nodes["compute4"].state == "drain" and nodes["compute4"].slurm_state == "ALLOCATED+DRAIN"
    assert nodes["compute5"].state is None and nodes["compute5"].reason is None
    assert nodes["compute6"].flags == ("POWERED_DOWN",)


def test_scontrol_of_22_05_as_the_lab_prints_it():
    (node,) = parse_show_node(SHOW_NODE_22_05)
    assert node.describe() == {
        "name": "localhost",
        "state": "down",
        "reason": SLURM_REBOOT_REASON,
        "reason_is_unexpected_reboot": True,
        "slurm_state": "DOWN",
        "slurmd_responding": True,
        "reason_set_by": "root",
        "reason_set_at": "2026-12-03T14:30:14",
    }


def test_scontrol_of_25_11_complete_states_and_a_reason_of_two_lines():
    nodes = by_name(SHOW_NODE_25_11)
    assert nodes["c1"].state == "down" and nodes["c1"].flags == ("DRAIN", "NOT_RESPONDING")
    assert nodes["c2"].reason == "first line\nsecond line | with = signs"
    assert nodes["c2"].reason_user == "root"
    # A reason set without a time (never by scontrol update, but read as it comes).
    assert nodes["c3"].reason == SLURM_REBOOT_REASON and nodes["c3"].reason_user is None


def test_only_nodes_down_or_drained_are_reported_by_name():
    entries = unavailable(parse_show_node(SHOW_NODE_20_11))
    assert [(entry["name"], entry["state"]) for entry in entries] == [
        ("compute1", "down"),
        ("compute2", "down"),
        ("compute3", "drain"),
        ("compute4", "drain"),
        ("compute6", "down"),
    ]
    assert [entry["reason_is_unexpected_reboot"] for entry in entries] == [True, True, False, False, True]


def test_the_reboot_reason_is_slurms_exactly():
    assert is_unexpected_reboot("Node unexpectedly rebooted")
    assert is_unexpected_reboot("Node unexpectedly rebooted [slurm@2026-12-03T10:00:00]")
    assert not is_unexpected_reboot("Node unexpectedly rebooted: and then some")
    assert not is_unexpected_reboot("Node unexpectedly rebooted, disk replaced [root@2026-12-03T10:00:00]")
    assert not is_unexpected_reboot("Not responding")
    assert not is_unexpected_reboot(None)
    assert node_reason_class("Node unexpectedly rebooted") == "unexpected_reboot"
    assert node_reason_class("maintenance") == "other"


def test_only_a_reboot_reason_with_a_slurmd_that_answers_may_resume():
    nodes = dict(by_name(SHOW_NODE_20_11), **by_name(SHOW_NODE_25_11))
    assert why_not_resumable(nodes["compute1"]) is None
    assert why_not_resumable(nodes["c3"]) is None
    assert "NOT_RESPONDING" in why_not_resumable(nodes["compute2"])
    assert "NOT_RESPONDING" in why_not_resumable(nodes["c1"])
    assert "administrator" in why_not_resumable(nodes["compute3"])
    assert "administrator" in why_not_resumable(nodes["compute4"])
    assert "in service" in why_not_resumable(nodes["compute5"])
    assert "POWERED_DOWN" in why_not_resumable(nodes["compute6"])
    assert "REBOOT_REQUESTED" in why_not_resumable(nodes["c4"])
    assert "no such node" in why_not_resumable(None)


def test_commands_are_argv_lists():
    assert show_node_command("/usr/bin/scontrol") == ["/usr/bin/scontrol", "--all", "show", "node"]
    assert show_node_command("scontrol", "east") == ["scontrol", "--all", "--clusters=east", "show", "node"]
    assert resume_command("scontrol", "compute1") == ["scontrol", "update", "NodeName=compute1", "State=RESUME"]


def test_the_summary_line_says_which_nodes_were_resumed_and_which_left_alone():
    nodes = unavailable(parse_show_node(SHOW_NODE_20_11))
    resume = {"resumed": ["compute1"], "refused": [{"name": "compute2", "why": "state DOWN*+DRAIN: NOT_RESPONDING"}]}
    line = nodes_line(nodes, resume, False)
    assert line.startswith("5 Slurm nodes down or drained: compute1 down (Node unexpectedly rebooted), ")
    assert "compute3 drain (disk | replaced, State=IDLE soon)" in line
    assert "; resumed: compute1; left alone: compute2: state DOWN*+DRAIN: NOT_RESPONDING" in line
    assert line.endswith("; 2 with another reason left alone")
    assert "; would resume: compute1;" in nodes_line(nodes, resume, True)
    assert "(recover_resume_nodes=true resumes those down for Slurm's 'Node unexpectedly rebooted' whose" in (
        nodes_line(nodes, None, False)
    )
    assert nodes_line(nodes[2:4], None, False).endswith(
        "none has Slurm's reason 'Node unexpectedly rebooted', all left alone"
    )
    assert nodes_line([], None, False) == "No Slurm node down or drained"
