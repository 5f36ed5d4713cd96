# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The jobs of a cancel call: what each has been sent and Slurm took, and the scancel
each needs next, as of the latest listing and the scancels ended since.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Set, Tuple

from .._slurm.queue import QueueEntry, id_keys, select_requested
from .._slurm.scancel import CANCEL, KIND_ORDER, REMOVE_PENDING, SIGNAL, TERMINATE
from .request import CancelRequest
from .scancels import EPSILON

# (kind, jobs) of one scancel.
Batch = Tuple[str, List[QueueEntry]]


@dataclass
class TrackedJob:
    first_seen: QueueEntry
    # TERM to the batch step before any outright cancel (option stop).
    terminate: bool = False
    in_flight: bool = False
    # The kinds of scancel started for this job ...
    sent: Set[str] = field(default_factory=set)
    # ... and those that exited 0 (Slurm took the request).
    acknowledged: Set[str] = field(default_factory=set)
    # Earliest start of a listing that may lead to the job's next scancel.
    eligible_at: float = 0.0
    # TERMs Slurm took for the job's batch step (scancel exited 0).
    terms: int = 0
    # Whether the message on its first scancel after a TERM it outlived was written.
    outlived_term_noted: bool = False
    # Slurm refused an scancel of it to this user: no scancel may end it.
    denied: bool = False
    next_log_at: Optional[float] = None

    def action_entry(self) -> Dict[str, str]:
        entry = self.first_seen
        return {"name": entry.name, "job_id": entry.job_id, "state_before": entry.state, "user": entry.user}

    def sent_now(self, kind: str) -> bool:
        """An scancel of ``kind`` started for it; True the first time that is more than the
        TERM it outlived."""
        self.in_flight = True
        outlived = kind in (CANCEL, TERMINATE) and TERMINATE in self.acknowledged and not self.outlived_term_noted
        self.outlived_term_noted = self.outlived_term_noted or outlived
        self.sent.add(kind)
        return outlived

    def answered(self, kind: str, taken: bool, denied: bool, eligible_at: float) -> None:
        """Its scancel of ``kind`` ended; ``taken``: Slurm took the request for it."""
        self.in_flight = False
        if taken:
            self.acknowledged.add(kind)
            self.terms += kind == TERMINATE
        self.denied = self.denied or denied
        self.eligible_at = eligible_at


