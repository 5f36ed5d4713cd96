# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stopping jobs as crunch-dispatch-slurm does (option stop), against the scripted Slurm."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.engine import (
    CancelRequest,
    CancelRequestError,
    cancel_jobs,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.scancels import SCANCEL_CHECK_INTERVAL
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.run import ALL_OPTIONS, SlurmStep
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from tests.unit.plugins.module_utils.slurm_fakes import (
    FakeClock,
    FakeSlurm,
    Scripted,
    container,
    crunch_job,
    fake_client_directory,
)

ENVIRON = {"PATH": "/usr/bin:/bin"}
TERM = ["scancel", "--signal=TERM", "--batch"]
REMOVE = ["scancel", "--state=PENDING"]
# How late after its instant the engine may notice something: a reap check, plus one squeue.
LATENESS = SCANCEL_CHECK_INTERVAL + 0.005 + 1e-6


@pytest.fixture
def slurm():
    return FakeSlurm(FakeClock())


def run(slurm, **options):
    return cancel_jobs(CancelRequest(**options), runner=slurm, clock=slurm.clock, environ=ENVIRON)


def ids(entries):
    return [entry["job_id"] for entry in entries]


def test_auto_removes_pending_terminates_running_containers_and_cancels_crunch_v1_jobs(slurm):
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.3)
    slurm.add(12, container(2), "PENDING")
    slurm.add(13, crunch_job(3), "RUNNING")
    slurm.add(14, crunch_job(4), "PENDING")
    result = run(slurm, names=[container(1), container(2), crunch_job(3), crunch_job(4)])

    assert slurm.argvs("scancel") == [REMOVE + ["12"], ["scancel", "14", "13"], TERM + ["11"]]
    first, cancel, term = slurm.calls("scancel")
    # The calls holding only running jobs wait for the one holding pending ones alone.
    assert cancel.started >= first.ends and term.started >= first.ends
    assert [job.received for job in slurm.jobs.values()] == [["TERM+batch"], ["cancel"], ["cancel"], ["cancel"]]
    assert ids(result.terminated) == ["11"]
    assert sorted(ids(result.cancelled)) == ["12", "13", "14"]
    assert result.changed and not result.failed and result.remaining == []
    assert result.msg == "sent TERM to 1, cancelled 3 Slurm job(s)"
    assert slurm.jobs["11"].gone_at is not None and result.messages == []


def test_a_job_that_leaves_on_its_term_is_never_cancelled_outright(slurm):
    slurm.add(11, container(1), "RUNNING", exits_after_signal=1.0)
    result = run(slurm, names=[container(1)], terminate_grace=5)
    assert slurm.argvs("scancel") == [TERM + ["11"]]
    assert slurm.jobs["11"].received == ["TERM+batch"]
    assert ids(result.terminated) == ["11"] and result.cancelled == []
    assert not result.failed and result.squeue_calls == len(slurm.calls("squeue"))
    assert result.squeue_calls + result.scancel_calls <= 10


# -- after_term: TERM again by default, as the dispatcher --------------------------------
# 3.2.1 (and 1.4.3, 2.7.4) services/crunch-dispatch-slurm/slurm.go, Cancel: only ever
# `scancel --batch --signal=TERM` for a running job, never a plain cancel; its tracker
# (crunch-dispatch-slurm.go, runContainer and scancel) calls it again after each squeue poll
# (squeue.go, HasUUID) while the job stays, PollInterval 10 s by default.


