# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Make Slurm jobs absent with the least load on slurmctld.

Entry point: ``cancel_jobs(CancelRequest(...))`` returns a ``CancelResult``.
Pure Python (3.8+), standard library only; the ``slurm_job_cancel`` module,
``arvados_fail_jobs`` and the boot-time command share it.

How a call goes:

* One ``squeue`` per round lists every requested name and id. Rounds come
  0.05 s apart, the gap doubling up to 1 s, back to 0.05 s after each
  ``scancel`` returns (so a call ends soon after the last job leaves), and
  a round is also held the moment a job may get its next ``scancel``.
* A job is ``scancel``ed only when the latest listing shows it queued, that
  listing began after ``grace_period`` (first ``scancel``) or after
  ``retry_delay`` / ``error_retry_delay`` from its previous ``scancel``,
  and it is not ``COMPLETING``. A failed ``scancel`` proves nothing: only
  the queue decides.
* ``scancel`` gets job ids, many per call (``--name`` takes a single name),
  pending ids first; calls holding only running jobs start once every call
  holding pending ones has returned, so freed CPUs cannot start jobs about
  to be cancelled, and after a listing taken since, which shows running any
  job those left alone because it started. Other scancels one listing
  found due are not held back by another listing. At most
  ``max_job_ids_per_scancel`` ids per call on the per-job path, which
  confines a failure to its own ids; a scancel that is one request (see
  ``ctld`` below) takes up to MAX_JOB_IDS_PER_SCANCEL (10,000, an argv's
  bound) ids of one kind, since it already names each job Slurm refused
  and a second one only waits behind the first one's signals.
* scancel sends one request per id, ten at a time, so a call may take
  ``command_timeout`` (one request's bound) per ten ids before it is killed,
  but never beyond the call's deadline (or ``command_timeout`` after its
  start, for one started just before it).
* From Slurm 24.05 on (``ctld``, see slurm_version) every scancel carries
  ``--ctld`` and is one request for all its ids, bounded by one
  ``command_timeout``; ``scancel --version`` is asked once, beside the first
  squeue, and read when the first scancel is due. Such a scancel exits 0 whatever Slurm said of each job and prints
  "Kill job error on job id N: ..." for those it refused: those ids count as
  a failed scancel (an access denied as for the per-job path), but a job
  ``--state=PENDING`` skipped because it started meanwhile, which the
  per-job path skips silently.
* ``scancel`` starts are spaced by a token bucket of one token refilled at
  ``max_scancel_per_second``; at most ``max_concurrent_scancel`` are alive
  at once, and ``squeue`` runs alone, so Slurm sees at most that plus one.
* A job that ``stop`` says to terminate (see slurm_cancel_request) is
  stopped as crunch-dispatch-slurm stops a container: pending, it is
  removed with ``scancel --state=PENDING`` (which leaves it alone if it has
  started meanwhile; the next round sees it running); suspended, it is
  left alone (Slurm 22.05 refuses to signal a suspended job's batch step and
  scancel then retries for minutes, where the dispatcher sends it TERM);
  running, it gets ``scancel --signal=TERM --batch``. What follows while a
  job stays is ``after_term``'s choice. By default (``term_again``), as the
  dispatcher does, TERM again whenever a listing that began ``term_interval``
  after Slurm took the last one still shows it running, until it leaves or
  the deadline; a job still there then, or suspended, is reported in
  ``left_running`` and the call fails, but nothing of it was killed. With
  ``cancel``, a job a listing shows queued ``terminate_grace`` after Slurm
  took its TERM is cancelled outright, then like any other job, and a
  suspended one at once. Each scancel holds one kind of request, so a call
  never mixes a TERM with a cancel.
