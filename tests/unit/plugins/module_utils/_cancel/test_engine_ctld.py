# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One request per scancel from Slurm 24.05 on (option ctld, issue 23), against the scripted
Slurm of each release."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.engine import (
    CancelRequest,
    CancelRequestError,
    CommandNotFoundError,
    cancel_jobs,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.run import ALL_OPTIONS, SlurmStep
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.release import (
    parse_slurm_version,
    sends_one_request,
)
from tests.unit.plugins.module_utils.slurm_fakes import (
    DENIED_EXIT,
    FakeClock,
    FakeSlurm,
    Scripted,
    container,
    crunch_job,
    fake_client_directory,
)

ENVIRON = {"PATH": "/usr/bin:/bin"}
# Who runs the clients: the owner of the fake's jobs (user crunch), not root, unless a test says.
CRUNCH = (1000, "crunch")
ROOT = (0, "root")
CTLD_REMOVE = ["scancel", "--ctld", "--state=PENDING"]
CTLD_TERM = ["scancel", "--ctld", "--signal=TERM", "--batch"]


def fake_slurm(release: str, package: str = "slurm-wlm") -> FakeSlurm:
    slurm = FakeSlurm(FakeClock())
    slurm.release = release
    slurm.package = package
    return slurm


def run(slurm, caller=CRUNCH, **options):
    return cancel_jobs(CancelRequest(**options), runner=slurm, clock=slurm.clock, environ=ENVIRON, caller=caller)


def ids(entries):
    return sorted(entry["job_id"] for entry in entries)


# -- what scancel --version prints ------------------------------------------------------


@pytest.mark.parametrize(
    "printed, version, one_request",
    [
        ("slurm-wlm 22.05.8\n", (22, 5), False),  # Debian 12, checked on the lab
        ("slurm-wlm 20.11.4\n", (20, 11), False),  # Debian 11
        ("slurm 23.11.10\n", (23, 11), False),
        ("slurm 24.05.1\n", (24, 5), True),  # SchedMD's tarball
        ("slurm-wlm 24.11.5\n", (24, 11), True),  # Debian 13
        ("slurm 25.11.0-0rc1\n", (25, 11), True),
        ("scancel: error: Unable to establish controller machine\n", None, False),
        ("", None, False),
        ("slurm version unknown\n", None, False),
    ],
)
def test_the_release_is_read_from_what_scancel_version_prints(printed, version, one_request):
    assert parse_slurm_version(printed) == version
    assert sends_one_request(version) is one_request


# -- auto: which path each release gets --------------------------------------------------


def stop_a_mixed_batch(slurm):
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.3)
    slurm.add(12, container(2), "PENDING")
    slurm.add(13, crunch_job(3), "RUNNING")
    slurm.add(14, container(4), "RUNNING", exits_after_signal=0.3)
    return run(slurm, names=[container(1), container(2), crunch_job(3), container(4)])


def test_auto_on_debian_12_keeps_one_request_per_job():
    slurm = fake_slurm("22.05.8")
    result = stop_a_mixed_batch(slurm)
    assert slurm.argvs("scancel") == [
        ["scancel", "--state=PENDING", "12"],
        ["scancel", "13"],
        ["scancel", "--signal=TERM", "--batch", "11", "14"],
    ]
    assert [probe.argv for probe in slurm.version_probes] == [["scancel", "--version"]]
    assert slurm.kill_requests == [1, 1, 2]
    assert result.ctld is False and result.scancel_version == "22.05"
    assert not result.failed and result.scancel_calls == 3


@pytest.mark.parametrize("release, package", [("24.05.1", "slurm"), ("24.11.5", "slurm-wlm"), ("25.11.0", "slurm")])
def test_auto_from_24_05_on_sends_each_of_the_three_calls_as_one_request(release, package):
    slurm = fake_slurm(release, package)
    result = stop_a_mixed_batch(slurm)
    # The dispatcher's shape stays: pending removed, running containers sent TERM, the
    # crunch v1 job cancelled; each call is now one request to slurmctld.
    assert slurm.argvs("scancel") == [CTLD_REMOVE + ["12"], ["scancel", "--ctld", "13"], CTLD_TERM + ["11", "14"]]
    assert slurm.kill_requests == [1, 1, 1]
    assert len(slurm.version_probes) == 1
    assert result.ctld is True and result.scancel_version == release.rsplit(".", 1)[0]
    assert ids(result.terminated) == ["11", "14"] and ids(result.cancelled) == ["12", "13"]
    assert not result.failed and result.messages == []


