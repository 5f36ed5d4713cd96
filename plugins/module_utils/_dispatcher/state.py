# -*- coding: utf-8 -*-
# Copyright (c) arvados_ops.recovery contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a dispatcher runs, from every piece of evidence recover_after_node_reboot.yml has.

The container dispatcher (crunch-dispatch-slurm, arvados-dispatch-cloud, -lsf) of Arvados
2.5.0 and later takes the ``Dispatch`` advisory lock once, at start, and never checks it
again, so the lock alone cannot say that no dispatcher runs: after a PostgreSQL restart a
running dispatcher holds nothing. Before 2.5.0 there is no such lock
(2.4.4:lib/controller/dblock/dblock.go:18 has only TrashSweep; 2.5.0 dblock.go:24 adds
``Dispatch``, taken at 2.5.0:services/crunch-dispatch-slurm/crunch-dispatch-slurm.go:144):
a healthy dispatcher of 1.1-2.4 never holds it, so there the unit and the process alone
say whether it runs, and "running without the lock" does not exist. Which release runs
comes from arvados_reconcile_info's ``arvados_version`` (``lock_expected`` in its
``dispatcher`` result); unknown, the lock is taken to be expected. Its unit (``systemctl is-active``, where systemd runs) and its process on each
``arvados_dispatchers`` host are the rest of the evidence. crunch-dispatch.rb (crunch v1)
takes no lock at all: its process on the ``crunch_v1_dispatcher`` host is the evidence.

Each probe is the plain result of one command the playbook ran on one host (``rc``,
``stdout``, ``stderr``, ``skipped``, ``unreachable``, ``msg``), or None when the host was
not asked (left out by ``--limit``, or the play never reached it). A host that could not
be asked makes the answer "unknown", never "not running".

Pure Python (3.8+), no Ansible import: plugins/filter/dispatcher_state.py adapts it.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .._common.errors import ConfigError

RUNNING = "running"
RUNNING_WITHOUT_LOCK = "running_without_lock"
NOT_RUNNING = "not_running"
UNKNOWN = "unknown"
STATES = (RUNNING, RUNNING_WITHOUT_LOCK, NOT_RUNNING, UNKNOWN)

# The first release whose dispatchers take the Dispatch lock (see the docstring).
DISPATCH_LOCK_SINCE = (2, 5, 0)

# crunch_v1_dispatcher, as arvados_reconcile_info takes it.
V1_RUNNING = "running"
V1_STOPPED = "stopped"
V1_STATES = (V1_RUNNING, V1_STOPPED, UNKNOWN)
# The playbook's default: ask the crunch_v1_dispatcher host.
V1_ASK = "auto"

# systemctl is-active's answers (systemd's unit_active_state_to_string).
UNIT_UP = frozenset(("active", "activating", "deactivating", "reloading", "refreshing"))
UNIT_DOWN = frozenset(("inactive", "failed", "maintenance"))

# pgrep(1): 0 some process matched, 1 none did; 2 and 3 are its own errors.
PGREP_FOUND = 0
PGREP_NONE = 1

Probe = Optional[Mapping[str, Any]]


class Evidence:
    """What one host says: up (a unit or a process is alive), down, or unknown (why)."""

    def __init__(self, host: str, up: Optional[bool], detail: str) -> None:
        self.host = host
        self.up = up
        self.detail = detail

    def __repr__(self) -> str:
        return "Evidence(%r, %r, %r)" % (self.host, self.up, self.detail)


def why_unasked(probe: Probe) -> Optional[str]:
    """Why this probe tells nothing, or None when it ran (or was skipped on purpose)."""
    if probe is None:
        return "not asked (not in this run)"
    if probe.get("unreachable"):
        return "unreachable: %s" % (probe.get("msg") or "no answer")
    if probe.get("failed"):
        return "failed: %s" % (probe.get("msg") or "no message")
    return None


def _no_rc(probe: Mapping[str, Any]) -> Optional[str]:
    """A command that ran has an exit status; without one it tells nothing."""
    if probe.get("rc") is None:
        return "no answer: %s" % (probe.get("msg") or "the command did not run")
    return None


def _first_line(text: Any) -> str:
    lines = str(text or "").strip().splitlines()
    return lines[0] if lines else ""


def process_evidence(host: str, what: str, probe: Probe) -> Evidence:
    """`pgrep -f PATTERN`'s result on one host."""
    unasked = why_unasked(probe) or (probe is not None and _no_rc(probe))
    if unasked or probe is None:
        return Evidence(host, None, "%s: %s" % (what, unasked))
    rc = probe.get("rc")
    if rc == PGREP_FOUND:
        pids = ", ".join(str(probe.get("stdout") or "").split())
        return Evidence(host, True, "%s: process %s" % (what, pids or "found"))
    if rc == PGREP_NONE:
        return Evidence(host, False, "%s: no process" % what)
    note = _first_line(probe.get("stderr") or probe.get("msg"))
    return Evidence(host, None, "%s: pgrep failed (rc %s)%s" % (what, rc, ": " + note if note else ""))