def test_by_default_a_job_that_ignores_its_term_gets_term_every_interval_and_is_reported_never_cancelled(slurm):
    slurm.add(11, container(1), "RUNNING")
    result = run(slurm, names=[container(1)], timeout=60, log_interval=1000)

    assert slurm.argvs("scancel") == [TERM + ["11"]] * 6
    terms = slurm.calls("scancel")
    for earlier, later in zip(terms, terms[1:]):
        assert earlier.ends + 10 <= later.started <= earlier.ends + 10 + LATENESS
    assert slurm.jobs["11"].received == ["TERM+batch"] * 6
    assert ids(result.terminated) == ["11"] and result.cancelled == []
    assert result.failed and ids(result.remaining) == ["11"]
    assert result.left_running == [
        {"name": container(1), "job_id": "11", "state": "RUNNING", "user": "crunch", "terms": 6}
    ]
    assert result.msg == (
        "sent TERM to 1 Slurm job(s); 1 still queued after 60 s: 11 (%s, RUNNING); 1 left running, not "
        "cancelled, as crunch-dispatch-slurm leaves them (after_term=term_again): 11 (TERM taken 6 time(s)); "
        "after_term=cancel cancels them outright, killing crunch-run, whose Docker container then outlives "
        "it unsaved" % container(1)
    )
    # One note when the TERM is first repeated, not one per repeat.
    repeated = [message for message in result.messages if "sent TERM again" in message]
    assert repeated == [
        "1 Slurm job(s) still running 10 s after their TERM, sent TERM again (every 10 s until they leave or the "
        "timeout; never cancelled outright, after_term=term_again): 11"
    ]
    assert 60 <= slurm.clock.elapsed() <= 60 + slurm.scancel_duration


def test_a_job_that_leaves_on_its_second_term_ends_the_call_without_failure(slurm):
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.5, signals_to_exit=2)
    slurm.add(12, container(2), "RUNNING", exits_after_signal=0.5)
    result = run(slurm, names=[container(1), container(2)], term_interval=3)

    # Both share the first TERM; only the one still running gets the second, 3 s later.
    assert [sorted(argv[3:]) for argv in slurm.argvs("scancel")] == [["11", "12"], ["11"]]
    first, second = slurm.calls("scancel")
    assert first.ends + 3 <= second.started <= first.ends + 3 + LATENESS
    assert [job.received for job in slurm.jobs.values()] == [["TERM+batch"] * 2, ["TERM+batch"]]
    assert not result.failed and result.remaining == [] and result.left_running == []
    assert sorted(ids(result.terminated)) == ["11", "12"] and result.cancelled == []
    assert result.msg == "sent TERM to 2 Slurm job(s)"


def test_jobs_that_stay_get_their_repeated_terms_in_one_scancel(slurm):
    for number in (11, 12, 13):
        slurm.add(number, container(number), "RUNNING")
    result = run(slurm, names=[container(n) for n in (11, 12, 13)], timeout=25, log_interval=1000)
    assert [sorted(argv[3:]) for argv in slurm.argvs("scancel")] == [["11", "12", "13"]] * 3
    assert [entry["terms"] for entry in result.left_running] == [3, 3, 3]
    assert result.squeue_calls + result.scancel_calls <= 45


def test_a_job_that_turns_completing_after_a_term_gets_no_further_term(slurm):
    job = slurm.add(11, container(1), "RUNNING")
    job.completing_at = slurm.clock.start + 5
    job.gone_at = slurm.clock.start + 40
    result = run(slurm, names=[container(1)], timeout=60, log_interval=1000)
    assert slurm.argvs("scancel") == [TERM + ["11"]]
    assert not result.failed and result.left_running == []


def test_a_repeated_term_that_fails_is_sent_again_after_error_retry_delay(slurm):
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.5, signals_to_exit=2)
    slurm.script(
        "scancel", Scripted(), Scripted(returncode=1, stderr="scancel: error: Socket timed out", takes_effect=False)
    )
    result = run(slurm, names=[container(1)], term_interval=4, error_retry_delay=2)
    taken, failed, again = slurm.calls("scancel")
    assert slurm.argvs("scancel") == [TERM + ["11"]] * 3
    assert taken.ends + 4 <= failed.started <= taken.ends + 4 + LATENESS
    assert failed.ends + 2 <= again.started <= failed.ends + 2 + LATENESS
    assert not result.failed and slurm.jobs["11"].received == ["TERM+batch"] * 2
    assert sum("sent TERM again" in message for message in result.messages) == 1


def test_without_wait_a_job_gets_one_term_whatever_after_term_says(slurm):
    slurm.add(11, container(1), "RUNNING")
    for after_term in ("term_again", "cancel"):
        result = run(slurm, names=[container(1)], wait=False, after_term=after_term)
        assert not result.failed and result.left_running == []
    assert slurm.argvs("scancel") == [TERM + ["11"]] * 2