def test_auto_asks_scancel_version_once_per_run_beside_the_first_squeue():
    slurm = fake_slurm("24.11.5")
    slurm.version_duration = 0.004  # shorter than the squeue: it costs the stop no time
    for number in range(1, 4):
        slurm.add(number, container(number), "RUNNING")  # never leave: TERM again and again
    result = run(slurm, names=[container(n) for n in range(1, 4)], timeout=35)
    assert len(slurm.calls("scancel")) >= 3 and len(slurm.version_probes) == 1
    assert slurm.version_probes[0].started == slurm.calls("squeue")[0].started
    assert slurm.relative_starts("scancel")[0] == pytest.approx(slurm.squeue_duration)
    assert all(argv[:2] == ["scancel", "--ctld"] for argv in slurm.argvs("scancel"))
    assert result.failed and len(result.left_running) == 3


def test_a_run_with_nothing_due_reports_no_release_and_leaves_no_probe_behind():
    nothing = fake_slurm("24.11.5")
    nothing.version_duration = 30.0  # still running when the squeue has answered
    quiet = run(nothing, names=[container(1)])
    (probe,) = nothing.version_probes
    assert probe.killed and quiet.ctld is None and quiet.scancel_version == ""
    assert not quiet.changed and not quiet.failed and nothing.clock.elapsed() < 1


def test_an_scancel_that_cannot_run_fails_the_run_only_when_an_scancel_is_due():
    idle = fake_slurm("24.11.5")
    idle.missing.add("scancel")
    assert not run(idle, names=[container(1)]).failed
    due = fake_slurm("24.11.5")
    due.missing.add("scancel")
    due.add(11, container(1), "RUNNING")
    with pytest.raises(CommandNotFoundError, match="cannot run scancel"):
        run(due, names=[container(1)])
    assert due.calls("scancel") == []


def test_never_and_always_force_either_path():
    never = fake_slurm("24.11.5")
    never.add(11, crunch_job(1), "RUNNING")
    result = run(never, names=[crunch_job(1)], ctld="never")
    assert never.argvs("scancel") == [["scancel", "11"]] and never.version_probes == []
    assert result.ctld is False and result.scancel_version == ""

    always = fake_slurm("22.05.8")
    always.add(11, crunch_job(1), "RUNNING")
    always.add(12, crunch_job(2), "RUNNING")
    result = run(always, names=[crunch_job(1), crunch_job(2)], ctld="always")
    # 22.05 takes --ctld but still sends one request per job.
    assert always.argvs("scancel") == [["scancel", "--ctld", "11", "12"]] and always.kill_requests == [2]
    assert result.ctld is True and not result.failed


def test_an_unreadable_version_means_todays_path_and_says_so():
    slurm = fake_slurm("24.11.5")
    slurm.version_output = ""
    slurm.version_returncode = 1
    slurm.add(11, crunch_job(1), "RUNNING")
    result = run(slurm, names=[crunch_job(1)])
    assert slurm.argvs("scancel") == [["scancel", "11"]]
    assert result.ctld is False and not result.failed
    assert result.messages == [
        "scancel --version named no Slurm release (scancel exited with status 1): one request per job, without --ctld"
    ]


def test_a_bad_choice_is_refused_before_any_command():
    with pytest.raises(CancelRequestError, match="ctld"):
        CancelRequest(names=[container(1)], ctld="sometimes")


def test_check_mode_predicts_the_path_with_one_version_probe_and_no_scancel():
    slurm = fake_slurm("24.11.5")
    slurm.add(11, container(1), "RUNNING")
    result = run(slurm, names=[container(1)], check_mode=True)
    assert slurm.calls("scancel") == [] and len(slurm.version_probes) == 1
    assert result.ctld is True and result.changed and ids(result.terminated) == ["11"]


# -- what scancel --ctld says, and its exit status ---------------------------------------


