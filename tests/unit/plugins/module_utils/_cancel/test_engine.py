# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cancel engine against a scripted Slurm and a fake clock (no real waiting)."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.engine import (
    CancelRequest,
    CancelRequestError,
    CommandNotFoundError,
    PollSchedule,
    cancel_jobs,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.scancels import (
    SCANCEL_CHECK_INTERVAL,
    TokenBucket,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.queue import (
    QueueEntry,
    has_header,
    parse_squeue,
)
from tests.unit.plugins.module_utils.slurm_fakes import UNREACHABLE, FakeClock, FakeSlurm, Scripted

SQUEUE = ["squeue", "--all", "--array", "--format=%i|%T|%u|%j"]
ENVIRON = {"PATH": "/usr/bin:/bin", "SLURM_CONF": "/lab/slurm.conf", "SQUEUE_STATES": "PD", "LC_ALL": "de_DE.UTF-8"}


# An ended scancel is noticed at the next check of live processes.
REAP_LATENCY = SCANCEL_CHECK_INTERVAL + 1e-9


def uuid(number: int) -> str:
    return "zzzzz-8i9sb-%015d" % number


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def slurm(clock):
    return FakeSlurm(clock)


def run(slurm, **options):
    return cancel_jobs(CancelRequest(**options), runner=slurm, clock=slurm.clock, environ=ENVIRON)


def peak_scancels_alive(slurm) -> int:
    calls = slurm.calls("scancel")
    return max((sum(other.alive_at(call.started) for other in calls) for call in calls), default=0)


# -- the ordinary case ----------------------------------------------------------


def test_nothing_queued_costs_one_squeue_and_changes_nothing(slurm):
    result = run(slurm, names=[uuid(1), uuid(2)])
    assert slurm.argvs() == [SQUEUE + ["--name=%s,%s" % (uuid(1), uuid(2))]]
    assert not result.changed and not result.failed
    assert result.already_absent == [uuid(1), uuid(2)]
    assert (result.squeue_calls, result.scancel_calls, result.cancelled, result.remaining) == (1, 0, [], [])
    assert result.msg == "no Slurm job needed an scancel"


def test_pending_and_running_jobs_go_in_one_scancel_pending_first_and_are_waited_for(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.add(12, uuid(2), "PENDING")
    result = run(slurm, names=[uuid(1), uuid(2), uuid(3)])
    assert slurm.argvs("scancel") == [["scancel", "12", "11"]]
    assert result.changed and not result.failed and result.msg == "cancelled 2 Slurm job(s)"
    assert result.cancelled == [
        {"name": uuid(1), "job_id": "11", "state_before": "RUNNING", "user": "crunch"},
        {"name": uuid(2), "job_id": "12", "state_before": "PENDING", "user": "crunch"},
    ]
    assert result.already_absent == [uuid(3)]
    assert result.remaining == []
    # The call ends soon after the running job has left COMPLETING (0.125 s in: the one
    # scancel --version of the run ran beside the first squeue, not before the scancel).
    assert slurm.jobs["11"].gone_at - slurm.clock.start == pytest.approx(0.125)
    assert len(slurm.version_probes) == 1 and result.scancel_version == "22.05" and result.ctld is False
    assert result.elapsed < 0.2
    assert result.scancel_calls == 1 and result.squeue_calls == len(slurm.calls("squeue"))
    assert result.diff_before == "11 %s RUNNING crunch\n12 %s PENDING crunch\n" % (uuid(1), uuid(2))
    assert result.diff_after == ""


def test_a_second_run_after_a_successful_one_changes_nothing(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    assert run(slurm, names=[uuid(1)]).changed
    again = run(slurm, names=[uuid(1)])
    assert not again.changed and again.scancel_calls == 0 and again.squeue_calls == 1


def test_every_command_is_an_argument_list_in_the_c_locale_without_client_overrides(slurm):
    slurm.add(11, uuid(1))
    run(slurm, names=[uuid(1)])
    for process in slurm.processes:
        assert process.env == {"PATH": "/usr/bin:/bin", "SLURM_CONF": "/lab/slurm.conf", "LC_ALL": "C"}


# -- batching, rate and process bounds -----------------------------------------------


def test_many_jobs_few_processes_pending_batches_before_the_running_one(slurm):
    slurm.add(1, uuid(1), "RUNNING")
    slurm.add(2, uuid(2), "RUNNING")
    for number in range(3, 1201):
        slurm.add(number, uuid(number), "PENDING")
    result = run(slurm, names=[uuid(n) for n in range(1, 1201)], max_job_ids_per_scancel=599)
    calls = slurm.calls("scancel")
    assert [call.argv[1:] for call in calls] == [
        [str(n) for n in range(3, 602)],
        [str(n) for n in range(602, 1201)],
        ["1", "2"],
    ]
    assert calls[2].started >= max(calls[0].ends, calls[1].ends)
    assert calls[1].started - calls[0].started >= 0.1 - 1e-9
    assert not result.failed and len(result.cancelled) == 1200
    assert result.scancel_calls + result.squeue_calls <= 10
    assert slurm.peak_alive <= 3 + 1


def test_scancel_starts_follow_the_rate_limit(slurm):
    for number in range(1, 5):
        slurm.add(number, uuid(number), "PENDING")
    run(slurm, names=[uuid(n) for n in range(1, 5)], max_scancel_per_second=2, max_job_ids_per_scancel=1)
    starts = slurm.relative_starts("scancel")
    first = slurm.squeue_duration  # scancel --version ran beside the squeue
    assert starts == pytest.approx([first, first + 0.5, first + 1.0, first + 1.5])


def test_no_more_scancel_processes_alive_than_allowed(slurm):
    slurm.scancel_duration = 1.0
    for number in range(1, 6):
        slurm.add(number, uuid(number), "PENDING")
    result = run(
        slurm,
        names=[uuid(n) for n in range(1, 6)],
        max_concurrent_scancel=2,
        max_job_ids_per_scancel=1,
        max_scancel_per_second=100,
    )
    assert result.scancel_calls == 5 and not result.failed
    assert peak_scancels_alive(slurm) == 2


# -- waiting, retrying, polling -----------------------------------------------------


def test_a_completing_job_is_waited_for_with_growing_polls_and_never_scancelled(slurm):
    slurm.add(11, uuid(1), "COMPLETING", gone_at=slurm.clock.start + 3.0)
    result = run(slurm, names=[uuid(1)])
    assert slurm.calls("scancel") == []
    assert not result.changed and not result.failed and result.cancelled == []
    starts = slurm.relative_starts("squeue")
    gaps = [round(b - a - slurm.squeue_duration, 6) for a, b in zip(starts, starts[1:])]
    assert gaps == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_a_job_still_queued_is_rescancelled_only_after_retry_delay_and_a_fresh_look(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.unkillable.add("11")
    result = run(slurm, names=[uuid(1)], retry_delay=2, timeout=10, log_interval=3)
    scancels = slurm.calls("scancel")
    squeue_starts = [call.started for call in slurm.calls("squeue")]
    assert len(scancels) == 5
    for previous, following in zip(scancels, scancels[1:]):
        looked = [start for start in squeue_starts if previous.ends + 2 - 1e-9 <= start <= following.started]
        assert looked, "no squeue between the retry delay and the next scancel"
        # The look is held the moment the delay ends, not up to a poll interval later.
        assert (
            2 + slurm.squeue_duration <= following.started - previous.ends <= 2 + slurm.squeue_duration + REAP_LATENCY
        )
    assert result.failed
    assert result.remaining == [{"name": uuid(1), "job_id": "11", "state": "RUNNING", "user": "crunch"}]
    assert "1 still queued after 10 s: 11 (%s, RUNNING)" % uuid(1) in result.msg
    still = [message for message in result.messages if "still in queue" in message]
    assert len(still) == 3 and all("Slurm job 11 (%s)" % uuid(1) in message for message in still)


def test_log_interval_zero_reports_every_look(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.unkillable.add("11")
    result = run(slurm, names=[uuid(1)], retry_delay=1, timeout=4, log_interval=0)
    looks_after_first_delay = [
        call for call in slurm.calls("squeue") if call.started >= slurm.calls("scancel")[0].ends + 1 - 1e-9
    ]
    assert len([m for m in result.messages if "still in queue" in m]) == len(looks_after_first_delay)


def test_after_a_failed_scancel_the_next_waits_error_retry_delay(slurm):
    timed_out = "scancel: error: Kill job error on job id 11: Socket timed out on send/recv operation"
    slurm.script("scancel", Scripted(returncode=1, stderr=timed_out, takes_effect=False))
    slurm.add(11, uuid(1), "RUNNING")
    result = run(slurm, names=[uuid(1)], error_retry_delay=10)
    first, second = slurm.calls("scancel")
    assert 10 + slurm.squeue_duration <= second.started - first.ends <= 10 + slurm.squeue_duration + REAP_LATENCY
    assert not result.failed and result.cancelled[0]["job_id"] == "11"
    assert "scancel of 1 job(s) failed: " + timed_out in result.messages


# What Slurm 22.05's scancel printed on the lab, run as nobody on root's job: exit status 210
# (ESLURM_ACCESS_DENIED, 2002, modulo 256), one line per refused id.
def denied_line(job_id):
    return "scancel: error: Kill job error on job id %s: Access/permission denied" % job_id


def test_a_job_slurm_refuses_to_this_user_is_not_tried_again_and_the_call_ends_at_once(slurm):
    for number in range(1, 21):
        slurm.add(number, uuid(number), "PENDING", user="alice")
    denied = "\n".join(denied_line(number) for number in range(1, 21)) + "\n"
    slurm.script("scancel", Scripted(returncode=210, stderr=denied, takes_effect=False))
    result = run(slurm, names=[uuid(n) for n in range(1, 21)])

    assert len(slurm.calls("scancel")) == 1 and len(slurm.calls("squeue")) == 1
    assert slurm.clock.elapsed() < 1
    assert result.failed and not result.changed and result.cancelled == []
    assert [entry["job_id"] for entry in result.permission_denied] == [str(n) for n in range(1, 21)]
    assert result.remaining == result.permission_denied
    assert result.msg.startswith("no Slurm job cancelled; 20 still queued after 0.1 s: ")
    assert (
        "; Slurm refused 20 of them to this user (Access/permission denied), not tried again: 1 (user alice), "
        "2 (user alice)" in result.msg
    )
    assert "run as their owner, root or a Slurm operator, or set user to leave other users' jobs alone" in result.msg
    assert "Slurm said: scancel: error: Kill job error on job id 1: Access/permission denied" in result.msg


def test_only_the_refused_ids_are_given_up_the_others_are_cancelled(slurm):
    slurm.add(11, uuid(1), "RUNNING", user="alice")
    slurm.add(12, uuid(2), "RUNNING", gone_at=slurm.clock.start + 0.2)  # its cancel worked
    slurm.script("scancel", Scripted(returncode=210, stderr=denied_line(11), takes_effect=False))
    result = run(slurm, names=[uuid(1), uuid(2)])
    assert slurm.argvs("scancel") == [["scancel", "11", "12"]]
    assert [entry["job_id"] for entry in result.cancelled] == ["12"]
    assert [entry["job_id"] for entry in result.permission_denied] == ["11"] and result.failed


def test_access_denied_without_ids_gives_up_every_id_of_that_scancel(slurm):
    slurm.add(11, uuid(1), "RUNNING", user="alice")
    slurm.script(
        "scancel", Scripted(returncode=1, stderr="scancel: error: Access/permission denied", takes_effect=False)
    )
    result = run(slurm, names=[uuid(1)], stop="cancel")
    assert len(slurm.calls("scancel")) == 1
    assert [entry["job_id"] for entry in result.permission_denied] == ["11"]


def test_a_failed_scancel_that_worked_anyway_is_not_repeated(slurm):
    slurm.script("scancel", Scripted(returncode=140, duration=5.0))
    slurm.add(11, uuid(1), "RUNNING")
    result = run(slurm, names=[uuid(1)])
    assert result.scancel_calls == 1
    assert not result.failed and result.changed and result.slurm_error == "scancel exited with status 140"


def test_jobs_leaving_during_the_grace_period_cost_no_scancel(slurm):
    slurm.add(11, uuid(1), "RUNNING", gone_at=slurm.clock.start + 1.0)
    slurm.add(12, uuid(2), "RUNNING")
    result = run(slurm, names=[uuid(1), uuid(2)], grace_period=3)
    assert slurm.argvs("scancel") == [["scancel", "12"]]
    # scancel --version was asked beside the first squeue, 3 s before it was needed.
    assert slurm.relative_starts("scancel")[0] == pytest.approx(3.0 + slurm.squeue_duration)
    assert [job["job_id"] for job in result.cancelled] == ["12"]
    assert not result.failed


def test_without_wait_the_call_returns_once_slurm_took_the_scancel(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    result = run(slurm, names=[uuid(1)], wait=False)
    assert (result.squeue_calls, result.scancel_calls) == (1, 1)
    assert result.elapsed == pytest.approx(slurm.squeue_duration + slurm.scancel_duration, abs=0.021)
    assert result.changed and not result.failed and result.remaining == []
    assert result.diff_after == ""


# -- who and what ---------------------------------------------------------------------


def test_jobs_of_other_users_with_the_same_name_are_reported_never_cancelled(slurm):
    slurm.add(11, uuid(1), "RUNNING", user="crunch")
    slurm.add(12, uuid(1), "RUNNING", user="alice")
    result = run(slurm, names=[uuid(1)], user="crunch")
    assert slurm.argvs("scancel") == [["scancel", "11"]]
    assert result.skipped_other_user == [{"name": uuid(1), "job_id": "12", "state": "RUNNING", "user": "alice"}]
    assert not result.failed and result.already_absent == []
    assert result.diff_after == "12 %s RUNNING alice\n" % uuid(1)


def test_job_ids_list_the_whole_queue_and_cover_array_tasks(slurm):
    slurm.add(7, "anything", "RUNNING")
    slurm.add("8_1", "array", "PENDING")
    slurm.add("8_2", "array", "PENDING")
    slurm.add(9, "theirs", "RUNNING", user="alice")
    slurm.add(99, "unrelated", "RUNNING")
    result = run(slurm, job_ids=["7", "8", "9", "10"], user="crunch")
    assert slurm.argvs("squeue")[0] == SQUEUE
    assert slurm.argvs("scancel") == [["scancel", "8_1", "8_2", "7"]]
    assert result.already_absent_job_ids == ["10"]
    assert [job["job_id"] for job in result.skipped_other_user] == ["9"]
    assert slurm.jobs["99"].gone_at is None


def test_clusters_reach_both_commands(slurm):
    slurm.add(11, uuid(1))
    run(slurm, names=[uuid(1)], clusters="east")
    assert "--clusters=east" in slurm.argvs("squeue")[0]
    assert slurm.argvs("scancel") == [["scancel", "--clusters=east", "11"]]


# -- signals --------------------------------------------------------------------------


def test_a_signal_goes_once_to_running_jobs_and_wait_waits_for_them_to_leave(slurm):
    slurm.add(11, uuid(1), "RUNNING", exits_after_signal=0.5)
    slurm.add(12, uuid(2), "PENDING")
    result = run(slurm, names=[uuid(1), uuid(2)], signal="TERM", batch=True, retry_delay=0.1)
    assert slurm.argvs("scancel") == [["scancel", "--signal=TERM", "--batch", "11"]]
    assert [job["job_id"] for job in result.signalled] == ["11"]
    assert result.cancelled == []
    assert [job["job_id"] for job in result.skipped_pending] == ["12"]
    assert result.changed and not result.failed
    assert slurm.jobs["12"].gone_at is None


def test_a_signal_is_not_repeated_when_the_job_ignores_it(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    result = run(slurm, names=[uuid(1)], signal="USR1", retry_delay=0.1, timeout=3)
    assert result.scancel_calls == 1
    assert result.failed and [job["job_id"] for job in result.remaining] == ["11"]


def test_a_signal_without_wait_returns_after_delivery(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    result = run(slurm, names=[uuid(1)], signal="USR1", wait=False)
    assert (result.squeue_calls, result.scancel_calls, result.failed) == (1, 1, False)


# -- check mode -----------------------------------------------------------------------


def test_check_mode_looks_once_and_predicts(slurm):
    slurm.add(11, uuid(1), "PENDING")
    slurm.add(12, uuid(2), "COMPLETING")
    slurm.add(13, uuid(1), "RUNNING", user="alice")
    result = run(slurm, names=[uuid(1), uuid(2), uuid(3)], user="crunch", check_mode=True, grace_period=30)
    assert slurm.argvs() == [SQUEUE + ["--name=%s,%s,%s" % (uuid(1), uuid(2), uuid(3))]]
    assert result.changed and not result.failed
    assert [job["job_id"] for job in result.cancelled] == ["11"]
    assert result.already_absent == [uuid(3)]
    assert result.diff_after == "13 %s RUNNING alice\n" % uuid(1)
    assert slurm.jobs["11"].gone_at is None


def test_check_mode_is_unchanged_when_only_completing_or_foreign_jobs_are_left(slurm):
    slurm.add(12, uuid(2), "COMPLETING")
    slurm.add(13, uuid(1), "RUNNING", user="alice")
    result = run(slurm, names=[uuid(1), uuid(2)], user="crunch", check_mode=True)
    assert not result.changed and result.cancelled == [] and result.scancel_calls == 0


def test_check_mode_fails_with_slurms_words_when_the_queue_cannot_be_read(slurm):
    slurm.down_since = slurm.clock.start
    result = run(slurm, names=[uuid(1)], check_mode=True)
    assert result.failed and result.squeue_calls == 1
    assert UNREACHABLE in result.msg


# -- Slurm unwell -----------------------------------------------------------------------


def test_slurmctld_down_from_the_start_fails_within_the_deadline_with_slurms_words(slurm):
    slurm.down_since = slurm.clock.start
    result = run(slurm, names=[uuid(1)], job_ids=["5"], timeout=30, command_timeout=10)
    assert result.failed and result.scancel_calls == 0
    assert result.squeue_calls >= 3
    assert result.msg == "could not list Slurm's queue within 30 s: " + UNREACHABLE
    assert result.remaining == [
        {"name": uuid(1), "job_id": None, "state": "UNKNOWN", "user": None},
        {"name": None, "job_id": "5", "state": "UNKNOWN", "user": None},
    ]
    assert result.elapsed <= 30 + 10


def test_slurmctld_lost_after_the_first_look_leaves_the_job_in_remaining(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.down_since = slurm.clock.start + 0.004
    result = run(slurm, names=[uuid(1)], timeout=30, command_timeout=10, log_interval=30)
    assert result.failed
    assert [job["job_id"] for job in result.remaining] == ["11"]
    assert "Slurm said: " + UNREACHABLE in result.msg
    assert "Unable to contact slurm controller" in result.slurm_error
    assert result.elapsed <= 30 + 10
    squeue_failures = [m for m in result.messages if m.startswith("squeue failed")]
    assert len(squeue_failures) == 1, "log_interval limits repeated error messages"


def test_a_hung_squeue_is_killed_so_the_call_ends_by_timeout_plus_command_timeout(slurm):
    slurm.script("squeue", Scripted(duration=100.0))
    result = run(slurm, names=[uuid(1)], timeout=5, command_timeout=10)
    assert result.failed and result.elapsed == pytest.approx(10.0)
    assert slurm.calls("squeue")[0].killed
    assert "squeue did not finish within 10 s and was killed" in result.msg


def test_a_hung_scancel_is_killed_within_the_bound(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.script("scancel", Scripted(returncode=0, duration=100.0, takes_effect=False))
    result = run(slurm, names=[uuid(1)], timeout=5, command_timeout=10)
    assert slurm.calls("scancel")[0].killed
    assert result.failed and result.elapsed <= 5 + 10
    assert "scancel did not finish within 10 s" in result.msg


def test_an_scancel_of_many_ids_has_command_timeout_per_ten_of_them(slurm):
    # scancel sends one request per id, ten at once: 25 ids are three rounds of requests.
    for number in range(25):
        slurm.add(100 + number, uuid(number), "PENDING")
    slurm.script("scancel", Scripted(returncode=0, duration=25.0))
    result = run(slurm, names=[uuid(number) for number in range(25)], timeout=300, command_timeout=10)
    assert not result.failed and len(result.cancelled) == 25
    assert not slurm.calls("scancel")[0].killed and result.scancel_calls == 1


def test_an_scancel_of_ten_ids_still_has_command_timeout(slurm):
    for number in range(10):
        slurm.add(100 + number, uuid(number), "PENDING")
    slurm.script("scancel", Scripted(returncode=0, duration=25.0, takes_effect=False))
    result = run(slurm, names=[uuid(number) for number in range(10)], timeout=300, command_timeout=10)
    first = slurm.calls("scancel")[0]
    assert first.killed and first.ends == pytest.approx(first.started + 10)
    assert "scancel did not finish within 10 s and was killed" in result.messages[0]


def test_a_failing_scancel_is_quoted_in_a_few_lines_without_its_backoff_notes(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    stderr = "".join(
        "scancel: _add_delay: adding delay in RPC send of 1000000 usec\n"
        "scancel: error: Kill job error on job id %d: Socket timed out on send/recv operation\n" % job_id
        for job_id in range(11, 16)
    )
    slurm.script("scancel", Scripted(returncode=1, stderr=stderr, takes_effect=False))
    result = run(slurm, names=[uuid(1)], timeout=5, stop="cancel")
    assert result.slurm_error == (
        "scancel: error: Kill job error on job id 11: Socket timed out on send/recv operation "
        "scancel: error: Kill job error on job id 12: Socket timed out on send/recv operation "
        "scancel: error: Kill job error on job id 13: Socket timed out on send/recv operation "
        "(and 2 more lines)"
    )


def test_an_scancel_of_many_ids_is_killed_at_the_deadline(slurm):
    for number in range(500):
        slurm.add(1000 + number, uuid(number), "RUNNING")
    slurm.script("scancel", Scripted(returncode=0, duration=400.0, takes_effect=False))
    result = run(slurm, names=[uuid(number) for number in range(500)], timeout=40, command_timeout=10, stop="cancel")
    assert slurm.calls("scancel")[0].killed
    assert result.failed and result.elapsed == pytest.approx(40, abs=0.1)
    assert "scancel did not finish within 40 s and was killed" in result.msg


@pytest.mark.parametrize("program", ["squeue", "scancel"])
def test_a_missing_client_is_an_immediate_clear_error(slurm, program):
    slurm.add(11, uuid(1))
    slurm.missing.add(program)
    with pytest.raises(CommandNotFoundError, match="cannot run %s" % program):
        run(slurm, names=[uuid(1)])
    assert slurm.clock.elapsed() < 0.01


def test_a_bad_name_is_refused_before_any_command(slurm):
    with pytest.raises(CancelRequestError, match="'a,b'"):
        run(slurm, names=[uuid(1), "a,b"])
    assert slurm.processes == []


def test_an_empty_request_runs_nothing(slurm):
    result = run(slurm, names=[], job_ids=[])
    assert slurm.processes == [] and not result.changed and not result.failed


def test_the_result_as_a_dict_has_every_documented_key(slurm):
    slurm.add(11, uuid(1))
    result = run(slurm, names=[uuid(1)]).to_dict()
    assert set(result) == {
        "changed",
        "failed",
        "msg",
        "cancelled",
        "terminated",
        "signalled",
        "already_absent",
        "already_absent_job_ids",
        "skipped_other_user",
        "skipped_pending",
        "remaining",
        "left_running",
        "permission_denied",
        "scancel_calls",
        "squeue_calls",
        "ctld",
        "scancel_version",
        "elapsed",
        "messages",
        "slurm_error",
        "diff",
    }
    assert result["diff"] == {"before": "11 %s RUNNING crunch\n" % uuid(1), "after": ""}


# -- the small parts ----------------------------------------------------------------------


def test_poll_schedule_doubles_to_its_ceiling_and_resets():
    schedule = PollSchedule(0.05, 1.0)
    assert [schedule.next_gap() for _round in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    schedule.reset()
    assert schedule.next_gap() == 0.05


def test_token_bucket_spaces_starts_and_holds_no_burst():
    bucket = TokenBucket(rate=4, now=0.0)
    assert bucket.take(0.0)
    assert not bucket.take(0.1)
    assert bucket.next_available(0.1) == pytest.approx(0.25)
    assert bucket.take(0.25)
    assert bucket.take(10.0) and not bucket.take(10.0)


# -- failures no retry can mend: the call ends at once, and says only what the queue shows --


@pytest.mark.parametrize(
    "printed", ["", "\n", "12|RUNNING|crunch|%s\n" % uuid(1)], ids=["nothing", "a-newline", "no-header"]
)
def test_an_squeue_listing_without_its_header_is_no_listing_and_ends_the_call_at_once(slurm, printed):
    # /bin/true, a wrapper that prints nothing, a listing of another format: all exit 0.
    slurm.add(11, uuid(1), "RUNNING")
    slurm.script("squeue", Scripted(stdout=printed))
    result = run(slurm, names=[uuid(1)], squeue_path="/srv/wrapper/squeue", timeout=120)

    assert len(slurm.calls("squeue")) == 1 and slurm.calls("scancel") == []
    assert slurm.clock.elapsed() < 1
    assert result.failed and not result.changed and result.cancelled == [] and result.already_absent == []
    assert result.remaining == [{"name": uuid(1), "job_id": None, "state": "UNKNOWN", "user": None}]
    assert result.msg.startswith(
        "squeue exited 0 without the line JOBID|STATE|USER|NAME that Slurm's squeue prints first for "
        "--format=%i|%T|%u|%j, even with no job queued"
    )
    assert (
        "(squeue_path=/srv/wrapper/squeue); not tried again: Slurm's queue was not listed, no job was cancelled"
        in result.msg
    )


def test_an_empty_queue_with_its_header_is_an_empty_queue(slurm):
    result = run(slurm, names=[uuid(1)])
    assert not result.failed and result.already_absent == [uuid(1)]
    assert slurm.calls("squeue")[0].stdout == "JOBID|STATE|USER|NAME\n"


def test_the_header_is_not_read_as_a_job_and_cluster_lines_are_skipped():
    listing = "CLUSTER: east\nJOBID|STATE|USER|NAME\n12|RUNNING|root|%s\n" % uuid(1)
    assert parse_squeue(listing) == [QueueEntry("12", "RUNNING", "root", uuid(1))]
    assert has_header(listing) and not has_header("") and not has_header("12|RUNNING|root|x\n")


def test_an_scancel_that_exits_1_in_silence_is_not_slurms_and_is_not_retried(slurm):
    # /bin/false: Slurm's scancel prints a reason whenever it exits 1 (src/scancel/scancel.c).
    for number in range(1, 4):
        slurm.add(10 + number, uuid(number), "RUNNING")
    slurm.script("scancel", *[Scripted(returncode=1, takes_effect=False)] * 3)
    result = run(slurm, names=[uuid(n) for n in range(1, 4)], scancel_path="/srv/wrapper/scancel", timeout=120)

    assert len(slurm.calls("scancel")) == 1
    assert slurm.clock.elapsed() < 1
    assert result.failed and not result.changed and result.cancelled == []
    assert [entry["job_id"] for entry in result.remaining] == ["11", "12", "13"]
    assert "cancelled 3" not in result.msg
    assert result.msg.startswith(
        "scancel exited with status 1 and printed nothing, which Slurm's scancel never does "
        "(scancel_path=/srv/wrapper/scancel); not tried again: no Slurm job cancelled; 3 still queued after "
    )


@pytest.mark.parametrize(
    "program, stderr",
    [
        (
            "squeue",
            "squeue: error: Problem talking to database\nsqueue: error: 'a' can't be reached now, or it is an "
            "invalid entry for --cluster.  Use 'sacctmgr list clusters' to see available clusters.",
        ),
        ("squeue", "squeue: unrecognized option '--array'\nTry \"squeue --help\" for more information"),
    ],
)
def test_an_squeue_that_refuses_its_command_line_ends_the_call_at_once(slurm, program, stderr):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.script(program, Scripted(returncode=1, stderr=stderr))
    result = run(slurm, names=[uuid(1)], clusters="a", timeout=120)
    assert len(slurm.calls("squeue")) == 1 and slurm.clock.elapsed() < 1
    assert result.failed and result.cancelled == []
    assert result.msg.startswith("squeue refused its command line: " + stderr.split("\n")[0])
    assert "(squeue_path=squeue, clusters=a); not tried again" in result.msg


@pytest.mark.parametrize(
    "stderr",
    [
        "scancel: error: Problem talking to database\nscancel: error: 'a' can't be reached now, or it is an "
        "invalid entry for --cluster.  Use 'sacctmgr list clusters' to see available clusters.",
        "scancel: unrecognized option '--ctld'\nTry \"scancel --help\" for more information",
        "scancel: error: Invalid job id 11x",
    ],
)
def test_an_scancel_that_refuses_its_command_line_ends_the_call_at_once(slurm, stderr):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.add(12, uuid(2), "PENDING")
    slurm.script("scancel", Scripted(returncode=1, stderr=stderr, takes_effect=False))
    result = run(slurm, names=[uuid(1), uuid(2)], timeout=120)
    assert len(slurm.calls("scancel")) == 1 and slurm.clock.elapsed() < 1
    assert result.failed and not result.changed and result.cancelled == []
    assert result.msg.startswith("scancel refused its command line: ")
    assert "not tried again: no Slurm job cancelled; 2 still queued" in result.msg
    # A last look says what is still queued.
    assert len(slurm.calls("squeue")) == 2


def test_a_job_that_left_after_a_failed_scancel_counts_as_cancelled_one_still_queued_does_not(slurm):
    # A per-job scancel that fails for one id while Slurm took the other: only the queue tells.
    slurm.add(11, uuid(1), "RUNNING")
    slurm.add(12, uuid(2), "RUNNING")
    slurm.unkillable.add("12")
    slurm.script(
        "scancel",
        *[Scripted(returncode=1, stderr="scancel: error: Kill job error on job id 12: Socket timed out")] * 50,
    )
    result = run(slurm, names=[uuid(1), uuid(2)], timeout=3, error_retry_delay=1)
    assert [entry["job_id"] for entry in result.cancelled] == ["11"]
    assert [entry["job_id"] for entry in result.remaining] == ["12"]
    assert result.msg.startswith("cancelled 1 Slurm job(s); 1 still queued after 3 s")


def test_transient_failures_are_still_retried_until_the_timeout(slurm):
    slurm.add(11, uuid(1), "RUNNING")
    slurm.down_since = slurm.clock.start + 0.01
    result = run(slurm, names=[uuid(1)], timeout=30)
    assert result.failed and slurm.clock.elapsed() >= 30
    assert "not tried again" not in result.msg


def test_after_a_permanent_scancel_error_a_job_that_left_on_its_own_is_not_called_cancelled(slurm):
    # The job ends on its own while the refused scancel runs: the last look finds it gone.
    slurm.add(11, uuid(1), "RUNNING", gone_at=slurm.clock.start + 0.05)
    slurm.script("scancel", Scripted(returncode=1, stderr="scancel: error: Invalid job id 11x", takes_effect=False))
    result = run(slurm, names=[uuid(1)], grace_period=0)
    assert len(slurm.calls("scancel")) == 1
    assert not result.failed and result.remaining == [] and result.cancelled == []
    assert result.msg.startswith("scancel refused its command line: scancel: error: Invalid job id 11x")
    assert result.msg.endswith("; not tried again: no Slurm job cancelled")