# -- after_term=cancel: the plain cancel, only when asked --------------------------------


def test_a_job_that_ignores_its_term_is_cancelled_after_the_grace_and_not_before(slurm):
    slurm.add(11, container(1), "RUNNING")
    result = run(slurm, names=[container(1)], after_term="cancel", terminate_grace=5, retry_delay=0.5, log_interval=100)

    assert slurm.argvs("scancel") == [TERM + ["11"], ["scancel", "11"]]
    term, cancel = slurm.calls("scancel")
    assert term.ends + 5 <= cancel.started <= term.ends + 5 + LATENESS
    # The cancel follows a listing that began once the grace was over, one squeue per round.
    last_look = max(
        (call for call in slurm.calls("squeue") if call.started < cancel.started), key=lambda call: call.started
    )
    assert last_look.started >= term.ends + 5
    assert slurm.jobs["11"].received == ["TERM+batch", "cancel"]
    assert ids(result.terminated) == ids(result.cancelled) == ["11"]
    assert not result.failed and result.remaining == []
    assert result.messages[1:] == ["1 Slurm job(s) still queued 5 s after their TERM, cancelled outright: 11"]
    assert result.messages[0].startswith("Slurm job 11 (%s) still in queue, RUNNING" % container(1))
    # During the grace the looks back off to one a second, and one falls on its end.
    starts = [call.started for call in slurm.calls("squeue") if term.ends < call.started < cancel.started]
    gaps = [round(later - earlier - slurm.squeue_duration, 6) for earlier, later in zip(starts, starts[1:])]
    assert gaps[:8] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0] and max(gaps) <= 1.0
    assert result.squeue_calls == len(slurm.calls("squeue")) <= 15


def test_a_job_that_outlives_even_its_cancel_gets_more_cancels_never_a_second_term(slurm):
    slurm.add(11, container(1), "RUNNING")
    slurm.unkillable.add("11")
    result = run(slurm, names=[container(1)], after_term="cancel", terminate_grace=2, retry_delay=1, timeout=6)
    assert slurm.argvs("scancel")[0] == TERM + ["11"]
    assert set(map(tuple, slurm.argvs("scancel")[1:])) == {("scancel", "11")}
    assert result.failed and ids(result.remaining) == ["11"]
    assert "sent TERM to 1, cancelled 1 Slurm job(s); 1 still queued after 6 s" in result.msg


def test_a_failed_term_is_sent_again_after_error_retry_delay_and_the_grace_counts_from_the_one_taken(slurm):
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.5)
    slurm.script("scancel", Scripted(returncode=1, stderr="scancel: error: Socket timed out", takes_effect=False))
    result = run(slurm, names=[container(1)], terminate_grace=5, error_retry_delay=3)
    failed, taken = slurm.calls("scancel")
    assert slurm.argvs("scancel") == [TERM + ["11"], TERM + ["11"]]
    assert failed.ends + 3 <= taken.started <= failed.ends + 3 + LATENESS
    assert slurm.jobs["11"].received == ["TERM+batch"]
    assert ids(result.terminated) == ["11"] and result.cancelled == [] and not result.failed


def test_a_pending_job_that_starts_before_its_removal_is_left_running_then_gets_term(slurm):
    # Listed pending at 0.005 s; it starts before the scancel takes effect (0.085 s).
    slurm.add(11, container(1), "PENDING", starts_at=slurm.clock.start + 0.05, exits_after_signal=0.2)
    result = run(slurm, names=[container(1)], retry_delay=1)
    assert slurm.argvs("scancel") == [REMOVE + ["11"], TERM + ["11"]]
    removal, term = slurm.calls("scancel")
    assert removal.ends + 1 <= term.started <= removal.ends + 1 + LATENESS
    assert slurm.jobs["11"].received == ["TERM+batch"]  # never a plain cancel
    assert ids(result.terminated) == ids(result.cancelled) == ["11"]
    assert not result.failed