def test_jobs_refused_to_this_user_are_found_although_scancel_ctld_exits_0():
    # Root is never refused; a caller Slurm may refuse is an account coordinator, say, for
    # whom --ctld is safe only with an accounting database: the fake refuses root here.
    slurm = fake_slurm("24.11.5")
    slurm.add(11, crunch_job(1), "RUNNING", user="alice")
    slurm.add(12, crunch_job(2), "RUNNING", user="crunch")
    slurm.denied.add("11")
    result = run(slurm, caller=ROOT, names=[crunch_job(1), crunch_job(2)], timeout=30)
    (first,) = slurm.calls("scancel")
    assert first.returncode == 0 and "job id 11: Access/permission denied" in first.stderr
    assert ids(result.permission_denied) == ["11"] and ids(result.cancelled) == ["12"]
    assert result.failed and slurm.clock.elapsed() < 1
    assert "Slurm refused 1 of them to this user" in result.msg


def test_the_per_job_path_reports_the_same_refusal_with_its_exit_status():
    slurm = fake_slurm("22.05.8")
    slurm.add(11, crunch_job(1), "RUNNING", user="alice")
    slurm.denied.add("11")
    result = run(slurm, names=[crunch_job(1)], timeout=30)
    (first,) = slurm.calls("scancel")
    assert first.returncode == DENIED_EXIT
    assert ids(result.permission_denied) == ["11"] and len(slurm.calls("scancel")) == 1


def test_a_pending_job_that_started_meanwhile_is_sent_term_as_without_ctld():
    # scancel --ctld --state=PENDING prints "Job state RUNNING != filter state PENDING" for
    # it (the per-job path skips it silently): no failure, its TERM follows retry_delay later.
    slurm = fake_slurm("24.11.5")
    start = slurm.clock.start
    slurm.add(12, container(2), "PENDING", starts_at=start + 0.01, exits_after_signal=0.2)
    result = run(slurm, names=[container(2)])
    remove, term = slurm.calls("scancel")
    assert remove.argv == CTLD_REMOVE + ["12"] and "!= filter state PENDING" in remove.stderr
    assert term.argv == CTLD_TERM + ["12"]
    assert term.started - remove.ends == pytest.approx(2.0, abs=0.05)
    assert not result.failed and result.slurm_error == ""
    assert not any("refused" in message for message in result.messages)


def test_a_job_slurm_would_not_signal_is_tried_again_after_the_error_delay():
    slurm = fake_slurm("24.11.5")
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.1)
    slurm.script(
        "scancel",
        Scripted(
            stderr="scancel: error: Kill job error on job id 11: Job can not be altered now\n", takes_effect=False
        ),
    )
    result = run(slurm, names=[container(1)])
    first, second = slurm.calls("scancel")
    assert first.argv == second.argv == CTLD_TERM + ["11"]
    assert second.started - first.ends == pytest.approx(10.0, abs=0.05)
    assert not result.failed and slurm.jobs["11"].received == ["TERM+batch"]
    assert result.messages[0] == (
        "Slurm refused 1 of the 1 job(s) of an scancel --ctld: "
        "scancel: error: Kill job error on job id 11: Job can not be altered now"
    )


def test_a_hung_ctld_scancel_is_killed_after_one_request_bound_not_one_per_ten_ids():
    slurm = fake_slurm("24.11.5")
    for number in range(1, 501):
        slurm.add(number, crunch_job(number), "PENDING")
    slurm.script("scancel", Scripted(returncode=0, duration=1000.0))
    run(slurm, names=[crunch_job(n) for n in range(1, 501)], command_timeout=10, timeout=100)
    first = slurm.calls("scancel")[0]
    assert first.argv[1] == "--ctld"
    assert first.killed and first.ends - first.started == pytest.approx(10.0, abs=0.01)


# -- never --ctld for another user's jobs but as root ------------------------------------
# 24.05 to 25.11, src/slurmctld/job_mgr.c _apply_signal_jobs_filter: a REQUEST_KILL_JOBS
# naming another user's job, from a user neither root nor an operator, makes slurmctld look
# for account coordinators with the association lock held, and take it again when no
# accounting database filled that list: a deadlock (reproduced on Debian 13's 24.11.5).