* A job Slurm refuses to this user ("Access/permission denied": another
  user's job, and this user neither root, SlurmUser nor an operator) is
  never sent another scancel: it is reported in ``permission_denied`` and
  ``remaining``, and the call ends as soon as only such jobs are left.
* With ``signal``, running (and suspended) jobs get the signal once: the job
  is not expected to leave, so a signal that was delivered is never sent
  again. ``wait`` then waits for the signalled jobs to leave the queue.
  Pending jobs cannot take a signal and are reported, not waited for.
"""

from __future__ import annotations

import math
import os
import pwd
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from .._common.option_bounds import MAX_JOB_IDS_PER_SCANCEL
from .._slurm.queue import (
    SQUEUE_FORMAT,
    SQUEUE_HEADER,
    QueueEntry,
    client_environment,
    has_header,
    id_keys,
    parse_squeue,
    scancel_command,
    select_requested,
    squeue_command,
)
from .._slurm.release import CTLD_ALWAYS, CTLD_AUTO, parse_slurm_version, scancel_version_command, sends_one_request
from .._slurm.runner import Clock, CommandNotFoundError, ProcessHandle, Runner, SubprocessRunner, SystemClock
from .request import DEFAULT_NAME_PATTERN, CancelRequest, CancelRequestError

__all__ = [
    "DEFAULT_NAME_PATTERN",
    "CancelRequest",
    "CancelRequestError",
    "CancelResult",
    "CommandNotFoundError",
    "PollSchedule",
    "TokenBucket",
    "cancel_jobs",
]

# How often live scancel processes are checked for having ended (a cheap
# waitpid); the next look at the queue waits for it.
SCANCEL_CHECK_INTERVAL = 0.005
# Never sleep less, so that a rounding error cannot turn the loop into a spin.
MIN_SLEEP = 0.001
_EPSILON = 1e-9
# scancel sends one REQUEST_KILL_JOB per job id, at most this many at once
# (MAX_THREADS in src/scancel/scancel.c, 10 from Slurm 22.05 to 25.11; only
# --ctld from 24.05 on sends one request for all). Under load each
# request may take up to MessageTimeout, and scancel adds up to 1 s before
# each once slurmctld answers slowly.
SCANCEL_REQUESTS_AT_ONCE = 10
_MAX_JOBS_IN_MESSAGE = 10
# What scancel prints for each id Slurm refuses to this user (ESLURM_ACCESS_DENIED, whose
# number 2002 is also its exit status modulo 256, 210): sending the same request again
# would only be refused again.
ACCESS_DENIED = "Access/permission denied"
_DENIED_JOB = re.compile(r"job id ([0-9]+(?:_[0-9]+)?): " + re.escape(ACCESS_DENIED))
# What scancel --ctld prints for each job Slurm did not signal (_ctld_signal_jobs in
# src/scancel/scancel.c, 24.05 to 25.11; it exits 0 all the same). Unknown and finished
# jobs are not printed.
_KILL_JOB_ERROR = re.compile(r"Kill job error on job id ([0-9]+(?:_[0-9]+)?): (.*)$", re.MULTILINE)
# slurmctld's word for a job --state=PENDING left alone because it is no longer pending
# (_signal_job_matches_filter in src/slurmctld/job_mgr.c, 24.05 to 25.11): what the
# per-job path does silently, no error.
_STATE_FILTER_MISMATCH = "!= filter state"

# What one scancel asks of Slurm; one kind per call.
CANCEL = "cancel"  # scancel ID...
REMOVE_PENDING = "remove_pending"  # scancel --state=PENDING ID...
TERMINATE = "terminate"  # scancel --signal=TERM --batch ID...
SIGNAL = "signal"  # scancel --signal=SIGNAL [--batch] ID...
_KIND_ORDER = (REMOVE_PENDING, CANCEL, TERMINATE, SIGNAL)
# Lines of a client's stderr kept in a message.
_MAX_STDERR_LINES = 3
# What squeue and scancel print when they refuse their own command line and exit 1 before
# asking slurmctld anything (src/scancel/opt.c and src/squeue/opts.c, 22.05 to 25.11): an
# option getopt does not know, a bad --signal, a malformed job id ("Invalid job id abc",
# not the "Kill job error on job id N: Invalid job id specified" of a job that left), or
# a --clusters entry slurmdbd does not name (_opt_clusters). Asking again cannot change
# the answer, so the call ends at once instead of retrying until its timeout.
_REFUSED_COMMAND_LINE = re.compile(
    r"unrecognized option|invalid option|option requires an argument|Try \"s(?:cancel|queue) --help\"|"
    r"Unknown job signal|^\S+: error: Invalid job id |invalid entry for --cluster",
    re.MULTILINE,
)


class PollSchedule:
    """Gaps between queue listings: short at first, doubling up to a ceiling."""

    def __init__(self, initial: float = 0.05, maximum: float = 1.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._gap = initial

    def next_gap(self) -> float:
        gap = self._gap
        self._gap = min(gap * 2, self.maximum)
        return gap

    def reset(self) -> None:
        self._gap = self.initial


class TokenBucket:
    """Starts spaced at least 1/rate apart; no burst beyond ``capacity``."""

    def __init__(self, rate: float, now: float, capacity: float = 1.0) -> None:
        self.rate = rate
        self.capacity = capacity
        self._tokens = capacity
        self._updated = now

    def _refill(self, now: float) -> None:
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    def take(self, now: float) -> bool:
        self._refill(now)
        if self._tokens < 1 - _EPSILON:
            return False
        self._tokens -= 1
        return True

    def next_available(self, now: float) -> float:
        self._refill(now)
        return now + max(0.0, (1 - self._tokens) / self.rate)


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


@dataclass
class _TrackedJob:
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


@dataclass
class _CommandOutcome:
    program: str
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def permanent_reason(self) -> str:
        """Why no retry of this failed command can succeed, or "" when one may.

        Slurm's clients print a reason whenever they exit 1 (slurm_perror, error());
        exiting 1 in silence (/bin/false) is not Slurm's client. Timeouts, "Unable to
        contact slurm controller" and the like pass, and are retried."""
        if self.ok or self.timed_out:
            return ""
        if self.returncode == 1 and not self.stdout.strip() and not self.stderr.strip():
            return "%s exited with status 1 and printed nothing, which Slurm's %s never does" % (
                self.program,
                self.program,
            )
        if _REFUSED_COMMAND_LINE.search(self.stderr):
            return "%s refused its command line: %s" % (self.program, _slurm_words(self.stderr))
        return ""

    def error_text(self, time_limit: float) -> str:
        said = _slurm_words(self.stderr)
        if self.timed_out:
            reason = "%s did not finish within %g s and was killed" % (self.program, round(time_limit, 1))
            return "%s: %s" % (reason, said) if said else reason
        return said or "%s exited with status %s" % (self.program, self.returncode)


def _slurm_words(stderr: str) -> str:
    """A client's stderr on one line, without scancel's notes on its own backoff
    ("_add_delay: adding delay in RPC send"), and only its first few lines: an
    scancel of 500 ids under load prints a line per failed id."""
    lines = [" ".join(line.split()) for line in stderr.splitlines() if line.strip() and "_add_delay:" not in line]
    said = " ".join(lines[:_MAX_STDERR_LINES])
    if len(lines) > _MAX_STDERR_LINES:
        said += " (and %d more lines)" % (len(lines) - _MAX_STDERR_LINES)
    return said


@dataclass
class _ScancelCall:
    handle: ProcessHandle
    kind: str
    job_ids: List[str]
    holds_pending: bool
    kill_at: float
    time_limit: float
    one_request: bool


def cancel_jobs(
    request: CancelRequest,
    runner: Optional[Runner] = None,
    clock: Optional[Clock] = None,
    environ: Optional[Mapping[str, str]] = None,
    caller: Optional[Tuple[int, str]] = None,
) -> CancelResult:
    """Carry out ``request``.

    ``caller``: (uid, user name) of who runs the clients, this process's effective user by
    default. Raises CommandNotFoundError when squeue or scancel cannot be run; every
    other failure (Slurm down, jobs left at the deadline) is in the result.
    """
    canceller = _Canceller(
        request,
        runner or SubprocessRunner(),
        clock or SystemClock(),
        os.environ if environ is None else environ,
        caller or _effective_user(),
    )
    return canceller.run()


def _effective_user() -> Tuple[int, str]:
    uid = os.geteuid()
    try:
        return uid, pwd.getpwuid(uid).pw_name
    except KeyError:
        # No name to match squeue's user column against: only root's --ctld is safe.
        return uid, ""


class _Canceller:
    def __init__(
        self,
        request: CancelRequest,
        runner: Runner,
        clock: Clock,
        environ: Mapping[str, str],
        caller: Tuple[int, str],
    ) -> None:
        self.request = request
        self.caller = caller
        self.runner = runner
        self.clock = clock
        self.env = client_environment(environ)
        self.started = clock.now()
        self.deadline = self.started + request.call_timeout
        self.grace_end = self.started + request.grace_period
        self.signal_mode = bool(request.signal)
        self.jobs: Dict[str, _TrackedJob] = {}
        self.others: Dict[str, QueueEntry] = {}
        self.seen_names: set = set()
        self.seen_job_ids: set = set()
        self.first_listing: Optional[List[QueueEntry]] = None
        self.listing: Optional[List[QueueEntry]] = None
        self.listing_time = 0.0
        self.live: List[_ScancelCall] = []
        # The scancels due, front first, as of the latest listing and the last scancel that
        # ended; None when one of those changed since. Worked out again only then: the loop
        # wakes every SCANCEL_CHECK_INTERVAL while scancels run, and going over a thousand
        # jobs each time took most of a CPU from slurmctld for the whole stop (0.73 s a
        # second of scancel for 1,000 jobs, measured with the fakes).
        self.due: Optional[List[Tuple[str, List[QueueEntry]]]] = None
        # Each listed job's next scancel, worked out again under the same rule as `due`
        # (a listing or an ended scancel changes it): a stop of 1,000 jobs went over them
        # seven times, 10 ms of its 130 on Slurm 24.11 (bench/README.md, issue 23).
        self.actions: Optional[List[Tuple[QueueEntry, str]]] = None
        # Whether an scancel holding pending jobs ended since the latest listing.
        self.pending_call_ended = False
        self.bucket = TokenBucket(request.max_scancel_per_second, self.started)
        self.polls = PollSchedule()
        self.next_poll_at = self.started
        self.next_error_log_at: Dict[str, float] = {}
        self.result = CancelResult()
        self.squeue_error = ""
        self.scancel_error = ""
        # A failure no retry can mend (a bad option, a program that is not Slurm's client):
        # the call ends at once with it.
        self.permanent_error = ""
        # Whether scancel gets --ctld: settled before the first scancel (option ctld).
        self.ctld: Optional[bool] = None
        self.one_request = False
        self.noted_ctld_refused = False
        # `scancel --version`, started with the first squeue when the run may need it; or
        # why scancel could not be started, raised only if an scancel is then due.
        self.version_probe: Optional[ProcessHandle] = None
        self.version_probe_error: Optional[CommandNotFoundError] = None

    # -- the loop ------------------------------------------------------------

    def run(self) -> CancelResult:
        if not self.request.names and not self.request.job_ids:
            return self._finish("nothing requested: no Slurm job name or id given")
        self._start_version_probe()
        try:
            if self.request.check_mode:
                return self._check()
            return self._loop()
        finally:
            self._end_version_probe()

    def _loop(self) -> CancelResult:
        while True:
            self._reap_scancels()
            now = self.clock.now()
            if self._done() or now >= self.deadline or self.permanent_error:
                break
            # No look while scancels run: the call cannot end before they
            # do, and a look taken after them tells more.
            if now >= self.next_poll_at and not self.live and self._look_first():
                self._poll_queue()
                continue
            left_waiting = self._start_due_scancels(now)
            self._sleep_until_next_event(now, left_waiting)
        self._let_live_scancels_end()
        if self.permanent_error and self.listing is not None and self.squeue_error == "":
            # An scancel failed for good: one more look says what is still queued.
            self._list_queue()
        return self._finish()

    def _check(self) -> CancelResult:
        if self._list_queue() and self._actionable():
            self._settle_ctld()
        return self._finish()

    def _done(self) -> bool:
        """Nothing left to do: the jobs are gone, or only those no scancel may touch are left."""
        if self.listing is None or self.live:
            return False
        return all(self._untouchable(entry) for entry in self._unfinished())

    def _untouchable(self, entry: QueueEntry) -> bool:
        return self._left_suspended(entry) or self.jobs[entry.job_id].denied

    def _sleep_until_next_event(self, now: float, left_waiting: bool) -> None:
        wake = self.deadline
        if left_waiting:
            wake = min(wake, self.bucket.next_available(now))
        if self.live:
            wake = min(wake, now + SCANCEL_CHECK_INTERVAL, min(call.kill_at for call in self.live))
        elif not left_waiting or self._look_first():
            wake = min(wake, self.next_poll_at)
        self.clock.sleep(max(wake - now, MIN_SLEEP))

    def _let_live_scancels_end(self) -> None:
        while self.live:
            self._reap_scancels()
            if self.live:
                now = self.clock.now()
                wake = min(now + SCANCEL_CHECK_INTERVAL, min(call.kill_at for call in self.live))
                self.clock.sleep(max(wake - now, MIN_SLEEP))

    # -- the queue -----------------------------------------------------------

    def _poll_queue(self) -> None:
        listed = self._list_queue()
        now = self.clock.now()
        self.next_poll_at = now + self.polls.next_gap()
        if listed:
            upcoming = [
                self.jobs[entry.job_id].eligible_at
                for entry in self._actionable()
                if self.jobs[entry.job_id].eligible_at > now
            ]
            self.next_poll_at = min([self.next_poll_at] + upcoming)

    def _list_queue(self) -> bool:
        request = self.request
        argv = squeue_command(request.squeue_path, request.names, request.job_ids, request.clusters)
        began = self.clock.now()
        outcome = self._run_to_end("squeue", argv)
        self.result.squeue_calls += 1
        if not outcome.ok:
            self.squeue_error = outcome.error_text(request.command_timeout)
            self._log_error("squeue", "squeue failed: " + self.squeue_error)
            self._note_permanent(outcome.permanent_reason())
            return False
        if not has_header(outcome.stdout):
            said = _slurm_words(outcome.stdout) or "nothing"
            self.squeue_error = (
                "squeue exited 0 without the line %s that Slurm's squeue prints first for --format=%s, "
                "even with no job queued (it printed %s): not a listing of Slurm's queue"
                % (SQUEUE_HEADER, SQUEUE_FORMAT, said[:200])
            )
            self._note_permanent(self.squeue_error)
            return False
        self.squeue_error = ""
        self._absorb(parse_squeue(outcome.stdout), began)
        return True

    def _absorb(self, entries: List[QueueEntry], listing_time: float) -> None:
        requested = select_requested(entries, self.request.names, self.request.job_ids)
        wanted_ids = set(self.request.job_ids)
        for entry in requested:
            self.seen_names.add(entry.name)
            self.seen_job_ids.update(wanted_ids.intersection(id_keys(entry.job_id)))
            if not self._is_ours(entry):
                self.others.setdefault(entry.job_id, entry)
            elif entry.job_id not in self.jobs:
                terminate = self.request.terminates(entry.name)
                self.jobs[entry.job_id] = _TrackedJob(entry, terminate, eligible_at=self.grace_end)
        if self.first_listing is None:
            self.first_listing = requested
        self.listing = requested
        self.due = None
        self.actions = None
        self.pending_call_ended = False
        self.listing_time = listing_time
        self._log_lingering(listing_time)

    def _is_ours(self, entry: QueueEntry) -> bool:
        return self.request.user is None or entry.user == self.request.user

    def _ours(self) -> List[QueueEntry]:
        return [entry for entry in self.listing or () if self._is_ours(entry)]

    def _actionable(self) -> List[QueueEntry]:
        """Jobs in the latest listing that may still need an scancel."""
        return [action[0] for action in self._next_actions()]

    def _next_actions(self) -> List[Tuple[QueueEntry, str]]:
        """(job, the scancel it needs next) for each job in the latest listing that needs one."""
        if self.actions is None:
            self.actions = []
            for entry in self._ours():
                kind = self._next_kind(entry)
                if kind is not None:
                    self.actions.append((entry, kind))
        return self.actions

    def _next_kind(self, entry: QueueEntry) -> Optional[str]:
        """The scancel this listed job needs next, if any."""
        job = self.jobs[entry.job_id]
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

    def _terminating_kind(self, entry: QueueEntry, job: _TrackedJob) -> Optional[str]:
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

    def _left_suspended(self, entry: QueueEntry) -> bool:
        """A suspended job that by default neither a TERM reaches nor a cancel may end."""
        job = self.jobs[entry.job_id]
        return job.terminate and entry.is_suspended and not self.request.cancels_after_term

    def _unfinished(self) -> List[QueueEntry]:
        if not self.request.wait:
            return self._actionable() + [entry for entry in self._ours() if self._untouchable(entry)]
        return [entry for entry in self._ours() if not self._skipped_pending(entry)]

    def _left_running(self, entry: QueueEntry) -> bool:
        """Still there, and by default never cancelled: it outlived its TERMs or is suspended."""
        job = self.jobs[entry.job_id]
        if not job.terminate or self.request.cancels_after_term or entry.is_leaving or entry.is_pending:
            return False
        return entry.is_suspended or job.terms > 0

    def _left_running_entry(self, entry: QueueEntry) -> Dict[str, Any]:
        described: Dict[str, Any] = dict(entry.describe())
        described["terms"] = self.jobs[entry.job_id].terms
        return described

    def _skipped_pending(self, entry: QueueEntry) -> bool:
        return self.signal_mode and entry.is_pending and not self.jobs[entry.job_id].sent

    # -- scancel -------------------------------------------------------------

    def _start_due_scancels(self, now: float) -> bool:
        """Start what the bounds allow; True if due jobs are left waiting for them."""
        if self._due() and self.ctld is None:
            self._settle_ctld()
            if self.one_request:
                # Cut before a scancel was known to be one request, which takes more ids.
                self.due = None
                self._due()
            now = self.clock.now()
        while self.due:
            kind, batch = self.due[0]
            holds_pending = batch[0].is_pending
            if not holds_pending and any(call.holds_pending for call in self.live):
                return True
            if len(self.live) >= self.request.max_concurrent_scancel or not self.bucket.take(now):
                return True
            self._start_scancel(kind, batch, holds_pending, now)
            # What is left is what _due_batches would now say: batches are cut in order.
            del self.due[0]
        return False

    def _look_first(self) -> bool:
        """Whether to list the queue before starting what the latest listing found due.

        Not when scancels it found due are held only by the token bucket: that listing
        stands for them, and another would hold them back, under load for as long as
        slurmctld takes to answer it, busy with the jobs the first scancels stopped (1.9 s
        between two --ctld calls of 500 running jobs on 24.11). But running jobs wait for a
        listing taken after the scancels of pending ones: a job those left alone because it
        started meanwhile is then seen running, in time for their scancel.
        """
        due = self._due()
        return not due or (self.pending_call_ended and not due[0][1][0].is_pending)

    def _due(self) -> List[Tuple[str, List[QueueEntry]]]:
        if self.due is None:
            self.due = self._due_batches()
        return self.due

    def _due_batches(self) -> List[Tuple[str, List[QueueEntry]]]:
        """(kind, jobs) per scancel due now: pending jobs first within a kind, and
        batches holding pending jobs before the others."""
        by_kind: Dict[str, List[QueueEntry]] = {}
        for entry, kind in self._next_actions():
            job = self.jobs[entry.job_id]
            if not job.in_flight and self.listing_time >= job.eligible_at - _EPSILON:
                by_kind.setdefault(kind, []).append(entry)
        batches: List[Tuple[str, List[QueueEntry]]] = []
        for kind, entries in by_kind.items():
            entries.sort(key=lambda entry: not entry.is_pending)
            cap = self._job_ids_per_scancel(entries)
            batches.extend((kind, entries[first : first + cap]) for first in range(0, len(entries), cap))
        batches.sort(key=lambda batch: (not batch[1][0].is_pending, _KIND_ORDER.index(batch[0])))
        return batches

    def _job_ids_per_scancel(self, entries: List[QueueEntry]) -> int:
        """How many of these jobs one scancel names.

        One request (--ctld from 24.05 on) exits 0 whatever Slurm said of each job and
        names each job it refused, so a failure stays confined to its ids anyway, and a
        second scancel only queues behind the first one's signals in slurmctld (on 24.11,
        1,000 running jobs stopped in 1.1 s as two scancels of 500, 0.35 s as one): up to
        the bound of an argv. One request per job keeps max_job_ids_per_scancel.
        """
        if self.one_request and self._may_name_with_ctld(entries):
            return MAX_JOB_IDS_PER_SCANCEL
        return self.request.max_job_ids_per_scancel

    def _start_scancel(self, kind: str, batch: List[QueueEntry], holds_pending: bool, now: float) -> None:
        job_ids = [entry.job_id for entry in batch]
        ctld = bool(self.ctld) and self._ctld_is_safe_for(batch)
        handle = self.runner.start(self._scancel_argv(kind, job_ids, ctld), self.env)
        self.result.scancel_calls += 1
        one_request = ctld and self.one_request
        time_limit = self._scancel_time_limit(len(job_ids), now, one_request)
        self.live.append(_ScancelCall(handle, kind, job_ids, holds_pending, now + time_limit, time_limit, one_request))
        outlived_term = []
        for job_id in job_ids:
            job = self.jobs[job_id]
            job.in_flight = True
            if kind in (CANCEL, TERMINATE) and TERMINATE in job.acknowledged and not job.outlived_term_noted:
                outlived_term.append(job_id)
                job.outlived_term_noted = True
            job.sent.add(kind)
        if outlived_term:
            self._note_outlived_term(kind, outlived_term)

    def _note_outlived_term(self, kind: str, job_ids: List[str]) -> None:
        """One message per job when it first gets more than its TERM."""
        request = self.request
        if kind == CANCEL:
            message = "%d Slurm job(s) still queued %g s after their TERM, cancelled outright: %s" % (
                len(job_ids),
                request.terminate_grace,
                _shown(job_ids),
            )
        else:
            message = (
                "%d Slurm job(s) still running %g s after their TERM, sent TERM again (every %g s until they "
                "leave or the timeout; never cancelled outright, after_term=%s): %s"
                % (len(job_ids), request.term_interval, request.term_interval, request.after_term, _shown(job_ids))
            )
        self.result.messages.append(message)

    def _ctld_is_safe_for(self, batch: List[QueueEntry]) -> bool:
        """Whether this caller may name these jobs to scancel --ctld: as root, or their owner.

        From 24.05 to 25.11 slurmctld answers a REQUEST_KILL_JOBS naming another user's job
        from a user who is not root (nor SlurmUser or an operator) by looking for account
        coordinators while it holds the association lock it would then take again, when no
        accounting database filled that list (``_apply_signal_jobs_filter`` in
        src/slurmctld/job_mgr.c, ``assoc_mgr_is_user_acct_coord(..., true)``): slurmctld
        deadlocks, every later squeue times out. Seen on Debian 13's 24.11.5 without
        slurmdbd. The per-job path only says "Access/permission denied".
        """
        if self._may_name_with_ctld(batch):
            return True
        if not self.noted_ctld_refused:
            self.noted_ctld_refused = True
            self.result.messages.append(
                "jobs of another user named without --ctld (one request per job): from a user neither root "
                "nor their owner, scancel --ctld can deadlock slurmctld 24.05 to 25.11 without accounting"
            )
        return False

    def _may_name_with_ctld(self, entries: List[QueueEntry]) -> bool:
        uid, name = self.caller
        return uid == 0 or all(entry.user == name for entry in entries)

    def _settle_ctld(self) -> None:
        """Whether every scancel of this run carries --ctld, and whether that makes it one
        request: the option, or for auto what ``scancel --version`` says, asked once."""
        choice = self.request.ctld
        version = None
        if self._asks_scancel_version():
            version = self._scancel_version()
        self.ctld = choice == CTLD_ALWAYS or (choice == CTLD_AUTO and sends_one_request(version))
        self.one_request = self.ctld and sends_one_request(version)
        self.result.ctld = self.ctld

    def _asks_scancel_version(self) -> bool:
        """Whether the option wants the release: to choose (auto) or to bound each call (always)."""
        return self.request.ctld in (CTLD_AUTO, CTLD_ALWAYS)

    def _start_version_probe(self) -> None:
        """Start ``scancel --version`` beside the first squeue when an scancel of this run
        would ask it: it talks to no daemon, and asked in series it added a process's start
        (8 ms under load) to every stop. Its answer is read only if an scancel is due."""
        if not self._asks_scancel_version() or self.request.scancel_release is not None:
            return
        try:
            self.version_probe = self.runner.start(scancel_version_command(self.request.scancel_path), self.env)
        except CommandNotFoundError as error:
            self.version_probe_error = error

    def _end_version_probe(self) -> None:
        """Reap a probe nobody asked (nothing was due), so that no process outlives the call."""
        if self.version_probe is not None:
            self.version_probe.kill()
            self.version_probe.output()
            self.version_probe = None

    def _scancel_version(self) -> Optional[Tuple[int, int]]:
        known = self.request.scancel_release
        if known is not None:
            self.result.scancel_version = known
            return parse_slurm_version("slurm " + known) if known else None
        outcome = self._version_outcome()
        version = parse_slurm_version(outcome.stdout) if outcome.ok else None
        if version is not None:
            self.result.scancel_version = "%d.%02d" % version
            return version
        said = outcome.stdout.strip()[:200] if outcome.ok else outcome.error_text(self.request.command_timeout)
        if self.request.ctld == CTLD_AUTO:
            then = "one request per job, without --ctld"
        else:
            then = "--ctld given as ctld=always asks, bounded as one request per job"
        self.result.messages.append("scancel --version named no Slurm release (%s): %s" % (said or "no output", then))
        return None

    def _scancel_time_limit(self, job_count: int, now: float, one_request: bool) -> float:
        """Seconds an scancel of this many ids may run before it is killed."""
        command_timeout = self.request.command_timeout
        if one_request:
            return command_timeout
        rounds_of_requests = math.ceil(job_count / SCANCEL_REQUESTS_AT_ONCE)
        return max(command_timeout, min(command_timeout * rounds_of_requests, self.deadline - now))

    def _scancel_argv(self, kind: str, job_ids: List[str], ctld: bool) -> List[str]:
        request = self.request
        path, clusters = request.scancel_path, request.clusters
        if kind == SIGNAL:
            return scancel_command(path, job_ids, clusters, request.signal, request.batch, ctld=ctld)
        if kind == TERMINATE:
            return scancel_command(path, job_ids, clusters, "TERM", True, ctld=ctld)
        return scancel_command(path, job_ids, clusters, None, False, only_pending=kind == REMOVE_PENDING, ctld=ctld)

    def _reap_scancels(self) -> None:
        for call in list(self.live):
            returncode = call.handle.poll()
            now = self.clock.now()
            timed_out = returncode is None
            if timed_out:
                if now < call.kill_at:
                    continue
                call.handle.kill()
            self.live.remove(call)
            stdout, stderr = call.handle.output()
            self._settle(call, _CommandOutcome("scancel", returncode, stdout, stderr, timed_out), now)

    def _settle(self, call: _ScancelCall, outcome: _CommandOutcome, now: float) -> None:
        request = self.request
        refused = _refused_by_ctld(outcome.stderr, call.job_ids) if outcome.ok and call.one_request else {}
        denied = set() if outcome.ok else _denied_job_ids(outcome.stderr, call.job_ids)
        denied.update(job_id for job_id, said in refused.items() if ACCESS_DENIED in said)
        delay = request.retry_delay
        if call.kind == TERMINATE:
            delay = request.terminate_grace if request.cancels_after_term else request.term_interval
        for job_id in call.job_ids:
            job = self.jobs[job_id]
            job.in_flight = False
            taken = outcome.ok and job_id not in refused
            if taken:
                job.acknowledged.add(call.kind)
                job.terms += call.kind == TERMINATE
            job.denied = job.denied or job_id in denied
            job.eligible_at = now + (delay if taken else request.error_retry_delay)
            if job.next_log_at is None:
                job.next_log_at = now + request.retry_delay
        if not outcome.ok:
            self.scancel_error = outcome.error_text(call.time_limit)
            self._log_error("scancel", "scancel of %d job(s) failed: %s" % (len(call.job_ids), self.scancel_error))
            permanent = outcome.permanent_reason()
            if permanent:
                # It never reached Slurm: a job of it that left, left on its own.
                for job_id in call.job_ids:
                    self.jobs[job_id].sent.discard(call.kind)
            self._note_permanent(permanent)
        elif refused:
            self.scancel_error = _slurm_words(outcome.stderr)
            self._log_error(
                "scancel",
                "Slurm refused %d of the %d job(s) of an scancel --ctld: %s"
                % (len(refused), len(call.job_ids), self.scancel_error),
            )
        else:
            self.scancel_error = ""
        self.due = None
        self.actions = None
        self.pending_call_ended = self.pending_call_ended or call.holds_pending
        # Pending jobs leave at once and running ones within moments: look soon.
        self.polls.reset()
        self.next_poll_at = min(self.next_poll_at, now)

    # -- commands and messages -----------------------------------------------

    def _version_outcome(self) -> _CommandOutcome:
        if self.version_probe_error is not None:
            raise self.version_probe_error
        if self.version_probe is None:
            return self._run_to_end("scancel", scancel_version_command(self.request.scancel_path))
        handle, self.version_probe = self.version_probe, None
        return self._ended("scancel", handle)

    def _run_to_end(self, program: str, argv: List[str]) -> _CommandOutcome:
        return self._ended(program, self.runner.start(argv, self.env))

    def _ended(self, program: str, handle: ProcessHandle) -> _CommandOutcome:
        """The outcome of a started command, killed if it outlives command_timeout."""
        returncode = handle.wait(self.request.command_timeout)
        timed_out = returncode is None
        if timed_out:
            handle.kill()
        stdout, stderr = handle.output()
        return _CommandOutcome(program, returncode, stdout, stderr, timed_out)

    def _note_permanent(self, reason: str) -> None:
        """End the call at once: a failure no retry can mend, with the settings behind it."""
        if not reason or self.permanent_error:
            return
        request = self.request
        program = reason.split(" ", 1)[0]
        settings = ["%s_path=%s" % (program, getattr(request, program + "_path", program))]
        if request.clusters:
            settings.append("clusters=%s" % request.clusters)
        self.permanent_error = "%s (%s); not tried again" % (reason, ", ".join(settings))

    def _log_error(self, key: str, message: str) -> None:
        now = self.clock.now()
        if now < self.next_error_log_at.get(key, now):
            return
        self.result.messages.append(message)
        self.next_error_log_at[key] = now + self.request.log_interval

    def _log_lingering(self, listing_time: float) -> None:
        for entry in self._ours():
            job = self.jobs[entry.job_id]
            if job.next_log_at is None or listing_time < job.next_log_at - _EPSILON:
                continue
            self.result.messages.append(
                "Slurm job %s (%s) still in queue, %s, %.1f s into the call"
                % (entry.job_id, entry.name, entry.state, listing_time - self.started)
            )
            job.next_log_at = listing_time + self.request.log_interval

    # -- the result ----------------------------------------------------------

    def _finish(self, note: str = "") -> CancelResult:
        result = self.result
        kinds = self._kinds_sent()
        result.cancelled = self._acted(kinds, (CANCEL, REMOVE_PENDING))
        result.terminated = self._acted(kinds, (TERMINATE,))
        result.signalled = self._acted(kinds, (SIGNAL,))
        result.changed = any(kinds.values())
        listed = self.listing is not None
        if listed:
            result.already_absent = [name for name in self.request.names if name not in self.seen_names]
            result.already_absent_job_ids = [i for i in self.request.job_ids if i not in self.seen_job_ids]
            result.skipped_pending = [entry.describe() for entry in self._ours() if self._skipped_pending(entry)]
            remaining = self._unfinished()
            if self.request.check_mode:
                # Of a real run's leftovers only the suspended jobs it may not touch are certain.
                remaining = [entry for entry in remaining if self._left_suspended(entry)]
            result.remaining = [entry.describe() for entry in remaining]
            result.left_running = [self._left_running_entry(entry) for entry in remaining if self._left_running(entry)]
            result.permission_denied = [entry.describe() for entry in remaining if self.jobs[entry.job_id].denied]
        elif self.request.names or self.request.job_ids:
            result.remaining = self._unknown_remaining()
        result.skipped_other_user = [entry.describe() for entry in self.others.values()]
        result.slurm_error = "; ".join(error for error in (self.squeue_error, self.scancel_error) if error)
        # A permanent error fails the call through what it left queued (or unlisted): jobs
        # that left on their own meanwhile are absent all the same.
        result.failed = bool(result.remaining)
        result.msg = note or self._message(listed)
        if self.permanent_error and not note:
            result.msg = "%s: %s" % (self.permanent_error, result.msg)
        result.diff_before = _lines(self.first_listing or ())
        result.diff_after = _lines(self._queue_after())
        result.elapsed = round(self.clock.now() - self.started, 3)
        return result

    def _kinds_sent(self) -> Dict[str, Set[str]]:
        """job id -> the kinds of scancel it got; in check mode, the kind a real run would send it first."""
        if self.request.check_mode:
            return {entry.job_id: {kind} for entry, kind in self._next_actions()}
        # Only the queue tells what a failed scancel did: a kind counts when Slurm took it
        # (scancel exited 0) or the job has left the queue (or is leaving) since it was sent.
        queued = {entry.job_id for entry in self.listing or () if not entry.is_leaving}
        return {
            job_id: set(job.acknowledged) | (set() if job_id in queued else set(job.sent))
            for job_id, job in self.jobs.items()
            if not job.denied
        }

    def _acted(self, kinds: Dict[str, Set[str]], wanted: Tuple[str, ...]) -> List[Dict[str, str]]:
        return [self.jobs[job_id].action_entry() for job_id, sent in kinds.items() if sent.intersection(wanted)]

    def _unknown_remaining(self) -> List[Mapping[str, Optional[str]]]:
        unknown: List[Mapping[str, Optional[str]]] = [
            {"name": name, "job_id": None, "state": "UNKNOWN", "user": None} for name in self.request.names
        ]
        unknown.extend({"name": None, "job_id": i, "state": "UNKNOWN", "user": None} for i in self.request.job_ids)
        return unknown

    def _queue_after(self) -> Iterable[QueueEntry]:
        if self.listing is None:
            return ()
        if self.request.check_mode and not self.signal_mode:
            return [entry for entry in self.listing if not self._is_ours(entry) or self._left_suspended(entry)]
        if not self.request.wait and not self.signal_mode:
            return [
                entry
                for entry in self.listing
                if entry.job_id not in self.jobs or not self.jobs[entry.job_id].acknowledged
            ]
        return self.listing

    def _time_spent(self) -> str:
        """The timeout when the call ran to its deadline, else the seconds it took (it ended
        early, with only jobs left that no scancel may end)."""
        now = self.clock.now()
        if now >= self.deadline - _EPSILON:
            return "%g" % self.request.call_timeout
        return "%.1f" % (now - self.started)

    def _message(self, listed: bool) -> str:
        result = self.result
        if not listed:
            if self.permanent_error:
                return "Slurm's queue was not listed, no job was cancelled"
            return "could not list Slurm's queue within %g s: %s" % (self.request.call_timeout, result.slurm_error)
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
        sent_any = any(job.sent for job in self.jobs.values())
        if not counts and (result.permission_denied or sent_any or self.permanent_error):
            done = "no Slurm job cancelled"
        if counts and self.request.check_mode:
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


def _denied_job_ids(stderr: str, job_ids: List[str]) -> Set[str]:
    """The ids of an scancel's that Slurm refused to this user; all of them if it says so
    without naming any."""
    named = set(_DENIED_JOB.findall(stderr)).intersection(job_ids)
    if not named and ACCESS_DENIED in stderr:
        return set(job_ids)
    return named


def _refused_by_ctld(stderr: str, job_ids: List[str]) -> Dict[str, str]:
    """job id -> what Slurm said, for the ids of an scancel --ctld that Slurm did not take."""
    wanted = set(job_ids)
    return {
        job_id: said.strip()
        for job_id, said in _KILL_JOB_ERROR.findall(stderr)
        if job_id in wanted and _STATE_FILTER_MISMATCH not in said
    }


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