def test_without_wait_the_call_ends_once_slurm_took_the_term(slurm):
    slurm.add(11, container(1), "RUNNING")
    slurm.add(12, container(2), "PENDING")
    result = run(slurm, names=[container(1), container(2)], wait=False)
    assert slurm.argvs("scancel") == [REMOVE + ["12"], TERM + ["11"]]
    # A fresh look between the removal and the TERM, none after the TERM.
    assert (result.squeue_calls, result.scancel_calls, result.failed) == (2, 2, False)
    assert slurm.calls("squeue")[-1].started < slurm.calls("scancel")[-1].started
    assert ids(result.terminated) == ["11"] and ids(result.cancelled) == ["12"]
    assert result.diff_after == ""


@pytest.mark.parametrize(
    "stop, name, expected",
    [
        ("cancel", container(1), ["scancel", "11"]),
        ("terminate", crunch_job(1), TERM + ["11"]),
        ("terminate", container(1), TERM + ["11"]),
        ("auto", crunch_job(1), ["scancel", "11"]),
    ],
)
def test_stop_cancel_and_terminate_override_the_uuid_kind(slurm, stop, name, expected):
    slurm.add(11, name, "RUNNING", exits_after_signal=0.1)
    result = run(slurm, names=[name], stop=stop)
    assert slurm.argvs("scancel") == [expected] and not result.failed


def test_job_ids_are_stopped_by_the_kind_of_their_listed_name(slurm):
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.1)
    slurm.add(12, crunch_job(2), "RUNNING")
    slurm.add(13, "not-an-arvados-job", "RUNNING")
    result = run(slurm, job_ids=["11", "12", "13"])
    assert slurm.argvs("scancel") == [["scancel", "12", "13"], TERM + ["11"]]
    assert ids(result.terminated) == ["11"] and sorted(ids(result.cancelled)) == ["12", "13"]


def test_a_thousand_containers_take_two_terms_and_few_processes(slurm):
    for number in range(1, 1001):
        slurm.add(number, container(number), "RUNNING", exits_after_signal=0.5)
    result = run(slurm, names=[container(n) for n in range(1, 1001)])
    assert [call.argv[:3] for call in slurm.calls("scancel")] == [TERM, TERM]
    assert sorted(int(job_id) for argv in slurm.argvs("scancel") for job_id in argv[3:]) == list(range(1, 1001))
    assert not result.failed and len(result.terminated) == 1000 and result.cancelled == []
    assert result.squeue_calls + result.scancel_calls <= 10
    assert slurm.peak_alive <= 3 + 1


def test_check_mode_lists_once_and_predicts_the_first_step_of_each_job(slurm):
    slurm.add(11, container(1), "RUNNING")
    slurm.add(12, container(2), "PENDING")
    slurm.add(13, crunch_job(3), "RUNNING")
    slurm.add(14, container(4), "COMPLETING")
    result = run(slurm, names=[container(1), container(2), crunch_job(3), container(4)], check_mode=True)
    assert len(slurm.processes) == 1 and slurm.calls("scancel") == []
    assert ids(result.terminated) == ["11"] and ids(result.cancelled) == ["12", "13"]
    assert result.changed and result.msg == "would have sent TERM to 1, cancelled 2 Slurm job(s)"
    assert result.diff_after == ""
    assert all(job.received == [] for job in slurm.jobs.values())


def test_a_signal_signals_only_whatever_the_kind(slurm):
    slurm.add(11, container(1), "RUNNING")
    result = run(slurm, names=[container(1)], signal="USR1", wait=False)
    assert slurm.argvs("scancel") == [["scancel", "--signal=USR1", "11"]]
    assert ids(result.signalled) == ["11"] and result.terminated == [] and result.cancelled == []


# -- the request ------------------------------------------------------------------------


# The dispatcher's own repeat: a TERM per squeue poll, PollPeriod 10s by default in 1.4.3
# services/crunch-dispatch-slurm/crunch-dispatch-slurm.go, Containers.CloudVMs.PollInterval 10s
# in 2.7.4 and 3.2.1 lib/config/config.default.yml; never a plain cancel (slurm.go, Cancel).
def test_by_default_a_term_is_repeated_every_ten_seconds_and_nothing_is_cancelled_outright():
    request = CancelRequest(names=[container(1)])
    assert (request.after_term, request.term_interval, request.cancels_after_term) == ("term_again", 10.0, False)
    assert CancelRequest(names=[container(1)], after_term="cancel").cancels_after_term


