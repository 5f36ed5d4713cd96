# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's nodes that are down or drained, and which of them may be returned to service.

Pure Python (3.8+), standard library only. One ``scontrol --all show node`` lists every
node (``--all``: nodes of hidden partitions too); its multi-line form is read because it
is the one form where a reason may hold spaces, ``|`` and ``=`` and still be told apart
(its own line, ``Reason=``, after the others; a reason with line breaks goes on in lines
indented by ten spaces), whatever the release (src/api/node_info.c
``slurm_sprint_node_table``, 20.11 to 25.11). ``sinfo`` was not taken: its ``%T`` shows one
suffix only (``DOWN~`` hides ``*``, ``DRAINED`` hides ``DOWN``; node_state_string in
src/common/slurm_protocol_defs.c), and its complete state (``-O StateComplete``) came in
22.05.

``State=`` is, from 22.05 on, the base state and every flag
(``node_state_string_complete``: ``DOWN+DRAIN+NOT_RESPONDING``); in 20.11 it is
``node_state_string`` of the state without the CLOUD, COMPLETING, DRAIN, FAIL and POWER
flags, with a one-character suffix for one other flag (``*`` not responding, ``~``
powered down, ``#`` powering up, ``%`` powering down, ``!`` power down pending, ``$``
maintenance, ``@`` reboot requested, ``^`` reboot issued, ``-`` planned), then those
flags (``DOWN*+DRAIN``). Both are read here.

Slurm's reason for a node that came back from a reboot it did not order is
:data:`SLURM_REBOOT_REASON` (src/slurmctld/node_mgr.c ``validate_node_specs``, 20.11 to
25.11): set when slurmd registers with a boot time after its last answer, only where the
node had no reason or ``Not responding``, so an administrator's reason is never replaced.
scontrol adds `` [user@time]`` to the first line of a reason that has a time.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .queue import client_environment

SLURM_REBOOT_REASON = "Node unexpectedly rebooted"
DOWN = "down"
DRAIN = "drain"
NODE_STATES = (DOWN, DRAIN)
NODE_REASONS = ("unexpected_reboot", "other")

# 20.11's one-character suffixes of node_state_string, by the flag each stands for.
SUFFIX_FLAGS = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
}
# sinfo-style names of a drained node, which 20.11's scontrol shows where a maintenance or
# reboot flag hides the base state ("DRAINED$" has no base state of its own).
_DRAIN_WORDS = ("DRAIN", "DRAINED", "DRAINING")
# Flags under which returning a node to service is not this collection's call: Slurm does
# not hear from its slurmd (NOT_RESPONDING), power saving has it off or on its way
# (POWER*), a reboot is pending (REBOOT_*), or a maintenance reservation holds it.
BLOCKING_FLAGS = (
    "NOT_RESPONDING",
    "POWERED_DOWN",
    "POWERING_UP",
    "POWERING_DOWN",
    "POWER_DOWN",
    "POWER_UP",
    "REBOOT_REQUESTED",
    "REBOOT_ISSUED",
    "MAINTENANCE",
    "INVALID_REG",
    "FAIL",
)
_REASON_SUFFIX = re.compile(r"\A(?P<reason>.*) \[(?P<user>[^\[\]@]*)@(?P<time>[^\[\]]*)\]\Z", re.DOTALL)
_STATE = re.compile(r"(?:\A|\s)State=(\S+)")
_CONTINUATION = " " * 10


def is_unexpected_reboot(reason: Optional[str]) -> bool:
    """Whether `reason` is Slurm's own for an unexpected reboot, as set or as scontrol shows
    it (with `` [user@time]``); an administrator's reason that only starts so is not."""
    return split_reason(reason or "")[0] == SLURM_REBOOT_REASON


def node_reason_class(reason: Optional[str]) -> str:
    return NODE_REASONS[0] if is_unexpected_reboot(reason) else NODE_REASONS[1]


def split_reason(text: str) -> Tuple[str, Optional[str], Optional[str]]:
    """(reason, who set it, when) from scontrol's ``Reason=`` text."""
    first, newline, rest = text.partition("\n")
    match = _REASON_SUFFIX.match(first)
    if not match:
        return text, None, None
    return match.group("reason") + newline + rest, match.group("user"), match.group("time")


class SlurmNode(NamedTuple):
    name: str
    # State= as scontrol wrote it.
    slurm_state: str
    # The base state (DOWN, IDLE, ...) and the flags, suffixes spelt out.
    base: str
    flags: Tuple[str, ...]
    reason: Optional[str] = None
    reason_user: Optional[str] = None
    reason_time: Optional[str] = None

    @property
    def state(self) -> Optional[str]:
        """down, drain, or None for a node in service. A node down and drained is down."""
        if self.base == "DOWN":
            return DOWN
        if self.base in _DRAIN_WORDS or "DRAIN" in self.flags:
            return DRAIN
        return None

    @property
    def slurmd_responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags

    def describe(self) -> Dict[str, object]:
        return {
            "name": self.name,
            "state": self.state,
            "reason": self.reason,
            "reason_is_unexpected_reboot": is_unexpected_reboot(self.reason),
            "slurm_state": self.slurm_state,
            "slurmd_responding": self.slurmd_responding,
            "reason_set_by": self.reason_user,
            "reason_set_at": self.reason_time,
        }


def parse_state(text: str) -> Tuple[str, Tuple[str, ...]]:
    """(base, flags) of a State= value of any release: ``DOWN*+DRAIN`` (20.11) and
    ``DOWN+DRAIN+NOT_RESPONDING`` (22.05 on) both give (DOWN, (DRAIN, NOT_RESPONDING))."""
    words = text.split("+")
    base = words[0]
    flags = [word for word in words[1:] if word]
    while base and base[-1] in SUFFIX_FLAGS:
        flags.append(SUFFIX_FLAGS[base[-1]])
        base = base[:-1]
    return base, tuple(dict.fromkeys(flags))


