# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The watch's read as findings, and the findings that hold on two consecutive reads.

The event source ``arvados_ops.recovery.findings`` (extensions/eda) runs the read-only
reconciliation every ``interval`` seconds, the read of ``arvados_reconcile_info`` and
``arvados-recovery-watch``, and hands each confirmed finding to a rulebook as one event.

A finding is a kind and the things it names (UUIDs, Slurm job ids, node names; none for
the dispatcher's flags). One read is not enough to act on: a container between its
``Locked`` and its ``sbatch``, a node between its boot and its slurmd's first answer, a
database restarting, each looks wrong once and is right a moment later. So a finding is
confirmed only for what two consecutive reads both name (a failed read between them
breaks the chain), and an event names only those.

A confirmed finding is told once, not at every read; again when what it names changes,
or after ``repeat_after`` seconds while it lasts (a remedy a guardrail held back gets
another chance), and again after it has cleared and come back.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from .._common import options_file
from .._common.errors import ConfigError
from .._common.options import Option, parse, seconds
from .run import ALL_OPTIONS as RECONCILE_ALL_OPTIONS
from .watch_cli import WATCH_OPTIONS

ORPHANED_JOBS = "orphaned_jobs"
ORPHANED_CONTAINERS = "orphaned_containers"
STRAY_SLURM_JOBS = "stray_slurm_jobs"
NODES_DOWN_AFTER_REBOOT = "nodes_down_after_reboot"
DISPATCHER_WITHOUT_LOCK = "dispatcher_without_lock"
DISPATCHER_NOT_RUNNING = "dispatcher_not_running"
JOBS_RETRY_OVERDUE = "jobs_retry_overdue"
READ_FAILED = "read_failed"
# In the order a rulebook reads them: the lies first, then what keeps them from healing.
KINDS: Tuple[str, ...] = (
    ORPHANED_JOBS,
    ORPHANED_CONTAINERS,
    STRAY_SLURM_JOBS,
    NODES_DOWN_AFTER_REBOOT,
    DISPATCHER_WITHOUT_LOCK,
    DISPATCHER_NOT_RUNNING,
    JOBS_RETRY_OVERDUE,
    READ_FAILED,
)
# The event's top-level key, so that a rulebook's conditions read
# `event.arvados_recovery.finding == "orphaned_jobs"`.
EVENT_KEY = "arvados_recovery"
# What a finding with no list of its own names.
DISPATCHER = "dispatcher"
READ = "read"

# A read of the 1,000,000-job benchmark takes seconds; an interval below it would
# start the next read before the last one ended.
MIN_INTERVAL = 5.0
MAX_INTERVAL = 86400.0

SOURCE_OPTIONS: Dict[str, Option] = {
    "interval": Option(
        "float",
        60.0,
        help="seconds from the start of one read to the start of the next",
        check=seconds(MAX_INTERVAL, minimum=MIN_INTERVAL),
    ),
    # 0: a lasting finding is told once, until it clears.
    "repeat_after": Option(
        "float",
        900.0,
        help="seconds after which a finding that lasts is told again; 0 never",
        check=seconds(MAX_INTERVAL),
    ),
    # Empty: not asked (the source rarely runs on the dispatcher's host).
    "dispatcher_unit": Option(
        "str",
        "",
        help="the dispatcher's systemd unit on this host, asked with systemctl is-active; '' not to ask",
    ),
    "systemctl_timeout": WATCH_OPTIONS["systemctl_timeout"],
    # A rulebook's source arguments must be a mapping written out in the rulebook: a file
    # holds the rest (and the password, at mode 0600), as the watch's --options-file does.
    "options_file": Option(
        "path",
        None,
        help="a YAML or JSON file of these options, read and checked as arvados-recovery-watch reads its "
        "--options-file; the rulebook's arguments win over it",
    ),
}
ALL_OPTIONS: Dict[str, Option] = dict(RECONCILE_ALL_OPTIONS, **SOURCE_OPTIONS)
FILE_OPTIONS: Dict[str, Option] = {name: option for name, option in ALL_OPTIONS.items() if name != "options_file"}
SOURCE = "arvados_ops.recovery.findings"


def check_source_options(args: Mapping[str, Any]) -> Dict[str, Any]:
    """Every option typed and checked as the module checks its own, before the first read:
    the options file's, the rulebook's arguments over them. Both may be text (a rulebook's
    `{{ var }}` renders as text), converted as the command converts its flags."""
    unknown = sorted(set(args) - set(ALL_OPTIONS))
    if unknown:
        raise ConfigError("unknown option(s) of %s: %s" % (SOURCE, ", ".join(unknown)))
    given = dict(args)
    path = given.pop("options_file", None)
    from_file = options_file.read_options_file(path, FILE_OPTIONS, SOURCE) if path else {}
    return parse(ALL_OPTIONS, dict(from_file, **given), from_text=True)


Named = Dict[str, Dict[str, Any]]


def _by(entries: Optional[Iterable[Mapping[str, Any]]], key: str, fields: Tuple[str, ...]) -> Named:
    return {str(entry[key]): {field: entry.get(field) for field in fields} for entry in entries or ()}


def findings_of(result: Mapping[str, Any], dispatcher_active: Optional[bool]) -> Dict[str, Named]:
    """What one successful read found, per kind: the things named, each with what a
    remedy or an operator needs of it. A kind with nothing is absent."""
    found: Dict[str, Named] = {
        ORPHANED_JOBS: _by(result.get("orphaned_jobs"), "uuid", ("state", "started_at", "reason")),
        ORPHANED_CONTAINERS: _by(result.get("orphaned_containers"), "uuid", ("state", "started_at", "reason")),
        # By the Slurm job id: one UUID may name two Slurm jobs, each to cancel.
        STRAY_SLURM_JOBS: _by(result.get("stray_slurm_jobs"), "job_id", ("name", "kind", "state", "user", "reason")),
        NODES_DOWN_AFTER_REBOOT: _by(
            [node for node in result.get("slurm_nodes") or () if node.get("reason_is_unexpected_reboot")],
            "name",
            ("state", "reason"),
        ),
        JOBS_RETRY_OVERDUE: _by(
            [entry for entry in result.get("jobs_awaiting_retry") or () if entry.get("overdue")],
            "uuid",
            ("started_at", "reason"),
        ),
    }
    dispatcher = result.get("dispatcher") or {}
    if dispatcher.get("lock_expected") is True and dispatcher.get("lock_held") is False:
        found[DISPATCHER_WITHOUT_LOCK] = {DISPATCHER: {"reason": dispatcher.get("reason")}}
    if dispatcher_active is False:
        found[DISPATCHER_NOT_RUNNING] = {DISPATCHER: {"unit_active": False}}
    return {kind: named for kind, named in found.items() if named}


def _utc(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Confirmer:
    """Reads in, events out: each event a finding both of the last two reads made,
    naming only what both named, told as the module docstring says."""

    def __init__(self, repeat_after: float, clock: Callable[[], float]):
        self.repeat_after = repeat_after
        self.clock = clock
        self.previous: Optional[Dict[str, Named]] = None
        self.previous_at: Optional[float] = None
        # Per kind: the names last told and when.
        self.told: Dict[str, Tuple[frozenset, float]] = {}

    def read(self, found: Dict[str, Named], context: Mapping[str, Any]) -> List[Dict[str, Any]]:
        """The events after a successful read that found `found`."""
        now = self.clock()
        confirmed = self._confirmed(found)
        events = self._events(confirmed, now, context)
        self.previous, self.previous_at = found, now
        return events

    def failed(self, message: str, context: Mapping[str, Any]) -> List[Dict[str, Any]]:
        """The events after a failed read: the read's failure, once two in a row failed."""
        return self.read({READ_FAILED: {READ: {"message": message}}}, context)

    def _confirmed(self, found: Dict[str, Named]) -> Dict[str, Named]:
        if self.previous is None:
            return {}
        confirmed = {}
        for kind, named in found.items():
            before = self.previous.get(kind, {})
            both = {name: detail for name, detail in named.items() if name in before}
            if both:
                confirmed[kind] = both
        return confirmed

    def _events(self, confirmed: Dict[str, Named], now: float, context: Mapping[str, Any]) -> List[Dict[str, Any]]:
        for kind in list(self.told):
            if kind not in confirmed:
                del self.told[kind]
        events = []
        for kind in KINDS:
            named = confirmed.get(kind)
            if not named or not self._due(kind, frozenset(named), now):
                continue
            self.told[kind] = (frozenset(named), now)
            events.append(self._event(kind, named, now, context))
        return events

    def _due(self, kind: str, names: frozenset, now: float) -> bool:
        told = self.told.get(kind)
        if told is None or told[0] != names:
            return True
        return bool(self.repeat_after) and now - told[1] >= self.repeat_after

    def _event(self, kind: str, named: Named, now: float, context: Mapping[str, Any]) -> Dict[str, Any]:
        names = sorted(named)
        body: Dict[str, Any] = {
            "finding": kind,
            "names": names,
            "count": len(names),
            "details": {name: named[name] for name in names},
            "read_at": _utc(now),
            # The earlier of the two reads that both made the finding.
            "first_read_at": _utc(self.previous_at if self.previous_at is not None else now),
        }
        body.update(context)
        return {EVENT_KEY: body}


def read_context(result: Optional[Mapping[str, Any]], dispatcher_active: Optional[bool]) -> Dict[str, Any]:
    """What every event says of the read besides its finding: what a rulebook's guardrails
    look at (a standby, a dispatcher whose state is unknown, a failed read)."""
    if result is None:
        return {"read_ok": False, "cluster_prefix": None, "database_is_standby": None, "dispatcher": None}
    dispatcher = result.get("dispatcher") or {}
    return {
        "read_ok": True,
        "cluster_prefix": result.get("cluster_prefix"),
        "database_is_standby": bool(result.get("database_is_standby")),
        "dispatcher": {
            "lock_held": dispatcher.get("lock_held"),
            "lock_expected": dispatcher.get("lock_expected"),
            "unit_active": dispatcher_active,
            "known": dispatcher.get("lock_expected") is not None or dispatcher_active is not None,
        },
    }