def test_the_default_deadline_leaves_room_for_the_grace_only_where_a_term_may_go():
    assert CancelRequest(names=[crunch_job(1)]).timeout == 120.0
    assert CancelRequest(names=[crunch_job(1)], stop="terminate").timeout == 240.0
    assert CancelRequest(names=[container(1)]).timeout == 240.0
    assert CancelRequest(names=[container(1)], terminate_grace=10).timeout == 130.0
    assert CancelRequest(names=[container(1)], stop="cancel").timeout == 120.0
    assert CancelRequest(job_ids=["5"]).timeout == 240.0
    assert CancelRequest(names=[container(1)], signal="TERM").timeout == 120.0
    assert CancelRequest(names=[container(1)], timeout=30, terminate_grace=10).timeout == 30.0


@pytest.mark.parametrize(
    "options, message",
    [
        ({"stop": "kill"}, "stop must be one of auto, terminate, cancel, got 'kill'"),
        ({"stop": None}, "stop must be one of auto, terminate, cancel, got None"),
        (
            {"stop": "terminate", "signal": "USR1"},
            "signal USR1 only signals and stops nothing; it cannot be combined with stop=terminate",
        ),
        ({"stop": "cancel", "signal": "TERM", "batch": True}, "cannot be combined with stop=cancel"),
        ({"terminate_grace": -1}, "terminate_grace must be at least 0, got -1"),
        ({"terminate_grace": float("inf")}, "terminate_grace must be a finite number"),
        ({"timeout": 60, "after_term": "cancel"}, "timeout 60 ends the call before terminate_grace 120 is over"),
        ({"timeout": 100, "after_term": "cancel", "stop": "terminate", "names": [crunch_job(1)]}, "grace 120"),
        ({"after_term": "kill"}, "after_term must be one of term_again, cancel, got 'kill'"),
        ({"after_term": "cancel", "signal": "TERM"}, "cannot be combined with after_term=cancel"),
        ({"term_interval": 0.5}, "term_interval must be at least 1, got 0.5"),
        ({"term_interval": 3601}, "term_interval must be at most 3600, got 3601"),
        ({"term_interval": float("nan")}, "term_interval must be a finite number"),
        ({"term_interval": "10"}, "option term_interval must be of type float, got '10'"),
    ],
)
def test_bad_stop_options_are_refused_with_the_bad_value(options, message):
    options.setdefault("names", [container(1)])
    with pytest.raises(CancelRequestError) as raised:
        CancelRequest(**options)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    "options",
    [
        {"names": [container(1)], "timeout": 60, "wait": False},
        {"names": [container(1)], "timeout": 60, "stop": "cancel"},
        {"names": [crunch_job(1)], "timeout": 60},
        {"job_ids": ["5"], "timeout": 60},  # of unknown kind until listed
        {"names": [container(1)], "timeout": 60, "signal": "TERM", "batch": True},
        {"names": [container(1)], "timeout": 60},  # by default no outright cancel must fit
    ],
)
def test_a_short_timeout_is_fine_where_no_job_surely_waits_for_a_grace(options):
    assert CancelRequest(**options).timeout == 60.0


# -- the other canceller of the collection ----------------------------------------------


def fail_jobs_slurm_step(slurm, tmp_path):
    """arvados_fail_jobs' Slurm step with its default options, on the scripted Slurm."""
    clients = fake_client_directory(tmp_path)
    params = {name: spec.get("default") for name, spec in ALL_OPTIONS.items()}
    params.update(squeue_path=str(clients / "squeue"), scancel_path=str(clients / "scancel"))
    step = SlurmStep(
        params, cancel=lambda request: cancel_jobs(request, runner=slurm, clock=slurm.clock, environ=ENVIRON)
    )
    return step


