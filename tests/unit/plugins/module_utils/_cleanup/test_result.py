# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a run did, gathered batch by batch: the counts always, the UUIDs only when kept
(a million-job run's memory stays flat), the Slurm step's parts merged, and the module's
result keys (`failed_jobs` or `requeued_jobs`, the diff, `not_requeued` with retry)."""

from __future__ import annotations

from datetime import datetime, timezone

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.before import Before
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.options import (
    CleanupOptions,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.result import (
    BatchOutcome,
    CleanupResult,
    Tally,
    merge_slurm_results,
)

JOB = "zzzzz-8i9sb-%015d"

JOB_A = "zzzzz-8i9sb-aaaaaaaaaaaaaaa"
JOB_B = "zzzzz-8i9sb-bbbbbbbbbbbbbbb"
JOB_C = "zzzzz-8i9sb-ccccccccccccccc"
TOKEN = "zzzzz-gj3su-ttttttttttttttt"
LOG = "zzzzz-57u5n-lllllllllllllll"


def test_a_tally_counts_and_keeps_the_uuids_sorted():
    tally = Tally()
    tally.extend([JOB_B, JOB_A])
    tally.extend(iter([JOB_C]))
    assert (len(tally), tally.count, tally.as_list()) == (3, 3, [JOB_A, JOB_B, JOB_C])


def test_a_tally_not_kept_counts_only():
    tally = Tally(keep=False)
    tally.extend([JOB_A, JOB_B])
    assert (tally.count, tally.items, tally.as_list()) == (2, None, [])


def test_batches_add_up():
    result = CleanupResult(CleanupOptions())
    result.add_batch(BatchOutcome(done=[JOB_B], skipped=[JOB_C], tokens=[TOKEN], logs=[LOG]))
    result.add_batch(BatchOutcome(done=[JOB_A], skipped=[]))
    result.batches = 2
    out = result.to_dict()
    assert out["changed"] is True
    assert out["failed_jobs"] == [JOB_A, JOB_B] and "requeued_jobs" not in out
    assert out["skipped_jobs"] == [JOB_C]
    assert out["revoked_tokens"] == [TOKEN] and out["log_uuids"] == [LOG]
    assert out["counts"] == {
        "jobs": 2,
        "skipped_jobs": 1,
        "revoked_tokens": 1,
        "tokens_left_alone": 0,
        "logs": 1,
        "held_by_other_users": 0,
    }
    assert out["batches"] == 2 and "not_requeued" not in out and "diff" not in out


def test_nothing_done_is_no_change():
    result = CleanupResult(CleanupOptions())
    result.add_batch(BatchOutcome(done=[], skipped=[JOB_A]))
    out = result.to_dict()
    assert out["changed"] is False
    assert (out["threshold"], out["threshold_source"], out["pace"], out["live"]) == (None, None, None, None)
    assert out["exempt"] == {"count": 0, "uuids": []}


def test_without_kept_uuids_the_counts_stay_and_the_lists_are_empty():
    result = CleanupResult(CleanupOptions(keep_uuids=False))
    result.add_batch(BatchOutcome(done=[JOB_A, JOB_B], skipped=[], tokens=[TOKEN]))
    out = result.to_dict()
    assert out["failed_jobs"] == [] and out["revoked_tokens"] == []
    assert out["counts"]["jobs"] == 2 and out["counts"]["revoked_tokens"] == 1
    assert out["changed"] is True


def test_a_job_failed_instead_alone_is_a_change():
    result = CleanupResult(CleanupOptions(retry=True))
    result.add_batch(BatchOutcome(done=[], skipped=[], not_requeued=[JOB_A]))
    assert result.changed is True


def test_the_few_lists_are_sorted_and_held_jobs_counted_once():
    result = CleanupResult(CleanupOptions(keep_uuids=False))
    result.exempt.extend([JOB_B, JOB_A])
    result.unstarted.append(JOB_C)
    result.locked.extend([JOB_C, JOB_A])
    held = [
        {"uuid": JOB_A, "job_id": "11", "user": "alice", "state": "RUNNING"},
        {"uuid": JOB_A, "job_id": "12", "user": "alice", "state": "PENDING"},
    ]
    result.held_by_other_users.extend(held)
    result.add_batch(
        BatchOutcome(
            done=[],
            skipped=[],
            tokens_left_alone=[
                {"uuid": "zzzzz-gj3su-bbbbbbbbbbbbbbb", "user_uuid": "u", "could_belong_to": "a pipeline"},
                {"uuid": "zzzzz-gj3su-aaaaaaaaaaaaaaa", "user_uuid": "u", "could_belong_to": "a job"},
            ],
        )
    )
    out = result.to_dict()
    # Listed whatever keep_uuids says: few by nature, each needs a look.
    assert out["exempt"] == {"count": 2, "uuids": [JOB_A, JOB_B]}
    assert out["no_started_at"] == [JOB_C] and out["locked_jobs"] == [JOB_A, JOB_C]
    assert [token["uuid"] for token in out["tokens_left_alone"]] == [
        "zzzzz-gj3su-aaaaaaaaaaaaaaa",
        "zzzzz-gj3su-bbbbbbbbbbbbbbb",
    ]
    assert out["held_by_other_users"] == held and out["counts"]["held_by_other_users"] == 1
    assert out["counts"]["tokens_left_alone"] == 2


def test_the_threshold_as_the_result_says_it():
    instant = datetime(2026, 12, 4, 8, 30, 15, tzinfo=timezone.utc)
    out = CleanupResult(CleanupOptions(before=Before(instant, "boot time", "reboot"))).to_dict()
    assert (out["threshold"], out["threshold_source"]) == ("2026-12-04T08:30:15Z", "boot time")


def test_a_slurm_part_without_kept_uuids_is_counted():
    result = CleanupResult(CleanupOptions(keep_uuids=False))
    result.add_slurm({"cancelled": ["1", "2"], "scancel_calls": 1})
    result.add_slurm({"cancelled": ["3"], "scancel_calls": 2})
    assert result.to_dict()["slurm"] == {"cancelled": 3, "scancel_calls": 3}
    kept = CleanupResult(CleanupOptions())
    kept.add_slurm({"cancelled": ["1", "2"]})
    assert kept.to_dict()["slurm"] == {"cancelled": ["1", "2"]}


def test_result_dict_names_the_job_list_after_the_mode_and_diffs_each_job():
    result = CleanupResult(CleanupOptions(retry=True, diff=True))
    result.done_jobs.extend([JOB % 1, JOB % 2])
    result.not_requeued.append(JOB % 4)
    result.exempt = [JOB % 3]
    as_dict = result.to_dict()
    assert as_dict["changed"] is True
    assert as_dict["requeued_jobs"] == [JOB % 1, JOB % 2]
    assert as_dict["not_requeued"] == [JOB % 4]
    assert "failed_jobs" not in as_dict
    assert as_dict["exempt"] == {"count": 1, "uuids": [JOB % 3]}
    assert as_dict["threshold"] is None and as_dict["threshold_source"] is None
    assert as_dict["slurm"] == {}
    assert as_dict["tokens_left_alone"] == []
    assert as_dict["counts"] == {
        "jobs": 2,
        "skipped_jobs": 0,
        "revoked_tokens": 0,
        "tokens_left_alone": 0,
        "logs": 0,
        "held_by_other_users": 0,
    }
    assert as_dict["held_by_other_users"] == []
    # A job retry could not requeue is failed, and the diff says so.
    assert as_dict["diff"] == {
        "before": "%s: Running\n%s: Running\n%s: Running\n" % (JOB % 1, JOB % 2, JOB % 4),
        "after": "%s: Queued\n%s: Queued\n%s: Failed\n" % (JOB % 1, JOB % 2, JOB % 4),
    }
    nothing = CleanupResult(CleanupOptions()).to_dict()
    assert nothing["changed"] is False and nothing["failed_jobs"] == []
    assert "diff" not in nothing


def test_merge_slurm_results_concatenates_lists_ors_flags_and_sums_counts():
    first = {
        "cancelled": [{"name": JOB % 1}],
        "already_absent": [],
        "changed": True,
        "failed": False,
        "scancel_calls": 2,
        "squeue_calls": 3,
        "elapsed": 0.5,
        "msg": "first",
    }
    second = {
        "cancelled": [{"name": JOB % 2}],
        "already_absent": [JOB % 3],
        "changed": False,
        "failed": False,
        "scancel_calls": 1,
        "squeue_calls": 1,
        "elapsed": 0.25,
        "msg": "second",
    }
    merged = merge_slurm_results([first, second])
    assert merged == {
        "cancelled": [{"name": JOB % 1}, {"name": JOB % 2}],
        "already_absent": [JOB % 3],
        "changed": True,
        "failed": False,
        "scancel_calls": 3,
        "squeue_calls": 4,
        "elapsed": 0.75,
        "msg": "second",
    }
    # the inputs are not modified
    assert first["cancelled"] == [{"name": JOB % 1}] and first["already_absent"] == []


def test_merge_of_no_batches_is_empty():
    assert merge_slurm_results([]) == {}