def test_another_users_jobs_go_the_per_job_way_unless_the_caller_is_root():
    slurm = fake_slurm("24.11.5")
    slurm.add(11, container(1), "RUNNING", exits_after_signal=0.1)
    slurm.add(12, container(2), "RUNNING", user="alice", exits_after_signal=0.1)
    result = run(slurm, names=[container(1), container(2)])
    assert slurm.argvs("scancel") == [["scancel", "--signal=TERM", "--batch", "11", "12"]]
    assert slurm.kill_requests == [2] and not result.failed
    assert result.messages[0].startswith("jobs of another user named without --ctld (one request per job)")

    own = fake_slurm("24.11.5")
    own.add(11, container(1), "RUNNING", exits_after_signal=0.1)
    own.add(12, container(2), "RUNNING", user="alice")
    result = run(own, names=[container(1), container(2)], user="crunch")
    assert own.argvs("scancel") == [CTLD_TERM + ["11"]] and ids(result.skipped_other_user) == ["12"]

    as_root = fake_slurm("24.11.5")
    as_root.add(11, container(1), "RUNNING", exits_after_signal=0.1)
    as_root.add(12, container(2), "RUNNING", user="alice", exits_after_signal=0.1)
    result = run(as_root, caller=ROOT, names=[container(1), container(2)], ctld="always")
    assert as_root.argvs("scancel") == [CTLD_TERM + ["11", "12"]] and result.messages == []


def test_the_guard_holds_with_ctld_always_too():
    slurm = fake_slurm("25.11.0", "slurm")
    slurm.add(12, crunch_job(2), "PENDING", user="alice")
    run(slurm, names=[crunch_job(2)], ctld="always")
    assert slurm.argvs("scancel") == [["scancel", "12"]]


# -- the bounds stay ---------------------------------------------------------------------


def test_one_squeue_per_round_and_the_process_bound_hold_with_ctld():
    slurm = fake_slurm("24.11.5")
    slurm.add(1, container(1), "RUNNING", exits_after_signal=0.5)
    slurm.add(2, container(2), "RUNNING", exits_after_signal=0.5)
    for number in range(3, 1201):
        slurm.add(number, container(number), "PENDING")
    result = run(slurm, names=[container(n) for n in range(1, 1201)], max_job_ids_per_scancel=599)
    calls = slurm.calls("scancel")
    # max_job_ids_per_scancel does not cut a scancel that is one request.
    assert [call.argv for call in calls] == [
        CTLD_REMOVE + [str(n) for n in range(3, 1201)],
        CTLD_TERM + ["1", "2"],
    ]
    assert calls[1].started >= calls[0].ends
    assert slurm.kill_requests == [1, 1]
    assert all("--name" in " ".join(argv) for argv in slurm.argvs("squeue"))
    assert result.squeue_calls == len(slurm.calls("squeue")) and result.squeue_calls <= 12
    assert slurm.peak_alive <= 3 + 1 and not result.failed


def test_scancels_one_listing_found_due_go_without_another_listing_between_them():
    # 500 running crunch v1 jobs and 500 running containers, one scancel --ctld each: the
    # first ends before the token bucket (10 a second) lets the second start. A listing
    # between them would hold the second back for as long as slurmctld takes to answer it,
    # busy with the first 500.
    slurm = fake_slurm("24.11.5")
    slurm.scancel_duration = 0.03
    names = [crunch_job(number) for number in range(1, 501)] + [container(number) for number in range(501, 1001)]
    for number, name in enumerate(names, 1):
        slurm.add(number, name, "RUNNING", exits_after_signal=1.0)
    result = run(slurm, caller=ROOT, names=names, wait=False)
    assert slurm.argvs("scancel") == [
        ["scancel", "--ctld"] + [str(n) for n in range(1, 501)],
        CTLD_TERM + [str(n) for n in range(501, 1001)],
    ]
    first, second = slurm.calls("scancel")
    assert second.started == pytest.approx(first.started + 0.1)
    assert result.squeue_calls == 1 and len(slurm.version_probes) == 1
    assert len(result.terminated) == 500 and len(result.cancelled) == 500 and not result.failed


# -- how many ids one scancel names --------------------------------------------------------
# A scancel --ctld that is one request names each job Slurm refused and exits 0, so a
# failure stays with its ids; a second scancel only waits in slurmctld behind the first
# one's TERMs (1.1 s against 0.35 s for 1,000 running jobs on 24.11, bench/README.md).


def add_running_containers(slurm, count, first=1, user="crunch"):
    names = [container(number) for number in range(first, first + count)]
    for number, name in enumerate(names, first):
        slurm.add(number, name, "RUNNING", exits_after_signal=0.5, user=user)
    return names


