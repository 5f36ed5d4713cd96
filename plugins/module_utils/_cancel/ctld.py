# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a cancel call's scancels carry ``--ctld``, and whether that makes each one
request (option ``ctld``): decided once, before the first scancel, from the option, the
release ``scancel --version`` names and who runs the clients.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Tuple

from .._common.option_bounds import MAX_JOB_IDS_PER_SCANCEL
from .._slurm.outcome import ClientOutcome, run_to_end
from .._slurm.queue import QueueEntry
from .._slurm.release import CTLD_ALWAYS, CTLD_AUTO, parse_slurm_version, scancel_version_command, sends_one_request
from .._slurm.runner import CommandNotFoundError, ProcessHandle, Runner
from .log import CallLog
from .request import CancelRequest


class CtldChoice:
    def __init__(
        self,
        request: CancelRequest,
        runner: Runner,
        env: Mapping[str, str],
        caller: Tuple[int, str],
        log: CallLog,
    ) -> None:
        self._request = request
        self._runner = runner
        self._env = env
        self._caller = caller
        self._log = log
        # None until decided, then whether every scancel of the call gets --ctld ...
        self.enabled: Optional[bool] = None
        # ... and whether such an scancel is one request for all its ids (24.05 and later).
        self.one_request = False
        # The release scancel named ("24.11"), "" when none was read.
        self.version = ""
        self._noted_other_users = False
        # `scancel --version`, started with the first squeue when the call may need it; or
        # why scancel could not be started, raised only if an scancel is then due.
        self._probe: Optional[ProcessHandle] = None
        self._probe_error: Optional[CommandNotFoundError] = None

    def start_probe(self) -> None:
        """Start ``scancel --version`` beside the first squeue when an scancel of this call
        would ask it: it talks to no daemon, and asked in series it added a process's start
        (8 ms under load) to every stop. Its answer is read only if an scancel is due."""
        if not self._asks_version() or self._request.scancel_release is not None:
            return
        try:
            self._probe = self._runner.start(scancel_version_command(self._request.scancel_path), self._env)
        except CommandNotFoundError as error:
            self._probe_error = error

    def end_probe(self) -> None:
        """Reap a probe nobody asked (nothing was due), so that no process outlives the call."""
        if self._probe is not None:
            self._probe.kill()
            self._probe.output()
            self._probe = None

    def decide(self) -> None:
        """Whether every scancel of this call carries --ctld, and whether that makes it one
        request: the option, or for auto what ``scancel --version`` says, asked once."""
        choice = self._request.ctld
        version = None
        if self._asks_version():
            version = self._scancel_version()
        self.enabled = choice == CTLD_ALWAYS or (choice == CTLD_AUTO and sends_one_request(version))
        self.one_request = self.enabled and sends_one_request(version)

    def for_batch(self, batch: List[QueueEntry]) -> bool:
        """Whether the scancel of these jobs gets --ctld."""
        return bool(self.enabled) and self._is_safe_for(batch)

    def ids_per_scancel(self, entries: List[QueueEntry]) -> int:
        """How many of these jobs one scancel names.

        One request (--ctld from 24.05 on) exits 0 whatever Slurm said of each job and
        names each job it refused, so a failure stays confined to its ids anyway, and a
        second scancel only queues behind the first one's signals in slurmctld (on 24.11,
        1,000 running jobs stopped in 1.1 s as two scancels of 500, 0.35 s as one): up to
        the bound of an argv. One request per job keeps max_job_ids_per_scancel.
        """
        if self.one_request and self._may_name(entries):
            return MAX_JOB_IDS_PER_SCANCEL
        return self._request.max_job_ids_per_scancel

    def _is_safe_for(self, batch: List[QueueEntry]) -> bool:
        """Whether this caller may name these jobs to scancel --ctld: as root, or their owner.

        From 24.05 to 25.11 slurmctld answers a REQUEST_KILL_JOBS naming another user's job
        from a user who is not root (nor SlurmUser or an operator) by looking for account
        coordinators while it holds the association lock it would then take again, when no
        accounting database filled that list (``_apply_signal_jobs_filter`` in
        src/slurmctld/job_mgr.c, ``assoc_mgr_is_user_acct_coord(..., true)``): slurmctld
        deadlocks, every later squeue times out. Seen on Debian 13's 24.11.5 without
        slurmdbd. The per-job path only says "Access/permission denied".
        """
        if self._may_name(batch):
            return True
        if not self._noted_other_users:
            self._noted_other_users = True
            self._log.note(
                "jobs of another user named without --ctld (one request per job): from a user neither root "
                "nor their owner, scancel --ctld can deadlock slurmctld 24.05 to 25.11 without accounting"
            )
        return False

    def _may_name(self, entries: List[QueueEntry]) -> bool:
        uid, name = self._caller
        return uid == 0 or all(entry.user == name for entry in entries)

    def _asks_version(self) -> bool:
        """Whether the option wants the release: to choose (auto) or to bound each call (always)."""
        return self._request.ctld in (CTLD_AUTO, CTLD_ALWAYS)

    def _scancel_version(self) -> Optional[Tuple[int, int]]:
        request = self._request
        known = request.scancel_release
        if known is not None:
            self.version = known
            return parse_slurm_version("slurm " + known) if known else None
        outcome = self._probe_outcome()
        version = parse_slurm_version(outcome.stdout) if outcome.ok else None
        if version is not None:
            self.version = "%d.%02d" % version
            return version
        said = outcome.stdout.strip()[:200] if outcome.ok else outcome.error_text(request.command_timeout)
        if request.ctld == CTLD_AUTO:
            then = "one request per job, without --ctld"
        else:
            then = "--ctld given as ctld=always asks, bounded as one request per job"
        self._log.note("scancel --version named no Slurm release (%s): %s" % (said or "no output", then))
        return None

    def _probe_outcome(self) -> ClientOutcome:
        if self._probe_error is not None:
            raise self._probe_error
        timeout = self._request.command_timeout
        if self._probe is None:
            argv = scancel_version_command(self._request.scancel_path)
            return run_to_end("scancel", self._runner.start(argv, self._env), timeout)
        handle, self._probe = self._probe, None
        return run_to_end("scancel", handle, timeout)