def unit_evidence(host: str, unit: str, systemd: Probe, is_active: Probe) -> Evidence:
    """The unit's state where systemd runs; where it does not, there is no unit to ask."""
    unasked: str | bool | None = why_unasked(systemd)
    if unasked or systemd is None:
        return Evidence(host, None, "unit %s: %s" % (unit, unasked))
    if not (systemd.get("stat") or {}).get("exists"):
        return Evidence(host, False, "no systemd (no unit to ask)")
    unasked = why_unasked(is_active) or (is_active is not None and _no_rc(is_active))
    if unasked or is_active is None:
        return Evidence(host, None, "unit %s: %s" % (unit, unasked or "not asked"))
    answer = _first_line(is_active.get("stdout"))
    if answer in UNIT_UP:
        return Evidence(host, True, "unit %s %s" % (unit, answer))
    if answer in UNIT_DOWN:
        return Evidence(host, False, "unit %s %s" % (unit, answer))
    return Evidence(
        host,
        None,
        "unit %s: systemctl is-active said %r (rc %s)"
        % (unit, answer or _first_line(is_active.get("stderr")), is_active.get("rc")),
    )


def host_has_systemd(systemd: Probe) -> bool:
    return bool(systemd and not why_unasked(systemd) and (systemd.get("stat") or {}).get("exists"))


def _combine(host: str, parts: Sequence[Evidence]) -> Evidence:
    """Up when any part is up; down only when every part is down; unknown otherwise."""
    detail = "; ".join(part.detail for part in parts)
    if any(part.up for part in parts):
        return Evidence(host, True, detail)
    if all(part.up is False for part in parts):
        return Evidence(host, False, detail)
    return Evidence(host, None, detail)


def lock_expected(release: Optional[Tuple[int, int, int]]) -> Optional[bool]:
    """Whether a running dispatcher of this Arvados release holds the Dispatch lock; None
    when the release is unknown."""
    return None if release is None else tuple(release) >= DISPATCH_LOCK_SINCE


def _lock_text(lock: Mapping[str, Any]) -> str:
    return "the Dispatch advisory lock (%s)" % lock.get("lock_key", 10005)


def container_dispatcher(
    lock: Mapping[str, Any],
    hosts: Sequence[Tuple[str, Mapping[str, Probe]]],
    unit: str = "crunch-dispatch-slurm",
) -> Dict[str, Any]:
    """The container dispatcher's state.

    lock: arvados_reconcile_info's ``dispatcher`` result (``lock_held``, ``lock_key``, and
    ``lock_expected``: False for a release before 2.5.0, whose dispatcher takes no lock).
    hosts: each arvados_dispatchers host with its probes ``systemd`` (stat of
    /run/systemd/system), ``unit`` (systemctl is-active) and ``process`` (pgrep).
    """
    if not isinstance(lock, Mapping) or not isinstance(lock.get("lock_held"), bool):
        raise ConfigError(
            "the reconciliation's dispatcher result has no lock_held (%r): the first "
            "slurm_controllers host must be in the run and reach the database" % (lock,)
        )
    evidence = [
        _combine(
            host,
            [
                unit_evidence(host, unit, probes.get("systemd"), probes.get("unit")),
                process_evidence(host, unit, probes.get("process")),
            ],
        )
        for host, probes in hosts
    ]
    up_on = [item.host for item in evidence if item.up]
    unknown_on = [item.host for item in evidence if item.up is None]
    systemd_hosts = [host for host, probes in hosts if host_has_systemd(probes.get("systemd"))]
    expected = lock.get("lock_expected") is not False
    if lock["lock_held"] or (up_on and not expected):
        state = RUNNING
    elif up_on:
        state = RUNNING_WITHOUT_LOCK
    elif not hosts or unknown_on:
        state = UNKNOWN
    else:
        state = NOT_RUNNING
    return {
        "state": state,
        "unit": unit,
        "up_on": up_on,
        "unknown_on": unknown_on,
        "evidence": {item.host: item.detail for item in evidence},
        # One dispatcher, never more: the first host where systemd can start the unit.
        "start_on": systemd_hosts[0] if state == NOT_RUNNING and systemd_hosts else None,
        "lock_expected": lock.get("lock_expected"),
        "reason": _container_reason(state, lock, evidence, unit)
        if expected
        else _lockless_reason(state, evidence, unit),
        "fix": _container_fix(state, unit, up_on, systemd_hosts),
    }


