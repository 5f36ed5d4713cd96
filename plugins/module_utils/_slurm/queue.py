# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Slurm's queue: the squeue and scancel command lines, and squeue's listings read back.

The one place both are made for every engine: the cancel engine lists the jobs it is to
make absent (JOB_LISTING), the reconciliation every job with the nodes it holds
(JOB_NODES_LISTING); one builder makes either command line, one parser reads either.
Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Generic, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar

# Fields are separated by "|", which Slurm job ids, states and user names
# never contain; the job name comes last so that a name holding "|" (someone
# else's job) still parses.
FIELD_SEPARATOR = "|"
SQUEUE_FORMAT = FIELD_SEPARATOR.join(("%i", "%T", "%u", "%j"))
# The line squeue prints first for that format (the column titles of %i, %T, %u and %j,
# src/squeue/print.c, 22.05 to 25.11), even when no job is queued, once per cluster with
# --clusters. A listing without it is not squeue's answer to the format asked: /bin/true
# or a wrapper that prints nothing exits 0 as an empty queue would, and taking that for
# "no job queued" would fail jobs whose Slurm jobs run on.
SQUEUE_HEADER = FIELD_SEPARATOR.join(("JOBID", "STATE", "USER", "NAME"))
# The reconciliation's listing: the nodes each job holds too (%N may hold commas and
# brackets, never "|"), and no header line (--noheader).
SQUEUE_NODES_FORMAT = FIELD_SEPARATOR.join(("%i", "%T", "%u", "%N", "%j"))

# A longer --name argument risks the kernel's per-argument limit (128 KiB);
# beyond it the whole queue is listed and filtered here instead.
MAX_NAME_FILTER_CHARS = 64 * 1024

# What squeue's %T prints is job_state_string(): the name of the first state flag set,
# else of the base state (src/common/slurm_protocol_defs.c, Slurm 20.11 to 25.11). A flag
# name hides the base state, so each is classed here by the base state it goes with; a
# name not listed (a future flag) is taken for a running job, which is only ever sent
# what a running job gets.
#
# Waiting to be scheduled; `scancel --state=PENDING` matches them, since scancel compares
# the base state only (src/scancel/scancel.c). EXPEDITING (25.11): a failed job of
# `--requeue=expedite` requeued at once, pending with the flag. REQUEUED_CRON (20.11
# only): a scrontab job requeued for its next run.
PENDING_STATES = frozenset(
    (
        "PENDING",
        "EXPEDITING",
        "REQUEUED",
        "REQUEUED_CRON",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESV_DEL_HOLD",
        "SPECIAL_EXIT",
    )
)
# Holding nodes: CONFIGURING while they boot, RESIZING while its allocation changes,
# SIGNALING while a signal is on its way, STOPPED after SIGSTOP (scontrol suspend sets
# SUSPENDED, not this).
RUNNING_STATES = frozenset(("RUNNING", "CONFIGURING", "RESIZING", "SIGNALING", "STOPPED"))
# The job has ended and Slurm is cleaning up: another scancel does nothing.
LEAVING_STATES = frozenset(("COMPLETING", "STAGE_OUT"))
# Only shown by squeue when asked for; such a job is no longer queued.
FINISHED_STATES = frozenset(
    (
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    )
)

# Variables that silently change what squeue lists or what scancel does
# (SQUEUE_NAMES, SCANCEL_STATE, SCANCEL_INTERACTIVE, ...).
_CLIENT_ENV_PREFIXES = ("SQUEUE_", "SCANCEL_")


class QueueEntry(NamedTuple):
    job_id: str
    state: str
    user: str
    name: str

    @property
    def is_pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def is_suspended(self) -> bool:
        return self.state == "SUSPENDED"

    @property
    def is_leaving(self) -> bool:
        return self.state in LEAVING_STATES

    @property
    def is_queued(self) -> bool:
        return self.state not in FINISHED_STATES

    def as_line(self) -> str:
        return "%s %s %s %s" % (self.job_id, self.name, self.state, self.user)

    def describe(self) -> Dict[str, str]:
        return {"name": self.name, "job_id": self.job_id, "state": self.state, "user": self.user}


class SlurmJob(NamedTuple):
    """A job of the reconciliation's listing, with the nodes it holds."""

    job_id: str
    state: str
    user: str
    nodes: str
    name: str

    def describe(self) -> Dict[str, str]:
        return {"job_id": self.job_id, "state": self.state, "user": self.user, "nodes": self.nodes, "name": self.name}