def scontrol_environment(base: Mapping[str, str]) -> Dict[str, str]:
    """The clients' environment without SCONTROL_* (SCONTROL_FUTURE, SCONTROL_LOCAL, ... change
    which nodes scontrol shows: src/scontrol/scontrol.c)."""
    return {key: value for key, value in client_environment(base).items() if not key.startswith("SCONTROL_")}


def show_node_command(scontrol: str, clusters: Optional[str] = None) -> List[str]:
    argv = [scontrol, "--all"]
    if clusters:
        argv.append("--clusters=" + clusters)
    return argv + ["show", "node"]


def resume_command(scontrol: str, name: str, clusters: Optional[str] = None) -> List[str]:
    argv = [scontrol]
    if clusters:
        argv.append("--clusters=" + clusters)
    return argv + ["update", "NodeName=" + name, "State=RESUME"]


def parse_show_node(stdout: str) -> List[SlurmNode]:
    """Every node of ``scontrol show node``'s multi-line output."""
    nodes = []
    block: List[str] = []
    for line in stdout.split("\n"):
        if line.startswith("NodeName="):
            if block:
                nodes.append(_node_of(block))
            block = [line]
        elif block:
            block.append(line)
    if block:
        nodes.append(_node_of(block))
    return nodes


def _node_of(lines: Sequence[str]) -> SlurmNode:
    name = lines[0][len("NodeName=") :].split(" ", 1)[0]
    state = ""
    reason_lines: List[str] = []
    for number, line in enumerate(lines):
        stripped = line.lstrip(" ")
        if stripped.startswith("Reason="):
            reason_lines = [stripped[len("Reason=") :]]
            for more in lines[number + 1 :]:
                if not more.startswith(_CONTINUATION):
                    break
                reason_lines.append(more[len(_CONTINUATION) :])
            continue
        match = _STATE.search(line)
        if match and not state and not stripped.startswith("NextState="):
            state = match.group(1)
    base, flags = parse_state(state)
    reason, user, time = split_reason("\n".join(reason_lines)) if reason_lines else (None, None, None)
    return SlurmNode(name, state, base, flags, reason, user, time)


def unavailable(nodes: Sequence[SlurmNode]) -> List[Dict[str, object]]:
    """The report's entries of the nodes down or drained, by name."""
    return [node.describe() for node in sorted(nodes, key=lambda node: node.name) if node.state]


def why_not_resumable(node: Optional[SlurmNode]) -> Optional[str]:
    """None when `node` may be returned to service, else why not.

    Only a node down or drained for Slurm's own unexpected-reboot reason whose slurmd
    answers. That it answers: Slurm set the reason when that slurmd registered after its
    boot (node_mgr.c, which clears NOT_RESPONDING then), and slurmctld keeps asking every
    node, down ones too, about every SlurmdTimeout/3 (src/slurmctld/ping_nodes.c), setting
    NOT_RESPONDING again when one does not answer. `scontrol ping` asks slurmctld only, and
    a probe of slurmd's port from this host would say nothing of the path slurmctld uses.
    """
    if node is None:
        return "no such node in scontrol show node"
    if node.state is None:
        return "in service (%s)" % node.slurm_state
    if not is_unexpected_reboot(node.reason):
        return "its reason is not Slurm's %r but %r: an administrator's, left alone" % (
            SLURM_REBOOT_REASON,
            node.reason,
        )
    blocking = [flag for flag in node.flags if flag in BLOCKING_FLAGS]
    if blocking:
        return "state %s: %s" % (node.slurm_state, ", ".join(blocking))
    return None


# Names a summary line lists before it only counts.
LISTED_AT_MOST = 20


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:LISTED_AT_MOST])
    return shown + (", ..." if len(items) > LISTED_AT_MOST else "")


def nodes_line(nodes: Sequence[Mapping[str, Any]], resume: Optional[Mapping[str, Any]], check_mode: bool) -> str:
    """The recovery summary's line: the nodes down or drained and their reasons, and which
    were (or would be) returned to service; `resume` is slurm_node_resume's result, None
    when it did not run (not asked, or no node with Slurm's reboot reason)."""
    if not nodes:
        return "No Slurm node down or drained"
    line = "%d Slurm nodes down or drained: %s" % (
        len(nodes),
        _listed(["%s %s (%s)" % (node["name"], node["state"], node.get("reason") or "no reason") for node in nodes]),
    )
    rebooted = [str(node["name"]) for node in nodes if node.get("reason_is_unexpected_reboot")]
    if resume is None:
        if not rebooted:
            return line + "; none has Slurm's reason %r, all left alone" % SLURM_REBOOT_REASON
        return line + (
            "; none %sresumed (recover_resume_nodes=true resumes those down for Slurm's %r whose "
            "slurmd answers: %s)" % ("would be " if check_mode else "", SLURM_REBOOT_REASON, _listed(rebooted))
        )
    resumed = [str(name) for name in resume.get("resumed") or ()]
    refused = ["%s: %s" % (entry["name"], entry["why"]) for entry in resume.get("refused") or ()]
    line += "; %s: %s" % ("would resume" if check_mode else "resumed", _listed(resumed) or "none")
    if refused:
        line += "; left alone: %s" % "; ".join(refused[:LISTED_AT_MOST])
    others = len(nodes) - len(rebooted)
    if others:
        line += "; %d with another reason left alone" % others
    return line
