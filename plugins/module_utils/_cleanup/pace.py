# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How fast a run goes: the batches' size and the pause after each (the run's pace).

At boot (nobody else on the database) the run goes at full speed. Live (the API server up)
an API commit returns only once all the WAL written before it is on disk, the run's
included, so what the API feels is how many of its commits meet one of the run's and how
long each such meeting lasts (bench/README.md, "Where the API's time goes"); and on a
small server the run's statements take CPU the API's would use. A fixed pause was either
too slow (100 jobs 2 s apart: 35 minutes for 100,000 jobs) or too rough (1,000 jobs 0.2 s
apart: the API's p99 4-12 times its level); a fixed WAL rate was no better, as the rate is
not what the API meets. So live, the pace follows what the database says of each batch:

- the jobs a second are held at TARGET_RATE (100,000 jobs in about 8 minutes): the pause
  is what is left of the batch's share of time after the batch itself;
- a batch's commit time is how long an API commit that meets it waits at most: while it
  is above COMMIT_BUDGET the batches shrink;
- so do they while a batch takes longer than MAX_BATCH_SECONDS: its statements write WAL
  as fast as the server goes, and the API's commits that meet them queue behind those
  writes (in a round of batches up to 1,000, 6.4 s long at the worst, the API's p99 rose
  6.4 times; bench/README.md);
- else a batch that took more than MAX_DUTY of its share of time grows the next, within
  both bounds: each batch pays a fixed cost (the tokens' rule reads jobs once per batch,
  about 0.2 s on a million jobs), and small batches would keep the database busy most of
  the time;
- WAITERS or more other sessions seen waiting, just before a batch commits, for the WAL's
  lock or a row's lock (the API's commits queued behind the run's) halve the rate, down
  to MIN_RATE (the old fixed pace); each batch that finds fewer gives a twentieth back.

Explicit options win: a `batch_size` is every batch's size, a `batch_pause` every pause;
the controller steers only what they leave unset. This file is pure logic: the run
(fail_jobs) measures, this decides.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional

# Live, without batch_size: the first batch's size, and the bounds of the steering.
START_SIZE = 100
MIN_SIZE = 10
MAX_SIZE = 1000
# Seconds a batch's commit may take: an API commit that meets it waits about that long on
# top of its own (bench/README.md, issue 40's P5, has the lab's commit times).
COMMIT_BUDGET = 0.010
# Seconds a batch (Slurm step and transaction) may take: the API meets its WAL writes.
MAX_BATCH_SECONDS = 0.5
# The share of its time at the target rate a batch may take (Slurm step and transaction):
# the rest, and the other cores, are the API's.
MAX_DUTY = 0.5
# Other sessions waiting at once that tell the run's commits are in their way: one alone is
# often the API's own commit queued behind another API commit.
WAITERS = 2
# Jobs a second live: 100,000 jobs in 500 s leaves room within the ten minutes for
# the listing and the Slurm steps. MIN_RATE: the old fixed pace (100 jobs 2 s apart), the
# slowest a crowded run goes.
TARGET_RATE = 200.0
MIN_RATE = 50.0
# A size step is at most this factor either way: one slow commit (a checkpoint, another
# process on the core) does not collapse the batches.
SIZE_STEP = 2.0
# The commit time the size is steered by is smoothed over about this many batches.
SMOOTHING = 0.3
# Each batch with nobody waiting gives back this share of the target rate.
RECOVERY_SHARE = 0.05


class BatchSample(NamedTuple):
    """What the run measured of one committed batch."""

    jobs: int
    # The batch's wall time: its Slurm step and its transaction.
    seconds: float
    # The COMMIT alone: the WAL flush the batch's last writes wait for.
    commit_seconds: float
    # Other sessions seen waiting for the WAL's lock or a lock just before the commit.
    others_waiting: int = 0


class Pace:
    """The batches' size and pause for one run; `observe` each batch, then ask again.

    `size` and `pause` are the explicit options (None: unset). `live` says whether the
    controller steers what they leave unset; at boot an unset size is `boot_size` and an
    unset pause 0. In check mode nothing is written, so nobody waits for the run: it never
    pauses and its size is not steered (no commit to learn from).
    """

    def __init__(
        self,
        size: Optional[int],
        pause: Optional[float],
        live: bool,
        boot_size: int,
        check_mode: bool = False,
    ) -> None:
        self.fixed_size = size
        self.fixed_pause = pause
        self.live = live
        self.boot_size = boot_size
        self.check_mode = check_mode
        self._size = float(START_SIZE)
        self._commit: Optional[float] = None
        self.rate = TARGET_RATE
        self._last: Optional[BatchSample] = None
        self._backoffs = 0
        self._jobs = 0
        self._seconds = 0.0
        self._paused = 0.0
        self._sizes: List[int] = []
        self._commits: List[float] = []

    def set_live(self, live: bool) -> None:
        """A run at boot turns live when others connect (live=auto): the pace starts then,
        from the start size, with no pause owed for the boot batches' speed."""
        if live and not self.live:
            self._last = None
        self.live = live

    @property
    def adaptive(self) -> bool:
        """Whether anything is left to steer: live, not check mode, an option unset."""
        unset = self.fixed_size is None or self.fixed_pause is None
        return self.live and not self.check_mode and unset

    def batch_size(self) -> int:
        if self.fixed_size is not None:
            return self.fixed_size
        if not self.live:
            return self.boot_size
        return int(round(self._size))

    def pause(self) -> float:
        """Seconds to pause after the batch last observed."""
        if self.check_mode:
            return 0.0
        if self.fixed_pause is not None:
            return self.fixed_pause
        if not self.live or self._last is None:
            return 0.0
        # The batch's share of time at the current rate, less what the batch itself took.
        return max(0.0, self._last.jobs / self.rate - self._last.seconds)

    def observe(self, sample: BatchSample) -> None:
        """Learn from a committed batch; its pause is then `pause()`."""
        self._last = sample
        self._jobs += sample.jobs
        self._seconds += sample.seconds
        self._sizes.append(sample.jobs)
        if sample.commit_seconds > 0:
            self._commits.append(sample.commit_seconds)
        if not self.adaptive:
            return
        self._steer_rate(sample)
        # No commit (a batch rolled back, or whose jobs all stayed): nothing to learn.
        if self.fixed_size is None and sample.jobs > 0 and sample.commit_seconds > 0:
            self._steer_size(sample)

    def paused(self, seconds: float) -> None:
        self._paused += seconds

    def _steer_rate(self, sample: BatchSample) -> None:
        """Halve the rate when others waited behind the batch; else win some back."""
        if sample.others_waiting >= WAITERS:
            self.rate = max(MIN_RATE, self.rate / 2.0)
            self._backoffs += 1
        else:
            self.rate = min(TARGET_RATE, self.rate + RECOVERY_SHARE * TARGET_RATE)

    def _steer_size(self, sample: BatchSample) -> None:
        """Smaller while the commits (per job, smoothed) say a batch of this size takes more
        than COMMIT_BUDGET, or while a batch takes more than MAX_BATCH_SECONDS; else larger
        while a batch takes more than MAX_DUTY of its share, within both bounds."""
        # Per job: a commit flushes WAL about in proportion to the batch's jobs, and so the
        # smoothing does not lag behind the size it steers.
        per_job = sample.commit_seconds / sample.jobs
        self._commit = per_job if self._commit is None else SMOOTHING * per_job + (1 - SMOOTHING) * self._commit
        # What each bound allows, as a factor of the size (the batch's time taken as
        # proportional to its jobs: with its fixed cost, a larger batch takes less than that).
        commit_room = COMMIT_BUDGET / (self._commit * self._size)
        time_room = MAX_BATCH_SECONDS / sample.seconds if sample.seconds > 0 else SIZE_STEP
        duty = sample.seconds * self.rate / sample.jobs
        if min(commit_room, time_room) < 1.0:
            step = max(1.0 / SIZE_STEP, min(commit_room, time_room))
        elif duty > MAX_DUTY:
            step = min(SIZE_STEP, duty / MAX_DUTY, commit_room, time_room)
        else:
            return
        self._size = min(float(MAX_SIZE), max(float(MIN_SIZE), self._size * step))

    def mode(self) -> str:
        if self.check_mode:
            return "check"
        if self.fixed_size is not None and self.fixed_pause is not None:
            return "fixed"
        if not self.live:
            return "full speed" if self.fixed_pause is None and self.fixed_size is None else "fixed"
        return "adaptive"

    def report(self) -> Dict[str, Any]:
        """The pace the run chose, for its result (RV(pace))."""
        sizes = sorted(self._sizes)
        elapsed = self._seconds + self._paused
        return {
            "mode": self.mode(),
            "batch_size": sizes[len(sizes) // 2] if sizes else self.batch_size(),
            "batch_size_range": [sizes[0], sizes[-1]] if sizes else [],
            "pause_seconds": round(self._paused, 3),
            "jobs_per_second": round(self._jobs / elapsed, 1) if elapsed > 0 else None,
            "commit_ms": round(1000 * sorted(self._commits)[len(self._commits) // 2], 1) if self._commits else None,
            "backoffs": self._backoffs,
        }