class Jobs:
    """The requested jobs seen so far, the latest listing, and what is due.

    Owns the loop's two caches, worked out again only after a listing or an ended scancel
    (or once the ``--ctld`` choice changes how many ids an scancel takes): each listed
    job's next scancel and the scancels due, front first. The loop wakes every
    SCANCEL_CHECK_INTERVAL while scancels run, and going over a thousand jobs each time
    took most of a CPU from slurmctld for the whole stop (bench/README.md, issue 23).
    """

    def __init__(
        self, request: CancelRequest, started: float, ids_per_scancel: Callable[[List[QueueEntry]], int]
    ) -> None:
        self.request = request
        self.started = started
        self.grace_end = started + request.grace_period
        self.signal_mode = bool(request.signal)
        self._ids_per_scancel = ids_per_scancel
        self.tracked: Dict[str, TrackedJob] = {}
        self.others: Dict[str, QueueEntry] = {}
        self.seen_names: Set[str] = set()
        self.seen_job_ids: Set[str] = set()
        self.first_listing: Optional[List[QueueEntry]] = None
        self.listing: Optional[List[QueueEntry]] = None
        self.listing_time = 0.0
        self._actions: Optional[List[Tuple[QueueEntry, str]]] = None
        self._due: Optional[List[Batch]] = None
        # Whether an scancel holding pending jobs ended since the latest listing.
        self._pending_call_ended = False

    # -- what changes them ---------------------------------------------------

    def listed(self, entries: List[QueueEntry], listing_time: float) -> List[str]:
        """Take in a listing of the queue that began at ``listing_time``; the messages on
        jobs still queued long after their first scancel."""
        request = self.request
        requested = select_requested(entries, request.names, request.job_ids)
        wanted_ids = set(request.job_ids)
        for entry in requested:
            self.seen_names.add(entry.name)
            self.seen_job_ids.update(wanted_ids.intersection(id_keys(entry.job_id)))
            if not self.is_ours(entry):
                self.others.setdefault(entry.job_id, entry)
            elif entry.job_id not in self.tracked:
                terminate = request.terminates(entry.name)
                self.tracked[entry.job_id] = TrackedJob(entry, terminate, eligible_at=self.grace_end)
        if self.first_listing is None:
            self.first_listing = requested
        self.listing = requested
        self._forget()
        self._pending_call_ended = False
        self.listing_time = listing_time
        return self._lingering(listing_time)

    def front_started(self) -> List[str]:
        """The front scancel due has started: its jobs are in flight. The ids of those that
        now get more than the TERM they outlived."""
        kind, batch = self.due().pop(0)
        # What is left is what _due_batches would now say: batches are cut in order.
        return [entry.job_id for entry in batch if self.tracked[entry.job_id].sent_now(kind)]

    def scancel_ended(
        self,
        kind: str,
        job_ids: List[str],
        holds_pending: bool,
        taken: Set[str],
        denied: Set[str],
        now: float,
        reached_slurm: bool = True,
    ) -> None:
        """An scancel of these jobs ended: Slurm took it for those ``taken`` and refused it
        to this user for those ``denied``; one that never ``reached_slurm`` (its command
        line refused) counts as not sent."""
        request = self.request
        delay = request.retry_delay
        if kind == TERMINATE:
            delay = request.terminate_grace if request.cancels_after_term else request.term_interval
        for job_id in job_ids:
            job = self.tracked[job_id]
            ok = job_id in taken
            job.answered(kind, ok, job_id in denied, now + (delay if ok else request.error_retry_delay))
            if job.next_log_at is None:
                job.next_log_at = now + request.retry_delay
            if not reached_slurm:
                job.sent.discard(kind)
        self._forget()
        self._pending_call_ended = self._pending_call_ended or holds_pending

    def cut_again(self) -> None:
        """Scancels may now take more ids (--ctld is one request): cut the due ones again."""
        self._due = None

    def _forget(self) -> None:
        self._actions = None
        self._due = None

    # -- what is due ---------------------------------------------------------

    def due(self) -> List[Batch]:
        """The scancels due now, front first; front_started() takes the front off."""
        if self._due is None:
            self._due = self._due_batches()
        return self._due

    def look_first(self) -> bool:
        """Whether to list the queue before starting what the latest listing found due.

        Not when scancels it found due are held only by the token bucket: that listing
        stands for them, and another would hold them back, under load for as long as
        slurmctld takes to answer it, busy with the jobs the first scancels stopped (1.9 s
        between two --ctld calls of 500 running jobs on 24.11). But running jobs wait for a
        listing taken after the scancels of pending ones: a job those left alone because it
        started meanwhile is then seen running, in time for their scancel.
        """
        due = self.due()
        return not due or (self._pending_call_ended and not due[0][1][0].is_pending)

    def upcoming(self, now: float) -> List[float]:
        """When jobs of the latest listing that wait for their next scancel may have it."""
        eligible = (self.tracked[entry.job_id].eligible_at for entry in self.actionable())
        return [eligible_at for eligible_at in eligible if eligible_at > now]

    def _due_batches(self) -> List[Batch]:
        """(kind, jobs) per scancel due now: pending jobs first within a kind, and
        batches holding pending jobs before the others."""
        by_kind: Dict[str, List[QueueEntry]] = {}
        for entry, kind in self.next_actions():
            job = self.tracked[entry.job_id]
            if not job.in_flight and self.listing_time >= job.eligible_at - EPSILON:
                by_kind.setdefault(kind, []).append(entry)
        batches: List[Batch] = []
        for kind, entries in by_kind.items():
            entries.sort(key=lambda entry: not entry.is_pending)
            cap = self._ids_per_scancel(entries)
            batches.extend((kind, entries[first : first + cap]) for first in range(0, len(entries), cap))
        batches.sort(key=lambda batch: (not batch[1][0].is_pending, KIND_ORDER.index(batch[0])))
        return batches

    # -- what each listed job needs ------------------------------------------

    def is_ours(self, entry: QueueEntry) -> bool:
        return self.request.user is None or entry.user == self.request.user

    def ours(self) -> List[QueueEntry]:
        return [entry for entry in self.listing or () if self.is_ours(entry)]

    def next_actions(self) -> List[Tuple[QueueEntry, str]]:
        """(job, the scancel it needs next) for each job in the latest listing that needs one."""
        if self._actions is None:
            self._actions = []
            for entry in self.ours():
                kind = self._next_kind(entry)
                if kind is not None:
                    self._actions.append((entry, kind))
        return self._actions

    def actionable(self) -> List[QueueEntry]:
        """Jobs in the latest listing that may still need an scancel."""
        return [action[0] for action in self.next_actions()]

    def done(self) -> bool:
        """Nothing left to do: the jobs are gone, or only those no scancel may touch are left."""
        if self.listing is None:
            return False
        return all(self._untouchable(entry) for entry in self.unfinished())

    def unfinished(self) -> List[QueueEntry]:
        if not self.request.wait:
            return self.actionable() + [entry for entry in self.ours() if self._untouchable(entry)]
        return [entry for entry in self.ours() if not self.skipped_pending(entry)]

    def left_suspended(self, entry: QueueEntry) -> bool:
        """A suspended job that by default neither a TERM reaches nor a cancel may end."""
        job = self.tracked[entry.job_id]
        return job.terminate and entry.is_suspended and not self.request.cancels_after_term

    def left_running(self, entry: QueueEntry) -> bool:
        """Still there, and by default never cancelled: it outlived its TERMs or is suspended."""
        job = self.tracked[entry.job_id]
        if not job.terminate or self.request.cancels_after_term or entry.is_leaving or entry.is_pending:
            return False
        return entry.is_suspended or job.terms > 0

    def skipped_pending(self, entry: QueueEntry) -> bool:
        return self.signal_mode and entry.is_pending and not self.tracked[entry.job_id].sent

    def _untouchable(self, entry: QueueEntry) -> bool:
        return self.left_suspended(entry) or self.tracked[entry.job_id].denied

    def _next_kind(self, entry: QueueEntry) -> Optional[str]:
        """The scancel this listed job needs next, if any."""
        job = self.tracked[entry.job_id]
        if entry.is_leaving or job.denied:
            return None
        if self.signal_mode:
            return SIGNAL if not entry.is_pending and SIGNAL not in job.acknowledged else None
        kind: Optional[str] = CANCEL
        if job.terminate:
            kind = self._terminating_kind(entry, job)
            if kind is None or kind == TERMINATE:
                return kind
        return kind if self.request.wait or kind not in job.acknowledged else None

    def _terminating_kind(self, entry: QueueEntry, job: TrackedJob) -> Optional[str]:
        """The next scancel of a job that ``stop`` terminates."""
        request = self.request
        if entry.is_pending:
            return REMOVE_PENDING
        if entry.is_suspended:
            # Slurm refuses to signal a suspended job's batch step ("Job can not be altered
            # now") and scancel retries for minutes; only a cancel ends it, resuming it.
            return CANCEL if request.cancels_after_term else None
        if TERMINATE not in job.acknowledged:
            return TERMINATE
        if not request.wait:
            # Slurm took the TERM; without wait nobody stays to repeat it or cancel.
            return None
        return CANCEL if request.cancels_after_term else TERMINATE

    def _lingering(self, listing_time: float) -> List[str]:
        messages = []
        for entry in self.ours():
            job = self.tracked[entry.job_id]
            if job.next_log_at is None or listing_time < job.next_log_at - EPSILON:
                continue
            messages.append(
                "Slurm job %s (%s) still in queue, %s, %.1f s into the call"
                % (entry.job_id, entry.name, entry.state, listing_time - self.started)
            )
            job.next_log_at = listing_time + self.request.log_interval
        return messages