def test_arvados_fail_jobs_still_cancels_crunch_v1_jobs_outright_through_the_same_engine(slurm, tmp_path):
    step = fail_jobs_slurm_step(slurm, tmp_path)
    slurm.add(11, crunch_job(1), "RUNNING")
    slurm.add(12, crunch_job(2), "PENDING")
    outcome = step([crunch_job(1), crunch_job(2)], check_mode=False)
    assert scancels_without_path(slurm) == [["12", "11"]]
    assert sorted(ids(outcome["cancelled"])) == ["11", "12"] and outcome["terminated"] == []


def test_arvados_fail_jobs_stops_at_once_when_slurm_refuses_the_user_and_says_why(slurm, tmp_path):
    # Issue 26: run as a user Slurm refuses, the step said "cancelled 20" and retried a
    # permission error for its whole timeout.
    step = fail_jobs_slurm_step(slurm, tmp_path)
    names = [crunch_job(number) for number in range(1, 21)]
    for number, name in enumerate(names, start=1):
        slurm.add(number, name, "RUNNING", user="alice")
    denied = "".join(
        "scancel: error: Kill job error on job id %d: Access/permission denied\n" % n for n in range(1, 21)
    )
    slurm.script("scancel", Scripted(returncode=210, stderr=denied, takes_effect=False))
    with pytest.raises(RecoveryError) as raised:
        step(names, check_mode=False)
    message = str(raised.value)
    assert message.startswith("Slurm jobs of 20 job(s) could not be made absent: no Slurm job cancelled; ")
    assert "Slurm refused 20 of them to this user (Access/permission denied), not tried again" in message
    assert "nothing of this batch was changed in the database" in message
    assert len(slurm.calls("scancel")) == 1 and slurm.clock.elapsed() < 1


def scancels_without_path(slurm):
    return [argv[1:] for argv in slurm.argvs("scancel")]


# 3.2.1 services/crunch-dispatch-slurm/slurm.go sends a suspended job TERM too
# (`--batch --signal=TERM --state=suspended`), which Slurm 22.05 refuses: it never ends one.


def test_by_default_a_suspended_container_job_is_left_alone_and_reported_at_once(slurm):
    slurm.add(11, container(1), "SUSPENDED")
    slurm.add(12, container(2), "RUNNING", exits_after_signal=0.1)
    result = run(slurm, names=[container(1), container(2)])
    assert slurm.argvs("scancel") == [TERM + ["12"]]
    assert slurm.jobs["11"].received == []
    assert result.cancelled == [] and ids(result.terminated) == ["12"]
    assert result.failed and ids(result.remaining) == ["11"]
    assert result.left_running == [
        {"name": container(1), "job_id": "11", "state": "SUSPENDED", "user": "crunch", "terms": 0}
    ]
    assert "11 (suspended: no TERM reaches it)" in result.msg
    # It does not wait for the deadline: nothing it may do would end the job.
    assert slurm.clock.elapsed() < 1


def test_check_mode_predicts_the_suspended_job_a_real_run_leaves(slurm):
    slurm.add(11, container(1), "SUSPENDED")
    slurm.add(12, container(2), "RUNNING")
    result = run(slurm, names=[container(1), container(2)], check_mode=True, log_interval=1000)
    assert slurm.calls("scancel") == [] and len(slurm.processes) == 1
    assert ids(result.terminated) == ["12"] and result.changed
    assert result.failed and ids(result.remaining) == ids(result.left_running) == ["11"]
    assert result.diff_after == "11 %s SUSPENDED crunch\n" % container(1)
    real = run(slurm, names=[container(1), container(2)], timeout=15, log_interval=1000)
    assert ids(real.left_running) == ["11", "12"] and real.failed


def test_with_after_term_cancel_a_suspended_container_job_is_cancelled_for_no_term_reaches_it(slurm):
    slurm.add(11, container(1), "SUSPENDED")
    slurm.add(12, container(2), "RUNNING", exits_after_signal=0.1)
    result = run(slurm, names=[container(1), container(2)], after_term="cancel")
    assert slurm.argvs("scancel") == [["scancel", "11"], TERM + ["12"]]
    assert ids(result.cancelled) == ["11"] and ids(result.terminated) == ["12"]
    assert not result.failed