def test_one_ctld_scancel_stops_a_thousand_running_jobs_whatever_max_job_ids_per_scancel():
    slurm = fake_slurm("24.11.5")
    names = add_running_containers(slurm, 1000)
    result = run(slurm, names=names, max_job_ids_per_scancel=500)
    assert slurm.argvs("scancel") == [CTLD_TERM + [str(n) for n in range(1, 1001)]]
    assert slurm.kill_requests == [1] and result.scancel_calls == 1
    assert len(result.terminated) == 1000 and not result.failed


def test_pending_jobs_go_first_in_one_ctld_scancel_of_their_own():
    slurm = fake_slurm("24.11.5")
    running = add_running_containers(slurm, 1000)
    pending = [container(number) for number in range(1001, 2001)]
    for number, name in enumerate(pending, 1001):
        slurm.add(number, name, "PENDING")
    result = run(slurm, names=running + pending)
    remove, term = slurm.calls("scancel")
    assert remove.argv == CTLD_REMOVE + [str(n) for n in range(1001, 2001)]
    assert term.argv == CTLD_TERM + [str(n) for n in range(1, 1001)]
    assert term.started >= remove.ends and not result.failed


@pytest.mark.parametrize(
    "release, ctld, flags",
    [
        ("22.05.8", "auto", []),
        ("24.11.5", "never", []),
        # 22.05 takes --ctld but still sends one request per job.
        ("22.05.8", "always", ["--ctld"]),
    ],
)
def test_one_request_per_job_keeps_max_job_ids_per_scancel(release, ctld, flags):
    slurm = fake_slurm(release)
    names = add_running_containers(slurm, 1000)
    result = run(slurm, names=names, ctld=ctld)
    term = ["scancel"] + flags + ["--signal=TERM", "--batch"]
    assert slurm.argvs("scancel") == [
        term + [str(n) for n in range(1, 501)],
        term + [str(n) for n in range(501, 1001)],
    ]
    assert slurm.kill_requests == [500, 500] and not result.failed


def test_more_ids_than_an_argv_takes_give_a_second_ctld_scancel():
    slurm = fake_slurm("24.11.5")
    names = add_running_containers(slurm, 10001)
    result = run(slurm, names=names)
    assert [len(argv) - len(CTLD_TERM) for argv in slurm.argvs("scancel")] == [10000, 1]
    assert slurm.kill_requests == [1, 1] and not result.failed


def test_another_users_jobs_as_non_root_keep_max_job_ids_per_scancel():
    slurm = fake_slurm("24.11.5")
    names = add_running_containers(slurm, 999) + add_running_containers(slurm, 1, first=1000, user="alice")
    result = run(slurm, names=names)
    # Cut as on the per-job path; a cut of only this user's jobs still gets --ctld.
    assert slurm.argvs("scancel") == [
        CTLD_TERM + [str(n) for n in range(1, 501)],
        ["scancel", "--signal=TERM", "--batch"] + [str(n) for n in range(501, 1001)],
    ]
    assert slurm.kill_requests == [1, 500] and not result.failed

    as_root = fake_slurm("24.11.5")
    names = add_running_containers(as_root, 999) + add_running_containers(as_root, 1, first=1000, user="alice")
    run(as_root, caller=ROOT, names=names)
    assert as_root.argvs("scancel") == [CTLD_TERM + [str(n) for n in range(1, 1001)]]


# -- arvados_fail_jobs cancels in batches: one version probe for the whole run ---------------


def test_the_fail_jobs_step_asks_the_release_once_for_all_its_batches(tmp_path):
    slurm = fake_slurm("24.11.5")
    clients = fake_client_directory(tmp_path)
    params = {name: spec.get("default") for name, spec in ALL_OPTIONS.items()}
    params.update(squeue_path=str(clients / "squeue"), scancel_path=str(clients / "scancel"))
    step = SlurmStep(
        params,
        cancel=lambda request: cancel_jobs(request, runner=slurm, clock=slurm.clock, environ=ENVIRON, caller=CRUNCH),
    )
    for batch in range(3):
        names = [crunch_job(10 * batch + n) for n in range(1, 4)]
        for number, name in enumerate(names, start=10 * batch + 1):
            slurm.add(number, name, "RUNNING")
        outcome = step(names, check_mode=False)
        assert outcome["ctld"] is True and outcome["scancel_version"] == "24.11"
    assert len(slurm.version_probes) == 1
    assert len(slurm.calls("scancel")) == 3 and all("--ctld" in argv[1:2][0] for argv in slurm.argvs("scancel"))