Row = TypeVar("Row", QueueEntry, SlurmJob)


@dataclass(frozen=True)
class SqueueListing(Generic[Row]):
    """One form of squeue listing: the fields asked for (the job name last), what each
    job's line is read into, and the header line asked for (None: --noheader)."""

    # squeue's --format.
    fields: str
    row: Callable[..., Row]
    header: Optional[str]

    @property
    def width(self) -> int:
        return self.fields.count(FIELD_SEPARATOR) + 1


# The cancel engine's listing: the header tells an empty queue from a program that
# printed nothing (has_header).
JOB_LISTING: SqueueListing[QueueEntry] = SqueueListing(SQUEUE_FORMAT, QueueEntry, SQUEUE_HEADER)
# The reconciliation's: every job and the nodes it holds.
JOB_NODES_LISTING: SqueueListing[SlurmJob] = SqueueListing(SQUEUE_NODES_FORMAT, SlurmJob, None)


def client_environment(base: Mapping[str, str]) -> Dict[str, str]:
    env = {key: value for key, value in base.items() if not key.startswith(_CLIENT_ENV_PREFIXES)}
    env["LC_ALL"] = "C"
    return env


def squeue_command(
    squeue: str,
    names: Sequence[str] = (),
    job_ids: Sequence[str] = (),
    clusters: Optional[str] = None,
    listing: SqueueListing[Any] = JOB_LISTING,
) -> List[str]:
    """One squeue listing, in `listing`'s form, of every user's jobs, array tasks one a
    line, that covers every requested name and id (none requested: every job).

    squeue ANDs --name with --jobs, and a single unknown --jobs id makes it
    exit 1 like an unreachable controller; so ids are never passed and,
    when ids are requested, the whole queue is listed and filtered here.
    The header is asked for where the listing has one: see SQUEUE_HEADER and has_header.
    """
    argv = [squeue]
    if listing.header is None:
        argv.append("--noheader")
    argv += ["--all", "--array", "--format=" + listing.fields]
    if clusters:
        argv.append("--clusters=" + clusters)
    name_filter = ",".join(names)
    if names and not job_ids and len(name_filter) <= MAX_NAME_FILTER_CHARS:
        argv.append("--name=" + name_filter)
    return argv


def read_listing(stdout: str, listing: SqueueListing[Row]) -> List[Row]:
    """Every job line of a listing squeue printed in `listing`'s form, in order."""
    width = listing.width
    row = listing.row
    header = listing.header
    entries: List[Row] = []
    # Split on "\n" only: str.splitlines() also splits on characters that may
    # appear inside other users' job names.
    for line in stdout.split("\n"):
        fields = line.rstrip("\r").split(FIELD_SEPARATOR, width - 1)
        # With --clusters squeue adds "CLUSTER: name" lines; they have no separator. The
        # header's first field is no job id.
        if len(fields) != width or not fields[0].strip() or (header is not None and line.strip() == header):
            continue
        # The name as printed, blanks included: it is compared whole with the names wanted.
        entries.append(row(*[field.strip() for field in fields[:-1]], fields[-1]))
    return entries


def parse_squeue(stdout: str) -> List[QueueEntry]:
    """The jobs of the cancel engine's listing (JOB_LISTING)."""
    return read_listing(stdout, JOB_LISTING)


def has_header(stdout: str) -> bool:
    """Whether a listing holds squeue's header line for SQUEUE_FORMAT: what tells an empty
    queue from a program that printed nothing."""
    return any(line.strip() == SQUEUE_HEADER for line in stdout.split("\n"))


def id_keys(listed: str) -> Tuple[str, ...]:
    """The requested ids that cover a listed job: its own, and for an array task its array's."""
    array_job_id, separator, _task = listed.partition("_")
    return (listed, array_job_id) if separator else (listed,)


def select_requested(entries: Iterable[QueueEntry], names: Iterable[str], job_ids: Iterable[str]) -> List[QueueEntry]:
    wanted_names = set(names)
    wanted_ids = set(job_ids)
    return [
        entry
        for entry in entries
        if entry.is_queued and (entry.name in wanted_names or not wanted_ids.isdisjoint(id_keys(entry.job_id)))
    ]
