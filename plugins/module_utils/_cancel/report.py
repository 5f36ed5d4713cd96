# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The result of a cancel call: what it did to each job, what it left queued and why, and
the message that says so.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from .._slurm.queue import QueueEntry
from .._slurm.runner import Clock
from .._slurm.scancel import ACCESS_DENIED, CANCEL, REMOVE_PENDING, SIGNAL, TERMINATE
from .jobs import Jobs
from .log import CallLog
from .request import CancelRequest
from .scancels import EPSILON

_MAX_JOBS_IN_MESSAGE = 10


@dataclass
class CancelResult:
    changed: bool = False
    failed: bool = False
    msg: str = ""
    cancelled: List[Dict[str, str]] = field(default_factory=list)
    terminated: List[Dict[str, str]] = field(default_factory=list)
    signalled: List[Dict[str, str]] = field(default_factory=list)
    already_absent: List[str] = field(default_factory=list)
    already_absent_job_ids: List[str] = field(default_factory=list)
    skipped_other_user: List[Dict[str, str]] = field(default_factory=list)
    skipped_pending: List[Dict[str, str]] = field(default_factory=list)
    # A job never listed has no id or name from Slurm: None where the request gave none.
    remaining: List[Mapping[str, Optional[str]]] = field(default_factory=list)
    left_running: List[Dict[str, Any]] = field(default_factory=list)
    permission_denied: List[Dict[str, str]] = field(default_factory=list)
    scancel_calls: int = 0
    squeue_calls: int = 0
    ctld: Optional[bool] = None
    scancel_version: str = ""
    elapsed: float = 0.0
    messages: List[str] = field(default_factory=list)
    slurm_error: str = ""
    diff_before: str = ""
    diff_after: str = ""

    def to_dict(self) -> Dict[str, Any]:
        result = {key: value for key, value in self.__dict__.items() if not key.startswith("diff_")}
        result["diff"] = {"before": self.diff_before, "after": self.diff_after}
        return result


class Report:
    def __init__(self, request: CancelRequest, jobs: Jobs, log: CallLog, clock: Clock, started: float) -> None:
        self._request = request
        self._jobs = jobs
        self._log = log
        self._clock = clock
        self._started = started
        self._deadline = started + request.call_timeout

    def finish(self, result: CancelResult, note: str = "") -> CancelResult:
        """``result`` (its counts filled) completed from the jobs and the log; ``note`` the
        message, if the call ended before it began."""
        request, jobs = self._request, self._jobs
        kinds = self._kinds_sent()
        result.cancelled = self._acted(kinds, (CANCEL, REMOVE_PENDING))
        result.terminated = self._acted(kinds, (TERMINATE,))
        result.signalled = self._acted(kinds, (SIGNAL,))
        result.changed = any(kinds.values())
        listed = jobs.listing is not None
        if listed:
            result.already_absent = [name for name in request.names if name not in jobs.seen_names]
            result.already_absent_job_ids = [i for i in request.job_ids if i not in jobs.seen_job_ids]
            result.skipped_pending = [entry.describe() for entry in jobs.ours() if jobs.skipped_pending(entry)]
            remaining = jobs.unfinished()
            if request.check_mode:
                # Of a real run's leftovers only the suspended jobs it may not touch are certain.
                remaining = [entry for entry in remaining if jobs.left_suspended(entry)]
            result.remaining = [entry.describe() for entry in remaining]
            result.left_running = [self._left_running_entry(entry) for entry in remaining if jobs.left_running(entry)]
            result.permission_denied = [entry.describe() for entry in remaining if jobs.tracked[entry.job_id].denied]
        elif request.names or request.job_ids:
            result.remaining = self._unknown_remaining()
        result.skipped_other_user = [entry.describe() for entry in jobs.others.values()]
        result.slurm_error = self._log.slurm_error()
        # A permanent error fails the call through what it left queued (or unlisted): jobs
        # that left on their own meanwhile are absent all the same.
        result.failed = bool(result.remaining)
        result.msg = note or self._message(result, listed)
        if self._log.permanent and not note:
            result.msg = "%s: %s" % (self._log.permanent, result.msg)
        result.diff_before = _lines(jobs.first_listing or ())
        result.diff_after = _lines(self._queue_after())
        result.elapsed = round(self._clock.now() - self._started, 3)
        return result

    def _kinds_sent(self) -> Dict[str, Set[str]]:
        """job id -> the kinds of scancel it got; in check mode, the kind a real run would send it first."""
        jobs = self._jobs
        if self._request.check_mode:
            return {entry.job_id: {kind} for entry, kind in jobs.next_actions()}
        # Only the queue tells what a failed scancel did: a kind counts when Slurm took it
        # (scancel exited 0) or the job has left the queue (or is leaving) since it was sent.
        queued = {entry.job_id for entry in jobs.listing or () if not entry.is_leaving}
        return {
            job_id: set(job.acknowledged) | (set() if job_id in queued else set(job.sent))
            for job_id, job in jobs.tracked.items()
            if not job.denied
        }

    def _acted(self, kinds: Dict[str, Set[str]], wanted: Tuple[str, ...]) -> List[Dict[str, str]]:
        tracked = self._jobs.tracked
        return [tracked[job_id].action_entry() for job_id, sent in kinds.items() if sent.intersection(wanted)]

    def _left_running_entry(self, entry: QueueEntry) -> Dict[str, Any]:
        described: Dict[str, Any] = dict(entry.describe())
        described["terms"] = self._jobs.tracked[entry.job_id].terms
        return described

    def _unknown_remaining(self) -> List[Mapping[str, Optional[str]]]:
        request = self._request
        unknown: List[Mapping[str, Optional[str]]] = [
            {"name": name, "job_id": None, "state": "UNKNOWN", "user": None} for name in request.names
        ]
        unknown.extend({"name": None, "job_id": i, "state": "UNKNOWN", "user": None} for i in request.job_ids)
        return unknown

    def _queue_after(self) -> Iterable[QueueEntry]:
        jobs, request = self._jobs, self._request
        if jobs.listing is None:
            return ()
        if request.check_mode and not jobs.signal_mode:
            return [entry for entry in jobs.listing if not jobs.is_ours(entry) or jobs.left_suspended(entry)]
        if not request.wait and not jobs.signal_mode:
            return [
                entry
                for entry in jobs.listing
                if entry.job_id not in jobs.tracked or not jobs.tracked[entry.job_id].acknowledged
            ]
        return jobs.listing

    def _time_spent(self) -> str:
        """The timeout when the call ran to its deadline, else the seconds it took (it ended
        early, with only jobs left that no scancel may end)."""
        now = self._clock.now()
        if now >= self._deadline - EPSILON:
            return "%g" % self._request.call_timeout
        return "%.1f" % (now - self._started)

    def _message(self, result: CancelResult, listed: bool) -> str:
        if not listed:
            if self._log.permanent:
                return "Slurm's queue was not listed, no job was cancelled"
            return "could not list Slurm's queue within %g s: %s" % (self._request.call_timeout, result.slurm_error)
        counts = [
            "%s %d" % (verb, len(jobs))
            for verb, jobs in (
                ("signalled", result.signalled),
                ("sent TERM to", result.terminated),
                ("cancelled", result.cancelled),
            )
            if jobs
        ]
        done = "%s Slurm job(s)" % ", ".join(counts) if counts else "no Slurm job needed an scancel"
        sent_any = any(job.sent for job in self._jobs.tracked.values())
        if not counts and (result.permission_denied or sent_any or self._log.permanent):
            done = "no Slurm job cancelled"
        if counts and self._request.check_mode:
            done = "would have " + done
        if not result.remaining:
            return done
        shown = _shown(["%s (%s, %s)" % (job["job_id"], job["name"], job["state"]) for job in result.remaining])
        message = "%s; %d still queued after %s s: %s" % (done, len(result.remaining), self._time_spent(), shown)
        if result.left_running:
            message += "; " + _left_running_note(result.left_running)
        if result.permission_denied:
            message += "; " + _denied_note(result.permission_denied)
        if result.slurm_error:
            message += "; Slurm said: " + result.slurm_error
        return message


