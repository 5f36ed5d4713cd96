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
* From Slurm 24.05 on (``ctld``, see _slurm/release.py) every scancel carries
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
* A job that ``stop`` says to terminate (see request.py) is
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

Who does what: this file holds the loop (list, start what is due, sleep until
the next event); ``jobs.py`` what each job was sent and needs next (and the
two caches of that), ``scancels.py`` the scancel processes and their bounds,
``ctld.py`` the ``--ctld`` choice and its version probe, ``log.py`` the
messages and errors as they come, ``report.py`` the result;
``_slurm/scancel.py`` and ``_slurm/outcome.py`` build scancel's command lines
and read what the clients print.
"""

from __future__ import annotations

import os
import pwd
from typing import Mapping, Optional, Tuple

from .._slurm.outcome import ClientOutcome, run_to_end, slurm_words
from .._slurm.queue import SQUEUE_FORMAT, SQUEUE_HEADER, client_environment, has_header, parse_squeue, squeue_command
from .._slurm.runner import Clock, CommandNotFoundError, Runner, SubprocessRunner, SystemClock
from .._slurm.scancel import read_scancel
from .ctld import CtldChoice
from .jobs import Jobs
from .log import CallLog
from .report import CancelResult, Report, outlived_term_note
from .request import CancelRequest, CancelRequestError
from .scancels import ScancelCall, Scancels

__all__ = [
    "CancelRequest",
    "CancelRequestError",
    "CancelResult",
    "CommandNotFoundError",
    "PollSchedule",
    "cancel_jobs",
]

# Never sleep less, so that a rounding error cannot turn the loop into a spin.
MIN_SLEEP = 0.001


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
        self.runner = runner
        self.clock = clock
        self.env = client_environment(environ)
        self.started = clock.now()
        self.deadline = self.started + request.call_timeout
        self.log = CallLog(request, clock)
        self.ctld = CtldChoice(request, runner, self.env, caller, self.log)
        self.jobs = Jobs(request, self.started, self.ctld.ids_per_scancel)
        self.scancels = Scancels(request, runner, self.env, self.started)
        self.report = Report(request, self.jobs, self.log, clock, self.started)
        self.polls = PollSchedule()
        self.next_poll_at = self.started
        self.squeue_calls = 0

    # -- the loop ------------------------------------------------------------

    def run(self) -> CancelResult:
        if not self.request.names and not self.request.job_ids:
            return self._finish("nothing requested: no Slurm job name or id given")
        self.ctld.start_probe()
        try:
            if self.request.check_mode:
                return self._check()
            return self._loop()
        finally:
            self.ctld.end_probe()

    def _loop(self) -> CancelResult:
        while True:
            self._reap_scancels()
            now = self.clock.now()
            if self._done() or now >= self.deadline or self.log.permanent:
                break
            # No look while scancels run: the call cannot end before they
            # do, and a look taken after them tells more.
            if now >= self.next_poll_at and not self.scancels.running and self.jobs.look_first():
                self._poll_queue()
                continue
            left_waiting = self._start_due_scancels(now)
            self._sleep_until_next_event(now, left_waiting)
        self._let_scancels_end()
        if self.log.permanent and self.jobs.listing is not None and not self.log.last_error("squeue"):
            # An scancel failed for good: one more look says what is still queued.
            self._list_queue()
        return self._finish()

    def _check(self) -> CancelResult:
        if self._list_queue() and self.jobs.actionable():
            self.ctld.decide()
        return self._finish()

    def _done(self) -> bool:
        return not self.scancels.running and self.jobs.done()

    def _sleep_until_next_event(self, now: float, left_waiting: bool) -> None:
        wake = self.deadline
        if left_waiting:
            wake = min(wake, self.scancels.next_token(now))
        if self.scancels.running:
            wake = min(wake, self.scancels.next_check(now))
        elif not left_waiting or self.jobs.look_first():
            wake = min(wake, self.next_poll_at)
        self.clock.sleep(max(wake - now, MIN_SLEEP))

    def _let_scancels_end(self) -> None:
        while self.scancels.running:
            self._reap_scancels()
            if self.scancels.running:
                now = self.clock.now()
                self.clock.sleep(max(self.scancels.next_check(now) - now, MIN_SLEEP))

    def _finish(self, note: str = "") -> CancelResult:
        result = CancelResult(
            scancel_calls=self.scancels.started_count,
            squeue_calls=self.squeue_calls,
            ctld=self.ctld.enabled,
            scancel_version=self.ctld.version,
            messages=self.log.messages,
        )
        return self.report.finish(result, note)

    # -- the queue -----------------------------------------------------------

    def _poll_queue(self) -> None:
        listed = self._list_queue()
        now = self.clock.now()
        self.next_poll_at = now + self.polls.next_gap()
        if listed:
            self.next_poll_at = min([self.next_poll_at] + self.jobs.upcoming(now))

    def _list_queue(self) -> bool:
        request = self.request
        argv = squeue_command(request.squeue_path, request.names, request.job_ids, request.clusters)
        began = self.clock.now()
        outcome = run_to_end("squeue", self.runner.start(argv, self.env), request.command_timeout)
        self.squeue_calls += 1
        if not outcome.ok:
            error = outcome.error_text(request.command_timeout)
            self.log.failed("squeue", error, "squeue failed: " + error)
            self.log.note_permanent(outcome.permanent_reason())
            return False
        if not has_header(outcome.stdout):
            error = _not_a_listing(outcome.stdout)
            self.log.failed("squeue", error)
            self.log.note_permanent(error)
            return False
        self.log.succeeded("squeue")
        for message in self.jobs.listed(parse_squeue(outcome.stdout), began):
            self.log.note(message)
        return True

    # -- scancel -------------------------------------------------------------

    def _start_due_scancels(self, now: float) -> bool:
        """Start what the bounds allow; True if due jobs are left waiting for them."""
        if self.jobs.due() and self.ctld.enabled is None:
            self.ctld.decide()
            if self.ctld.one_request:
                # Cut before a scancel was known to be one request, which takes more ids.
                self.jobs.cut_again()
            now = self.clock.now()
        while self.jobs.due():
            kind, batch = self.jobs.due()[0]
            holds_pending = batch[0].is_pending
            if not self.scancels.may_start(holds_pending, now):
                return True
            job_ids = [entry.job_id for entry in batch]
            ctld = self.ctld.for_batch(batch)
            self.scancels.start(kind, job_ids, holds_pending, ctld, ctld and self.ctld.one_request, now, self.deadline)
            outlived = self.jobs.front_started()
            if outlived:
                self.log.note(outlived_term_note(self.request, kind, outlived))
        return False

    def _reap_scancels(self) -> None:
        for call, outcome, now in self.scancels.reap(self.clock):
            self._scancel_ended(call, outcome, now)

    def _scancel_ended(self, call: ScancelCall, outcome: ClientOutcome, now: float) -> None:
        refused, denied = read_scancel(outcome.ok, outcome.stderr, call.job_ids, call.one_request)
        taken = {job_id for job_id in call.job_ids if outcome.ok and job_id not in refused}
        permanent = outcome.permanent_reason()
        self.jobs.scancel_ended(
            call.kind, call.job_ids, call.holds_pending, taken, denied, now, reached_slurm=not permanent
        )
        count = len(call.job_ids)
        if not outcome.ok:
            error = outcome.error_text(call.time_limit)
            self.log.failed("scancel", error, "scancel of %d job(s) failed: %s" % (count, error))
            self.log.note_permanent(permanent)
        elif refused:
            error = slurm_words(outcome.stderr)
            message = "Slurm refused %d of the %d job(s) of an scancel --ctld: %s" % (len(refused), count, error)
            self.log.failed("scancel", error, message)
        else:
            self.log.succeeded("scancel")
        # Pending jobs leave at once and running ones within moments: look soon.
        self.polls.reset()
        self.next_poll_at = min(self.next_poll_at, now)


def _not_a_listing(stdout: str) -> str:
    said = slurm_words(stdout) or "nothing"
    return (
        "squeue exited 0 without the line %s that Slurm's squeue prints first for --format=%s, "
        "even with no job queued (it printed %s): not a listing of Slurm's queue"
        % (SQUEUE_HEADER, SQUEUE_FORMAT, said[:200])
    )
