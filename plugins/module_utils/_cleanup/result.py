# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a run did (or, in check mode, would do): per batch (BatchOutcome) and in all
(CleanupResult, with its Tally counts and the Slurm step's merged results)."""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence

from .options import JOB_STATE_FAILED, JOB_STATE_RUNNING, CleanupOptions


class Tally:
    """A count of UUIDs and, when `keep` is true, the UUIDs themselves.

    The command's summary needs only the counts, so a run over a million jobs keeps its
    memory flat; the module and `--json` keep the lists they return.
    """

    def __init__(self, keep: bool = True) -> None:
        self.count = 0
        self.items: Optional[List[str]] = [] if keep else None

    def extend(self, uuids: Iterable[str]) -> None:
        uuids = list(uuids)
        self.count += len(uuids)
        if self.items is not None:
            self.items.extend(uuids)

    def __len__(self) -> int:
        return self.count

    def as_list(self) -> List[str]:
        return sorted(self.items or ())


class CleanupResult:
    """What a run did (or, in check mode, would do), gathered batch by batch."""

    def __init__(self, options: CleanupOptions) -> None:
        self.options = options
        keep = options.keep_uuids
        self.done_jobs = Tally(keep)
        self.skipped = Tally(keep)
        self.revoked_tokens = Tally(keep)
        self.log_uuids = Tally(keep)
        # Few by nature (started after a reboot, or inconsistent rows): always listed.
        self.exempt: List[str] = []
        self.unstarted: List[str] = []
        self.finished_set: List[str] = []
        # Jobs another transaction kept locked for longer than row_lock_wait: few by nature.
        self.locked: List[str] = []
        # With retry, jobs failed instead, as their rows name no user (SQL_RUN_AS); and
        # tokens another's work could own (SQL_TOKEN_OTHER_OWNERS): few, and always listed,
        # as each needs a person's look.
        self.not_requeued: List[str] = []
        self.tokens_left_alone: List[Dict[str, str]] = []
        self.slurm: Dict[str, Any] = {}
        # Jobs left Running because Slurm jobs of their name are another user's than the
        # Slurm step's ({uuid, job_id, user, state} per Slurm job): few, always listed.
        self.held_by_other_users: List[Dict[str, str]] = []
        self.batches = 0
        self.live: Optional[bool] = None
        # The run's Pace (_cleanup.pace), whose report says the pace it chose.
        self.pace: Any = None
        # Lines for the command's progress, said and emptied at each progress call.
        self.notes: List[str] = []

    @property
    def changed(self) -> bool:
        return bool(self.done_jobs.count or self.not_requeued)

    def add_batch(self, outcome: BatchOutcome) -> None:
        self.done_jobs.extend(outcome.done)
        self.skipped.extend(outcome.skipped)
        self.not_requeued.extend(outcome.not_requeued)
        self.revoked_tokens.extend(outcome.tokens)
        self.tokens_left_alone.extend(outcome.tokens_left_alone)
        self.log_uuids.extend(outcome.logs)

    def add_slurm(self, part: Dict[str, Any]) -> None:
        if not self.options.keep_uuids:
            part = dict((k, len(v) if isinstance(v, list) else v) for k, v in part.items())
        self.slurm = merge_slurm_results([self.slurm, part])

    def to_dict(self) -> Dict[str, Any]:
        opts = self.options
        done = self.done_jobs.as_list()
        result: Dict[str, Any] = {
            "changed": self.changed,
            # Named threshold in the result: the instant `before` came to, and whence.
            "threshold": None if opts.before is None else opts.before.to_iso8601(),
            "threshold_source": None if opts.before is None else opts.before.source,
            "requeued_jobs" if opts.retry else "failed_jobs": done,
            "exempt": {"count": len(self.exempt), "uuids": sorted(self.exempt)},
            "no_started_at": sorted(self.unstarted),
            # Not `skipped`: Ansible reads that key of a result as "the task was skipped".
            "skipped_jobs": self.skipped.as_list(),
            "locked_jobs": sorted(self.locked),
            "held_by_other_users": list(self.held_by_other_users),
            "running_with_finished_at": sorted(self.finished_set),
            "revoked_tokens": self.revoked_tokens.as_list(),
            "tokens_left_alone": sorted(self.tokens_left_alone, key=lambda token: token["uuid"]),
            "log_uuids": self.log_uuids.as_list(),
            "counts": {
                "jobs": self.done_jobs.count,
                "skipped_jobs": self.skipped.count,
                "revoked_tokens": self.revoked_tokens.count,
                "tokens_left_alone": len(self.tokens_left_alone),
                "logs": self.log_uuids.count,
                "held_by_other_users": len({job["uuid"] for job in self.held_by_other_users}),
            },
            "slurm": dict(self.slurm),
            "batches": self.batches,
            "live": self.live,
            "pace": None if self.pace is None else self.pace.report(),
        }
        if opts.retry:
            result["not_requeued"] = sorted(self.not_requeued)
        if opts.diff:
            after = dict((u, opts.target_state) for u in done)
            after.update((u, JOB_STATE_FAILED) for u in self.not_requeued)
            result["diff"] = {
                "before": "".join("%s: %s\n" % (u, JOB_STATE_RUNNING) for u in sorted(after)),
                "after": "".join("%s: %s\n" % (u, after[u]) for u in sorted(after)),
            }
        return result


def merge_slurm_results(results: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    """One summary of the per-batch results of the Slurm cancel engine."""
    merged: Dict[str, Any] = {}
    for part in results:
        for key, value in part.items():
            if isinstance(value, list):
                merged.setdefault(key, []).extend(value)
            elif isinstance(value, bool):
                merged[key] = merged.get(key, False) or value
            elif isinstance(value, (int, float)):
                merged[key] = merged.get(key, 0) + value
            else:
                merged[key] = value
    return merged


class BatchOutcome(NamedTuple):
    """What one batch did (in check mode, would do): what the transaction committed."""

    done: Sequence[str]
    skipped: Sequence[str]
    # With retry, the jobs failed instead (SQL_RUN_AS).
    not_requeued: Sequence[str] = ()
    # Jobs whose token or task another transaction held: left as they were, for the
    # next try (see SQL_LOCK_JOBS).
    set_aside: Sequence[str] = ()
    tokens: Sequence[str] = ()
    # {"uuid", "user_uuid", "could_belong_to"} of each token left valid.
    tokens_left_alone: Sequence[Dict[str, str]] = ()
    logs: Sequence[str] = ()