def outlived_term_note(request: CancelRequest, kind: str, job_ids: List[str]) -> str:
    """The message when jobs first get more than their TERM."""
    if kind == CANCEL:
        return "%d Slurm job(s) still queued %g s after their TERM, cancelled outright: %s" % (
            len(job_ids),
            request.terminate_grace,
            _shown(job_ids),
        )
    return (
        "%d Slurm job(s) still running %g s after their TERM, sent TERM again (every %g s until they "
        "leave or the timeout; never cancelled outright, after_term=%s): %s"
        % (len(job_ids), request.term_interval, request.term_interval, request.after_term, _shown(job_ids))
    )


def _left_running_note(left: List[Dict[str, Any]]) -> str:
    """Why jobs were left queued, and the choice that would have cancelled them."""
    reasons = [
        "%s (%s)"
        % (
            job["job_id"],
            "suspended: no TERM reaches it" if job["state"] == "SUSPENDED" else "TERM taken %d time(s)" % job["terms"],
        )
        for job in left
    ]
    return (
        "%d left running, not cancelled, as crunch-dispatch-slurm leaves them (after_term=term_again): %s; "
        "after_term=cancel cancels them outright, killing crunch-run, whose Docker container then outlives "
        "it unsaved" % (len(left), _shown(reasons))
    )


def _denied_note(denied: List[Dict[str, str]]) -> str:
    return (
        "Slurm refused %d of them to this user (%s), not tried again: %s; run as their owner, root or a "
        "Slurm operator, or set user to leave other users' jobs alone"
        % (len(denied), ACCESS_DENIED, _shown(["%s (user %s)" % (job["job_id"], job["user"]) for job in denied]))
    )


def _shown(items: List[str]) -> str:
    shown = ", ".join(items[:_MAX_JOBS_IN_MESSAGE])
    more = len(items) - _MAX_JOBS_IN_MESSAGE
    return shown + (" and %d more" % more if more > 0 else "")


def _lines(entries: Iterable[QueueEntry]) -> str:
    return "".join(entry.as_line() + "\n" for entry in entries)