def _container_reason(state: str, lock: Mapping[str, Any], evidence: List[Evidence], unit: str) -> str:
    lock_text = _lock_text(lock)
    seen = "; ".join("%s: %s" % (item.host, item.detail) for item in evidence)
    if state == RUNNING:
        return "a session holds %s: a dispatcher of Arvados 2.5 or later runs" % lock_text
    free = "no session holds %s" % lock_text
    if state == RUNNING_WITHOUT_LOCK:
        # 3.2.1 services/crunch-dispatch-slurm/crunch-dispatch-slurm.go (also 2.5.0, 2.7.4),
        # lib/dispatchcloud/dispatcher.go, lib/lsf/dispatch.go: dblock.Dispatch.Lock once
        # at start, nothing calls Check(), so a PostgreSQL restart leaves it lockless.
        return (
            "%s, but %s is alive (%s): a dispatcher takes the lock once at start and never "
            "again, so after a PostgreSQL restart it runs without it, and a second dispatcher "
            "started now would take it and submit the same containers (before Arvados 2.5 "
            "dispatchers take no lock at all: if this cluster runs one, say so with its release, "
            "arvados_version or recover_arvados_version)" % (free, unit, seen)
        )
    if state == NOT_RUNNING:
        return "%s and no arvados_dispatchers host runs %s (%s)" % (free, unit, seen)
    if not evidence:
        return (
            "%s, and the inventory has no arvados_dispatchers host to ask: a dispatcher may "
            "run there without the lock (a PostgreSQL restart drops it) or not at all" % free
        )
    return "%s, and not every arvados_dispatchers host could be asked (%s)" % (free, seen)


def _lockless_reason(state: str, evidence: List[Evidence], unit: str) -> str:
    """The reason on a release whose dispatchers take no lock: the units and processes alone."""
    seen = "; ".join("%s: %s" % (item.host, item.detail) for item in evidence)
    release = "before Arvados 2.5 dispatchers take no Dispatch lock, so the unit and the process alone tell"
    if state == RUNNING:
        return "%s: %s is alive (%s)" % (release, unit, seen)
    if state == NOT_RUNNING:
        return "%s: no arvados_dispatchers host runs %s (%s)" % (release, unit, seen)
    if not evidence:
        return "%s, and the inventory has no arvados_dispatchers host to ask" % release
    return "%s, and not every arvados_dispatchers host could be asked (%s)" % (release, seen)


def _container_fix(state: str, unit: str, up_on: List[str], systemd_hosts: List[str]) -> str:
    if state == RUNNING:
        return ""
    if state == RUNNING_WITHOUT_LOCK:
        return "restart it (systemctl restart %s on %s) so that it takes the lock again; never start a second one" % (
            unit,
            ", ".join(up_on),
        )
    if state == NOT_RUNNING:
        if systemd_hosts:
            return "start %s on %s" % (unit, systemd_hosts[0])
        return "start %s by hand on one arvados_dispatchers host (none runs systemd)" % unit
    return (
        "find out on the dispatcher's host whether %s runs (restart it if it does, start it if "
        "not); list that host in arvados_dispatchers so that this playbook can tell" % unit
    )


def container_dispatcher_line(decision: Mapping[str, Any], started_on: Sequence[str], check_mode: bool) -> str:
    """The summary's line: the state, why, and what the playbook did or the fix."""
    head = "Dispatcher: %s: %s" % (decision["state"], decision["reason"])
    if decision["state"] == RUNNING:
        return head
    if started_on:
        return "%s. %s %s on %s (it recovers the containers through the API)." % (
            head,
            "Would start" if check_mode else "Started",
            decision["unit"],
            ", ".join(started_on),
        )
    if decision["state"] == NOT_RUNNING and decision.get("start_on"):
        return "%s. Fix: %s (recover_start_dispatcher is false)." % (head, decision["fix"])
    return "%s. Fix: %s." % (head, decision["fix"])


def crunch_v1_dispatcher(
    hosts: Sequence[Tuple[str, Probe]],
    stated: Optional[str] = None,
) -> Dict[str, Any]:
    """Whether crunch-dispatch.rb runs, for arvados_reconcile_info's ``crunch_v1_dispatcher``.

    hosts: each crunch_v1_dispatcher host with its ``pgrep -f`` result. stated: the
    operator's own word (running, stopped, unknown), or None/``auto`` to ask the hosts.
    """
    if stated not in (None, "", V1_ASK):
        if stated not in V1_STATES:
            raise ConfigError(
                "reconcile_crunch_v1_dispatcher must be one of %s (got %r)" % (", ".join((V1_ASK,) + V1_STATES), stated)
            )
        return {"state": stated, "reason": "stated by reconcile_crunch_v1_dispatcher", "running_on": []}
    evidence = [process_evidence(host, "crunch-dispatch.rb", probe) for host, probe in hosts]
    running_on = [item.host for item in evidence if item.up]
    seen = "; ".join("%s: %s" % (item.host, item.detail) for item in evidence)
    if running_on:
        state = V1_RUNNING
    elif not evidence:
        return {
            "state": UNKNOWN,
            "reason": "no crunch_v1_dispatcher host in the inventory to ask whether crunch-dispatch.rb runs",
            "running_on": [],
        }
    elif any(item.up is None for item in evidence):
        state = UNKNOWN
    else:
        state = V1_STOPPED
    return {"state": state, "reason": seen, "running_on": running_on}
