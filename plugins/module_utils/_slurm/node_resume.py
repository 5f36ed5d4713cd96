# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurm_node_resume module's engine: return to service only the nodes Slurm itself took
down after an unexpected reboot and whose slurmd answers.

Pure Python (3.8+), standard library only. The nodes are read here, in one ``scontrol
--all show node``, whatever the caller was told before: a node an administrator drained
meanwhile, or whose slurmd stopped answering, is refused at the moment of the change.
Each chosen node gets one ``scontrol update NodeName=<name> State=RESUME`` (an argv list,
never a shell), then the nodes are read once more for the result.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .._common.errors import ConfigError, RecoveryError
from .._common.options import Option, parse
from .nodes import (
    SlurmNode,
    parse_show_node,
    resume_command,
    scontrol_environment,
    show_node_command,
    why_not_resumable,
)
from .runner import (
    COMMAND_TIMEOUT_OPTION,
    SLURM_CLUSTER_NAME,
    Runner,
    SubprocessRunner,
    finish_command,
    require_program,
)

NODE_RESUME_OPTIONS: Dict[str, Option] = {
    "name": Option("list", elements="str", aliases=["nodes"], required=True),
    "clusters": Option("str"),
    "scontrol_path": Option("path"),
    "command_timeout": COMMAND_TIMEOUT_OPTION,
}
# One node a name: Slurm's host names, never a hostlist expression ("c[1-4]") or anything
# scontrol would read as another argument.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z", re.ASCII)


def _names(values: Sequence[Any]) -> List[str]:
    if not values:
        raise ConfigError("name: give at least one node name")
    bad = [value for value in values if not isinstance(value, str) or not _NODE_NAME.match(value)]
    if bad:
        raise ConfigError(
            "name: %s not a node name (one host name each, no hostlist expression)"
            % ", ".join(repr(value) for value in bad)
        )
    return list(dict.fromkeys(values))


def _clusters(value: Optional[str]) -> Optional[str]:
    if value is None or value == "":
        return None
    if not SLURM_CLUSTER_NAME.fullmatch(value):
        raise ConfigError("clusters: one Slurm cluster name, got %r (scontrol takes one cluster)" % value)
    return value


def _line(name: str, node: Optional[SlurmNode]) -> str:
    if node is None:
        return "%s absent\n" % name
    return "%s %s %s\n" % (name, node.slurm_state, node.reason or "-")


class NodeResume:
    def __init__(self, params: Mapping[str, Any], runner: Runner, environ: Mapping[str, str]):
        full = parse(NODE_RESUME_OPTIONS, params)
        self.names = _names(full["name"])
        self.clusters = _clusters(full["clusters"])
        self.timeout = full["command_timeout"]
        self.scontrol = require_program(full["scontrol_path"] or "scontrol")
        self.runner = runner
        self.env = scontrol_environment(environ)

    def _run(self, argv: List[str], what: str) -> str:
        return finish_command(self.runner.start(argv, self.env), what, self.timeout)

    def read(self) -> Dict[str, SlurmNode]:
        stdout = self._run(show_node_command(self.scontrol, self.clusters), "scontrol show node")
        return {node.name: node for node in parse_show_node(stdout)}

    def run(self, check_mode: bool, diff: bool) -> Dict[str, Any]:
        before = self.read()
        chosen, refused, in_service = [], [], []
        for name in self.names:
            node = before.get(name)
            why = why_not_resumable(node)
            if why is None:
                chosen.append(name)
            elif node is not None and node.state is None:
                in_service.append(name)
            else:
                refused.append(
                    {
                        "name": name,
                        "slurm_state": node.slurm_state if node else None,
                        "reason": node.reason if node else None,
                        "why": why,
                    }
                )
        errors = [] if check_mode else self._resume(chosen)
        after = before if check_mode or not chosen else self.read()
        result: Dict[str, Any] = {
            "changed": bool(chosen) and len(errors) < len(chosen),
            "resumed": [name for name in chosen if name not in {error["name"] for error in errors}],
            "refused": refused,
            "in_service": in_service,
            "errors": errors,
            "nodes": {name: after[name].describe() for name in self.names if name in after},
        }
        if diff:
            result["diff"] = {
                "before": "".join(_line(name, before.get(name)) for name in self.names),
                "after": "".join(
                    "%s RESUME\n" % name if check_mode and name in chosen else _line(name, after.get(name))
                    for name in self.names
                ),
            }
        if errors:
            result["failed"] = True
            result["msg"] = "scontrol refused to resume %s" % "; ".join(
                "%s: %s" % (error["name"], error["error"]) for error in errors
            )
        return result

    def _resume(self, names: Sequence[str]) -> List[Dict[str, str]]:
        errors = []
        for name in names:
            try:
                self._run(resume_command(self.scontrol, name, self.clusters), "scontrol update NodeName=%s" % name)
            except RecoveryError as error:
                errors.append({"name": name, "error": str(error)})
        return errors


def run_slurm_node_resume(
    params: Mapping[str, Any],
    check_mode: bool = False,
    diff: bool = False,
    runner: Optional[Runner] = None,
    environ: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    engine = NodeResume(params, runner or SubprocessRunner(), os.environ if environ is None else environ)
    return engine.run(check_mode, diff)
