# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The scancel processes of a cancel call: started within the rate and process bounds,
reaped as they end, killed at their time limit.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Mapping, Tuple

from .._slurm.outcome import ClientOutcome, collect
from .._slurm.runner import Clock, ProcessHandle, Runner
from .._slurm.scancel import scancel_argv, scancel_time_limit
from .request import CancelRequest

# How often running scancel processes are checked for having ended (a cheap
# waitpid); the next look at the queue waits for it.
SCANCEL_CHECK_INTERVAL = 0.005
# What two instants closer than this are taken to be: the same.
EPSILON = 1e-9


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
        if self._tokens < 1 - EPSILON:
            return False
        self._tokens -= 1
        return True

    def next_available(self, now: float) -> float:
        self._refill(now)
        return now + max(0.0, (1 - self._tokens) / self.rate)


@dataclass
class ScancelCall:
    handle: ProcessHandle
    kind: str
    job_ids: List[str]
    holds_pending: bool
    kill_at: float
    time_limit: float
    one_request: bool


class Scancels:
    """``max_scancel_per_second`` starts at most (a token bucket of one token), at most
    ``max_concurrent_scancel`` alive at once, and none holding only running jobs while
    one holding pending jobs runs: its freed CPUs could start jobs about to be cancelled."""

    def __init__(self, request: CancelRequest, runner: Runner, env: Mapping[str, str], started: float) -> None:
        self._request = request
        self._runner = runner
        self._env = env
        self._bucket = TokenBucket(request.max_scancel_per_second, started)
        self.running: List[ScancelCall] = []
        self.started_count = 0

    def may_start(self, holds_pending: bool, now: float) -> bool:
        """Whether an scancel may start now; takes its token if so."""
        if not holds_pending and any(call.holds_pending for call in self.running):
            return False
        return len(self.running) < self._request.max_concurrent_scancel and self._bucket.take(now)

    def start(
        self,
        kind: str,
        job_ids: List[str],
        holds_pending: bool,
        ctld: bool,
        one_request: bool,
        now: float,
        deadline: float,
    ) -> None:
        request = self._request
        argv = scancel_argv(request.scancel_path, kind, job_ids, request.clusters, ctld, request.signal, request.batch)
        handle = self._runner.start(argv, self._env)
        self.started_count += 1
        time_limit = scancel_time_limit(len(job_ids), request.command_timeout, deadline - now, one_request)
        self.running.append(
            ScancelCall(handle, kind, job_ids, holds_pending, now + time_limit, time_limit, one_request)
        )

    def reap(self, clock: Clock) -> Iterator[Tuple[ScancelCall, ClientOutcome, float]]:
        """(call, outcome, when) of each scancel that ended or outlived its time limit (then
        killed), one at a time: the caller takes in each before the next is looked at."""
        for call in list(self.running):
            returncode = call.handle.poll()
            now = clock.now()
            if returncode is None and now < call.kill_at:
                continue
            self.running.remove(call)
            yield call, collect("scancel", call.handle, returncode), now

    def next_check(self, now: float) -> float:
        """When to look again at the running scancels: soon, or when one must be killed."""
        return min(now + SCANCEL_CHECK_INTERVAL, min(call.kill_at for call in self.running))

    def next_token(self, now: float) -> float:
        return self._bucket.next_available(now)
