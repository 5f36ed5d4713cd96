"""slurm_job_cancel against real Slurm, through real `ansible-playbook` runs (issue 3).

The jobs are named after containers; the tests of a plain cancel say `stop: cancel`, those
of the dispatcher's TERM-first stop (issue 10) come last.

Where each test runs:
- the shared lab, for what disturbs nobody: every job there is submitted `--hold`, so it
  stays PENDING and never takes a CPU another engineer's test is waiting for;
- a private lab (its own LAB_DIR and ports 55434/16837/16838, shared by this file's tests
  marked `own_lab`), for what needs running jobs on an otherwise empty node or breaks the
  lab: a sleeping Epilog, slurmctld or munged stopped.

Commands are counted twice: by the module (`squeue_calls`, `scancel_calls`) and by wrapper
scripts given as `squeue_path` / `scancel_path` that log every call and exec the real client.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import JOB_INFIX, new_uuid
from tests.integration.slurm_helpers import (
    MESSAGE_TIMEOUT,
    PrivateLab,
    Slurm,
    finished_calls,
    job_name,
    logged_calls,
    logging_client,
    run_module,
    run_playbook,
    start_playbook,
    wait_for,
)
from tests.integration.test_playbooks import CANCEL as CANCEL_PLAYBOOK
from tests.integration.test_playbooks import ansible_playbook

# How long ansible-playbook itself may add to a task (start-up, the result task) on this
# loaded 2-core machine; only used as an upper bound.
ANSIBLE_OVERHEAD = 20.0


def scancel_requests(log: Path) -> list[list[str]]:
    """The logged scancel calls that asked Slurm something: all but the one `--version` with
    which ctld=auto learns the release (checked on its own below)."""
    return [argv for argv in logged_calls(log) if argv != ["--version"]]


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def shared_slurm(lab_env) -> Iterator[Slurm]:
    slurm = Slurm(lab_env)
    yield slurm
    slurm.cancel_leftovers()


@pytest.fixture(scope="module")
def private_lab() -> Iterator[PrivateLab]:
    lab_dir = Path(tempfile.mkdtemp(prefix="arvlab-t3-", dir="/tmp"))
    lab_dir.chmod(0o755)
    lab = PrivateLab.create(lab_dir)
    try:
        lab.labctl("start")
        yield lab
    finally:
        lab.labctl("epilog-sleep", "0", check=False)
        lab.labctl("stop", check=False)
        shutil.rmtree(lab_dir, ignore_errors=True)


@pytest.fixture
def own_slurm(private_lab: PrivateLab) -> Iterator[Slurm]:
    """The private lab, up (a previous test may have stopped a daemon) and its queue empty."""
    private_lab.labctl("start")
    slurm = Slurm(private_lab.env)
    assert slurm.queue() == {}, "the private lab's queue is not empty"
    yield slurm
    slurm.cancel_leftovers()


def clients(tmp_path: Path) -> dict[str, Path]:
    squeue, squeue_log = logging_client(tmp_path / "clients", "squeue")
    scancel, scancel_log = logging_client(tmp_path / "clients", "scancel")
    return {"squeue_path": squeue, "scancel_path": scancel, "squeue_log": squeue_log, "scancel_log": scancel_log}


def paths(wrappers: dict[str, Path]) -> dict[str, str]:
    return {"squeue_path": str(wrappers["squeue_path"]), "scancel_path": str(wrappers["scancel_path"])}


def by_name(entries: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {entry["name"]: entry for entry in entries}


# ---------------------------------------------------------------- private lab


@pytest.mark.own_lab
def test_running_and_pending_jobs_are_cancelled_and_a_rerun_changes_nothing(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    running = [job_name() for _index in range(2)]
    pending = [job_name() for _index in range(4)]
    never_queued = job_name()
    ids = {}
    for name in running:
        ids[name] = own_slurm.submit(name)
    for name in running:
        own_slurm.wait_for_state(ids[name], "RUNNING")
    for name in pending:  # the node's 2 CPUs are taken
        ids[name] = own_slurm.submit(name)
    before = own_slurm.queue()
    assert {name: before[ids[name]].state for name in ids} == {
        **{name: "RUNNING" for name in running},
        **{name: "PENDING" for name in pending},
    }

    wrappers = clients(tmp_path)
    args = dict(name=running + pending + [never_queued], stop="cancel", **paths(wrappers))
    (first, rerun), _wall = run_playbook(private_lab.env, tmp_path, [{"args": args, "diff": True}, {"args": args}])

    assert not first.get("failed"), first
    assert first["changed"] is True
    assert by_name(first["cancelled"]) == {
        name: {"name": name, "job_id": ids[name], "state_before": before[ids[name]].state, "user": "root"}
        for name in running + pending
    }
    assert first["already_absent"] == [never_queued]
    assert first["remaining"] == []
    assert own_slurm.queue(ids) == {}
    assert sorted(first["diff"]["before"].splitlines()) == sorted(
        "%s %s %s root" % (ids[name], name, before[ids[name]].state) for name in ids
    )
    assert first["diff"]["after"] == ""
    # All six in one scancel, the pending ones first (their CPUs-to-be are not freed).
    scancels = scancel_requests(wrappers["scancel_log"])
    assert len(scancels) == first["scancel_calls"] == 1
    assert set(scancels[0][:4]) == {ids[name] for name in pending}
    assert set(scancels[0][4:]) == {ids[name] for name in running}
    assert all(own_slurm.final_state(ids[name]) == "CANCELLED" for name in ids)

    assert not rerun.get("failed"), rerun
    assert rerun["changed"] is False
    assert rerun["scancel_calls"] == 0 and rerun["cancelled"] == []
    assert rerun["squeue_calls"] == 1
    assert sorted(rerun["already_absent"]) == sorted(args["name"])
    assert len(scancel_requests(wrappers["scancel_log"])) == 1
    assert len(logged_calls(wrappers["squeue_log"])) == first["squeue_calls"] + 1


@pytest.mark.own_lab
def test_a_job_that_ends_during_the_grace_period_costs_no_scancel(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    finishing, lingering = job_name(), job_name()
    gate = tmp_path / "gate"
    gate.touch(mode=0o644)
    with open(gate) as held:
        # The job blocks on this lock: it ends when the test lets it, not after a guessed time.
        fcntl.flock(held, fcntl.LOCK_EX)
        finishing_id = own_slurm.submit(finishing, "exec flock %s true" % gate)
        lingering_id = own_slurm.submit(lingering)
        own_slurm.wait_for_state(finishing_id, "RUNNING")
        wrappers = clients(tmp_path)
        run = start_playbook(
            private_lab.env,
            tmp_path,
            [
                {
                    "args": dict(
                        name=[finishing, lingering], grace_period=6, retry_delay=0.5, stop="cancel", **paths(wrappers)
                    ),
                    "diff": True,
                }
            ],
        )
        # Let the job end once the module has seen it queued.
        assert wait_for(lambda: finished_calls(wrappers["squeue_log"]) >= 1, 60), "the module never listed the queue"
        fcntl.flock(held, fcntl.LOCK_UN)
    assert wait_for(lambda: finishing_id not in own_slurm.queue(), own_slurm.timing.end_bound)
    (result,) = run.finish().results

    assert not result.get("failed"), result
    assert finishing_id in result["diff"]["before"]  # seen queued, then left on its own
    assert [entry["job_id"] for entry in result["cancelled"]] == [lingering_id]
    assert result["already_absent"] == []
    assert result["scancel_calls"] == 1
    assert scancel_requests(wrappers["scancel_log"]) == [[lingering_id]]
    assert own_slurm.final_state(finishing_id) == "COMPLETED"
    assert own_slurm.final_state(lingering_id) == "CANCELLED"
    assert own_slurm.queue([finishing, lingering]) == {}


@pytest.mark.own_lab
def test_a_job_held_in_completing_by_the_epilog_is_waited_for_not_cancelled_again(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    private_lab.labctl("epilog-sleep", "8")
    try:
        running, finished = job_name(), job_name()
        running_id = own_slurm.submit(running)
        own_slurm.wait_for_state(running_id, "RUNNING")
        finished_id = own_slurm.submit(finished, "exec true")
        own_slurm.wait_for_state(finished_id, "COMPLETING")
        wrappers = clients(tmp_path)
        # retry_delay 0.5 s: a loop that re-sends scancel while the job is still queued
        # would send about 16 during the 8 s Epilog.
        result = run_module(
            private_lab.env,
            tmp_path,
            dict(
                name=[running, finished], retry_delay=0.5, log_interval=30, timeout=60, stop="cancel", **paths(wrappers)
            ),
            diff=True,
        )
    finally:
        private_lab.labctl("epilog-sleep", "0")

    assert not result.get("failed"), result
    assert "%s %s COMPLETING root" % (finished_id, finished) in result["diff"]["before"], (
        "the job left COMPLETING before the module looked (machine too slow?): %s" % result
    )
    # The running job got one scancel, then sat in COMPLETING for the Epilog's 8 s.
    assert scancel_requests(wrappers["scancel_log"]) == [[running_id]]
    assert result["scancel_calls"] == 1
    assert [entry["job_id"] for entry in result["cancelled"]] == [running_id]
    assert result["changed"] is True and result["remaining"] == []
    # Waited for: both gone when the task returned.
    assert own_slurm.queue([running, finished]) == {}
    # One "still in queue" message per job per log_interval, none for the job never cancelled.
    lingering = [message for message in result["messages"] if "still in queue" in message]
    # By the message's job id: a bare id such as "2" is also in every UUID ("dz642").
    assert len([message for message in lingering if message.startswith("Slurm job %s " % running_id)]) == 1
    assert not [message for message in lingering if message.startswith("Slurm job %s " % finished_id)]
    assert result["squeue_calls"] == len(logged_calls(wrappers["squeue_log"]))


@pytest.mark.own_lab
def test_munged_down_fails_within_the_deadline_with_slurms_error(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    name = job_name()
    job_id = own_slurm.submit(name, hold=True)
    private_lab.stop_service("munged")
    try:
        result, wall = run_playbook(private_lab.env, tmp_path, [{"args": dict(name=[name], timeout=4, stop="cancel")}])
        result = result[0]
    finally:
        private_lab.labctl("start")

    assert result.get("failed") is True, result
    assert "Munge encode failed" in result["msg"], result["msg"]
    assert result["remaining"] == [{"name": name, "job_id": None, "state": "UNKNOWN", "user": None}]
    assert result["scancel_calls"] == 0
    assert result["squeue_calls"] >= 2  # it kept trying ...
    assert len([m for m in result["messages"] if "squeue failed" in m]) == 1  # ... quietly
    assert result["elapsed"] <= 4 + MESSAGE_TIMEOUT + 2
    assert wall <= 4 + MESSAGE_TIMEOUT + ANSIBLE_OVERHEAD
    assert job_id in own_slurm.queue()  # untouched, as far as Slurm is concerned


@pytest.mark.own_lab
def test_slurmctld_down_fails_within_the_deadline_with_slurms_error(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    name = job_name()
    own_slurm.submit(name, hold=True)
    private_lab.stop_service("slurmctld")
    try:
        result, wall = run_playbook(private_lab.env, tmp_path, [{"args": dict(name=[name], timeout=2, stop="cancel")}])
        result = result[0]
    finally:
        # slurmctld starts with -c: the held job is forgotten, the lab is clean again.
        private_lab.labctl("start")

    assert result.get("failed") is True, result
    assert "Unable to contact slurm controller" in result["msg"], result["msg"]
    assert "Unable to contact slurm controller" in result["slurm_error"]
    assert result["remaining"] == [{"name": name, "job_id": None, "state": "UNKNOWN", "user": None}]
    assert result["scancel_calls"] == 0
    # squeue gives up after MessageTimeout - 1 s; the module must not add another round.
    assert result["elapsed"] <= 2 + MESSAGE_TIMEOUT + 2
    assert wall <= 2 + MESSAGE_TIMEOUT + ANSIBLE_OVERHEAD


# ---------------------------------------------------------------- shared lab


def test_check_mode_cancels_nothing_and_predicts_the_change(shared_slurm: Slurm, lab_env, tmp_path: Path):
    queued, absent = job_name(), [job_name(), job_name()]
    job_id = shared_slurm.submit(queued, hold=True)
    wrappers = clients(tmp_path)
    (would, nothing), _wall = run_playbook(
        lab_env,
        tmp_path,
        [
            {"args": dict(name=[queued] + absent[:1], **paths(wrappers)), "check": True, "diff": True},
            {"args": dict(name=absent, **paths(wrappers)), "check": True},
        ],
    )

    assert not would.get("failed"), would
    assert would["changed"] is True
    assert would["cancelled"] == [{"name": queued, "job_id": job_id, "state_before": "PENDING", "user": "root"}]
    assert would["already_absent"] == absent[:1]
    assert would["squeue_calls"] == 1 and would["scancel_calls"] == 0
    assert would["diff"]["before"] == "%s %s PENDING root\n" % (job_id, queued)
    assert would["diff"]["after"] == ""
    assert shared_slurm.queue([queued])[job_id].state == "PENDING"

    assert not nothing.get("failed"), nothing
    assert nothing["changed"] is False
    assert nothing["squeue_calls"] == 1 and nothing["scancel_calls"] == 0
    assert sorted(nothing["already_absent"]) == sorted(absent)
    assert scancel_requests(wrappers["scancel_log"]) == []
    assert len(logged_calls(wrappers["squeue_log"])) == 2


def test_another_users_job_of_the_same_name_survives_user(shared_slurm: Slurm, lab_env, tmp_path: Path):
    name = job_name()
    theirs = shared_slurm.submit(name, hold=True, user="nobody")
    ours = shared_slurm.submit(name, hold=True)
    wrappers = clients(tmp_path)
    args = dict(name=[name], user="root", stop="cancel", **paths(wrappers))
    (first, rerun), _wall = run_playbook(lab_env, tmp_path, [{"args": args}, {"args": args}])

    assert not first.get("failed"), first
    assert first["changed"] is True
    assert [entry["job_id"] for entry in first["cancelled"]] == [ours]
    skipped = {"name": name, "job_id": theirs, "state": "PENDING", "user": "nobody"}
    assert first["skipped_other_user"] == [skipped]
    assert scancel_requests(wrappers["scancel_log"]) == [[ours]]
    assert list(shared_slurm.queue([name])) == [theirs]

    assert not rerun.get("failed"), rerun
    assert rerun["changed"] is False and rerun["scancel_calls"] == 0
    assert rerun["skipped_other_user"] == [skipped]
    assert rerun["already_absent"] == []  # the name is queued, just not ours

    shared_slurm.run("scancel", theirs)
    assert wait_for(lambda: not shared_slurm.queue([name]), shared_slurm.timing.end_bound)


# (name, name_pattern): the last three are refused even by a pattern that lets anything through.
DANGEROUS_NAMES = [
    ("x; rm -rf /", None),
    ("a,b", None),
    ("x; rm -rf /", ".*"),
    ("a,b", ".*"),
    ("zzzzz-dz642-aaaaaaaaaaaaaaa\n", ".*"),
]


def test_a_dangerous_name_is_refused_and_nothing_is_cancelled(shared_slurm: Slurm, lab_env, tmp_path: Path):
    mine = job_name()
    job_id = shared_slurm.submit(mine, hold=True)
    wrappers = clients(tmp_path)
    tasks = []
    for bad_name, name_pattern in DANGEROUS_NAMES:
        args = dict(name=[mine, bad_name], **paths(wrappers))
        if name_pattern is not None:
            args["name_pattern"] = name_pattern
        tasks.append({"args": args})
    # One playbook, one task per name: ansible-playbook's start-up is the slow part.
    results, _wall = run_playbook(lab_env, tmp_path, tasks)

    for (bad_name, name_pattern), result in zip(DANGEROUS_NAMES, results, strict=True):
        case = "name %r, name_pattern %r: %s" % (bad_name, name_pattern, result)
        assert result.get("failed") is True, case
        assert repr(bad_name) in result["msg"], case
        assert result.get("scancel_calls", 0) == 0 and not result.get("cancelled"), case
    assert logged_calls(wrappers["squeue_log"]) == []  # refused before any command
    assert scancel_requests(wrappers["scancel_log"]) == []
    assert shared_slurm.queue([mine])[job_id].state == "PENDING"


def test_a_pattern_that_backtracks_without_end_is_stopped_at_timeout(shared_slurm: Slurm, lab_env, tmp_path: Path):
    # Issue 34, Low 9: name_pattern (a+)+$ spun past the module's timeout on a name of 40
    # letters and a last one that fails it (2^40 steps). The module and the playbook alike.
    mine = job_name()
    job_id = shared_slurm.submit(mine, hold=True)
    wrappers = clients(tmp_path)
    spinner = "a" * 40 + "b"
    args = dict(name=[spinner, mine], name_pattern="(a+)+$", timeout=2, **paths(wrappers))
    began = time.monotonic()
    result = run_module(lab_env, tmp_path, args)
    elapsed = time.monotonic() - began
    assert result.get("failed") is True, result
    assert result["msg"].startswith(
        "name_pattern '(a+)+$' took longer than timeout 2 s to match the job name %r, so nothing was asked of Slurm"
        % spinner
    ), result["msg"]
    assert elapsed < 2 + ANSIBLE_OVERHEAD, elapsed
    assert logged_calls(wrappers["squeue_log"]) == []
    assert scancel_requests(wrappers["scancel_log"]) == []
    assert shared_slurm.queue([mine])[job_id].state == "PENDING"


def test_a_missing_or_unusable_client_fails_at_once_with_a_clear_message(shared_slurm: Slurm, lab_env, tmp_path: Path):
    name = job_name()
    job_id = shared_slurm.submit(name, hold=True)
    missing = tmp_path / "no-such-dir" / "squeue"
    not_executable = tmp_path / "scancel"
    not_executable.write_text("#!/bin/sh\nexit 0\n")
    not_executable.chmod(0o644)
    results, wall = run_playbook(
        lab_env,
        tmp_path,
        [
            {"args": dict(name=[name], squeue_path=str(missing))},
            {"args": dict(name=[name], scancel_path=str(not_executable))},
            {"args": dict(name=[name], squeue_path=str(tmp_path))},  # a directory
        ],
    )
    for result, path, reason in zip(
        results,
        (missing, not_executable, tmp_path),
        ("No such file or directory", "Permission denied", "Permission denied"),
        strict=True,
    ):
        assert result.get("failed") is True, result
        assert str(path) in result["msg"] and reason in result["msg"], result["msg"]
    # Three tasks with the default 120 s timeout: none of them waited for it.
    assert wall < 120
    assert shared_slurm.queue([name])[job_id].state == "PENDING"


def test_permanent_slurm_errors_fail_at_once_and_never_claim_a_cancel(shared_slurm: Slurm, lab_env, tmp_path: Path):
    """A bad --clusters, /bin/false as scancel, /bin/true or a silent script as squeue: no
    retry can mend them, so each task ends at once (not after its 120 s timeout), says so
    with the option and its value, and never says it cancelled what is still queued."""
    name = job_name()
    job_id = shared_slurm.submit(name, hold=True)
    silent = tmp_path / "silent-squeue"
    silent.write_text("#!/bin/sh\nexit 0\n")
    silent.chmod(0o755)
    cases = [
        (
            dict(clusters="a"),
            "squeue refused its command line: squeue: error: Problem talking to database",
            "clusters=a",
        ),
        (
            dict(scancel_path="/bin/false"),
            "scancel exited with status 1 and printed nothing",
            "scancel_path=/bin/false",
        ),
        (
            dict(squeue_path="/bin/true"),
            "squeue exited 0 without the line JOBID|STATE|USER|NAME",
            "squeue_path=/bin/true",
        ),
        (dict(squeue_path=str(silent)), "squeue exited 0 without the line JOBID|STATE|USER|NAME", str(silent)),
    ]
    queue_before = shared_slurm.queue([name])
    results, wall = run_playbook(
        lab_env,
        tmp_path,
        [{"args": dict(name=[name], stop="cancel", timeout=120, **extra)} for extra, _reason, _setting in cases],
    )

    for (extra, reason, setting), result in zip(cases, results, strict=True):
        case = "%s: %s" % (extra, result)
        assert result.get("failed") is True, case
        assert result["msg"].startswith(reason), case
        assert setting in result["msg"] and "not tried again" in result["msg"], case
        assert result["cancelled"] == [] and result["changed"] is False, case
        assert "cancelled 1" not in result["msg"], case
        assert result["elapsed"] < 10, case
    # Four tasks of a 120 s timeout each: none waited for it.
    assert wall < 120
    assert shared_slurm.queue([name]) == queue_before
    assert queue_before[job_id].state == "PENDING"


def test_a_job_slurm_refuses_to_the_user_is_reported_at_once_and_not_tried_again(
    shared_slurm: Slurm, lab_env, tmp_path: Path
):
    # Issue 26: as a user Slurm refuses, the task said "cancelled" and sent the same scancel
    # until its timeout. Here scancel runs as nobody on root's job.
    name = job_name()
    job_id = shared_slurm.submit(name, hold=True)
    squeue, _squeue_log = logging_client(tmp_path / "clients", "squeue")
    scancel, scancel_log = logging_client(tmp_path / "clients", "scancel", run_as="nobody")
    args = dict(name=[name], squeue_path=str(squeue), scancel_path=str(scancel))
    (result,), wall = run_playbook(lab_env, tmp_path, [{"args": args}])

    assert result.get("failed") is True, result
    assert [(job["job_id"], job["user"]) for job in result["permission_denied"]] == [(job_id, "root")]
    assert result["remaining"] == result["permission_denied"]
    assert result["cancelled"] == [] and result["changed"] is False
    assert re.match(r"no Slurm job cancelled; 1 still queued after [0-9]+\.[0-9] s: ", result["msg"]), result["msg"]
    assert (
        "Slurm refused 1 of them to this user (Access/permission denied), not tried again: %s (user root)" % (job_id)
        in result["msg"]
    )
    # One scancel (the pending job's removal), refused; the task did not wait for its 240 s.
    assert scancel_requests(scancel_log) == [["--state=PENDING", job_id]]
    assert wall < 120
    assert shared_slurm.queue([name])[job_id].state == "PENDING"


# ---------------------------------------------------------------- the dispatcher's stop

# Batch scripts that tell a TERM-first stop from a plain cancel (LAB.md): a child writes
# one word to the file $1 when it gets TERM, another when it gets USR1. `$1.ready` appears
# once every trap is set, so no signal can come too early.
CHILD_WRITING_ITS_WORD = """#!/bin/bash
( trap 'echo TERM >> "$1"; exit 0' TERM; trap 'echo USR1 >> "$1"; exit 0' USR1
  while :; do sleep 0.1; done ) &
child=$!
"""
TRAPS_TERM = (
    CHILD_WRITING_ITS_WORD
    + """# On TERM the batch shell hands its child USR1 and leaves, as crunch-run stops its container.
# The pause lets a TERM that Slurm sends to every process reach the child first.
trap 'sleep 0.5; kill -USR1 $child; wait $child; exit 0' TERM
touch "$1.ready"
wait $child
"""
)
IGNORES_TERM = (
    CHILD_WRITING_ITS_WORD
    + """trap '' TERM
touch "$1.ready"
while :; do wait $child && exit 0; done
"""
)


def script(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def words(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def crunch_v1_name() -> str:
    return new_uuid("zzzzz", JOB_INFIX)


def traps_ignores_and_pending(own_slurm: Slurm, tmp_path: Path):
    """Two running containers' jobs, one whose batch shell traps TERM and one that ignores it,
    and a pending one: (their names, name -> job id, name -> the file its child writes to)."""
    traps, ignores, pending = job_name(), job_name(), job_name()
    traps_script = script(tmp_path, "traps.sh", TRAPS_TERM)
    ignores_script = script(tmp_path, "ignores.sh", IGNORES_TERM)
    out = {name: tmp_path / ("%s.words" % name) for name in (traps, ignores, pending)}
    ids = {
        traps: own_slurm.submit(traps, "exec %s %s" % (traps_script, out[traps])),
        ignores: own_slurm.submit(ignores, "exec %s %s" % (ignores_script, out[ignores])),
    }
    for name in (traps, ignores):
        own_slurm.wait_for_state(ids[name], "RUNNING")
    ids[pending] = own_slurm.submit(pending, "exec %s %s" % (traps_script, out[pending]))
    own_slurm.wait_for_state(ids[pending], "PENDING")  # the node's 2 CPUs are taken
    # A RUNNING job's batch script starts once slurmd has launched it: a start, as bounded.
    launched = own_slurm.timing.start_bound
    assert wait_for(lambda: all(Path("%s.ready" % out[name]).exists() for name in (traps, ignores)), launched)
    return (traps, ignores, pending), ids, out


def term_calls(log: Path, job_id: str) -> list[list[str]]:
    return [call for call in logged_calls(log) if call[:2] == ["--signal=TERM", "--batch"] and job_id in call[2:]]


# 3.2.1 (the same at 1.4.3 and 2.7.4) services/crunch-dispatch-slurm/slurm.go, Cancel: a running
# job only ever gets `scancel --batch --signal=TERM`, never a plain cancel ("would kill
# crunch-run without stopping the container"); crunch-dispatch-slurm.go's tracker sends it
# again after every squeue poll (squeue.go, HasUUID) while the job stays.
@pytest.mark.own_lab
def test_by_default_a_container_that_ignores_term_gets_term_again_and_is_reported_not_cancelled(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    (traps, ignores, pending), ids, out = traps_ignores_and_pending(own_slurm, tmp_path)

    wrappers = clients(tmp_path)
    args = dict(name=[traps, ignores, pending], term_interval=2, timeout=15, log_interval=300, **paths(wrappers))
    result = run_module(private_lab.env, tmp_path, args)

    # Reported, and the task failed: the job is still there, nothing of it was killed.
    assert result.get("failed") is True, result
    assert [entry["job_id"] for entry in result["remaining"]] == [ids[ignores]]
    (left,) = result["left_running"]
    assert (left["job_id"], left["name"], left["state"]) == (ids[ignores], ignores, "RUNNING")
    assert "1 left running, not cancelled" in result["msg"] and "after_term=cancel" in result["msg"]
    assert [entry["job_id"] for entry in result["cancelled"]] == [ids[pending]]
    # Every scancel of a running job was a TERM to its batch step; the one that ignored it got
    # TERM again, 2 s apart at least, until the timeout; never a plain cancel.
    calls = scancel_requests(wrappers["scancel_log"])
    assert calls[0] == ["--state=PENDING", ids[pending]]
    assert all(call[:2] == ["--signal=TERM", "--batch"] for call in calls[1:]), calls
    again = term_calls(wrappers["scancel_log"], ids[ignores])
    assert len(again) >= 3 and 2 <= left["terms"] <= len(again)
    assert sorted(again[0][2:]) == sorted([ids[traps], ids[ignores]]) and all(
        c[2:] == [ids[ignores]] for c in again[1:]
    )
    assert any("sent TERM again" in message and ids[ignores] in message for message in result["messages"])
    # The job that ignores TERM is still running, and its child heard nothing: no TERM from
    # Slurm to every process, which a plain cancel would have sent.
    assert own_slurm.queue([ignores])[ids[ignores]].state == "RUNNING"
    assert words(out[ignores]) == []
    # The one that traps TERM stopped as crunch-run does: its batch shell handed the child USR1.
    assert words(out[traps]) == ["USR1"] and own_slurm.final_state(ids[traps]) == "COMPLETED"
    assert words(out[pending]) == [] and own_slurm.final_state(ids[pending]) == "CANCELLED"


@pytest.mark.own_lab
def test_with_after_term_cancel_a_container_that_ignores_term_is_cancelled_after_the_grace(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    (traps, ignores, pending), ids, out = traps_ignores_and_pending(own_slurm, tmp_path)

    wrappers = clients(tmp_path)
    args = dict(
        name=[traps, ignores, pending],
        after_term="cancel",
        terminate_grace=4,
        retry_delay=0.5,
        log_interval=300,
        **paths(wrappers),
    )
    (first, rerun), _wall = run_playbook(private_lab.env, tmp_path, [{"args": args}, {"args": args}])

    assert not first.get("failed"), first
    # The pending job is removed first, then both running ones get TERM in one call, and
    # only the one still queued after the grace is cancelled outright.
    removal, term, cancel = scancel_requests(wrappers["scancel_log"])
    assert removal == ["--state=PENDING", ids[pending]]
    assert term[:2] == ["--signal=TERM", "--batch"] and sorted(term[2:]) == sorted([ids[traps], ids[ignores]])
    assert cancel == [ids[ignores]]
    assert sorted(entry["job_id"] for entry in first["terminated"]) == sorted([ids[traps], ids[ignores]])
    assert sorted(entry["job_id"] for entry in first["cancelled"]) == sorted([ids[pending], ids[ignores]])
    assert any(
        "still queued 4 s after their TERM, cancelled outright: %s" % ids[ignores] in message
        for message in first["messages"]
    )
    assert first["remaining"] == [] and own_slurm.queue(ids) == {}
    # The TERM reached the batch shell only: the child heard USR1 from it, not Slurm's TERM.
    assert words(out[traps]) == ["USR1"]
    assert own_slurm.final_state(ids[traps]) == "COMPLETED"
    # The job that ignored its TERM was cancelled: now Slurm signalled every process.
    assert words(out[ignores]) == ["TERM"]
    assert own_slurm.final_state(ids[ignores]) == "CANCELLED"
    # The pending job never ran and got no signal.
    assert words(out[pending]) == [] and not Path("%s.ready" % out[pending]).exists()
    assert own_slurm.final_state(ids[pending]) == "CANCELLED"

    assert not rerun.get("failed"), rerun
    assert rerun["changed"] is False and rerun["scancel_calls"] == 0
    assert len(scancel_requests(wrappers["scancel_log"])) == 3


@pytest.mark.own_lab
def test_crunch_v1_jobs_are_cancelled_plainly_under_auto_and_check_mode_predicts_both_kinds(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    crunch_job, container = crunch_v1_name(), job_name()
    traps_script = script(tmp_path, "traps.sh", TRAPS_TERM)
    out = {name: tmp_path / ("%s.words" % name) for name in (crunch_job, container)}
    ids = {name: own_slurm.submit(name, "exec %s %s" % (traps_script, out[name])) for name in (crunch_job, container)}
    for name in ids:
        own_slurm.wait_for_state(ids[name], "RUNNING")
    launched = own_slurm.timing.start_bound
    assert wait_for(lambda: all(Path("%s.ready" % path).exists() for path in out.values()), launched)

    wrappers = clients(tmp_path)
    args = dict(name=[crunch_job, container], **paths(wrappers))
    (would, done), _wall = run_playbook(
        private_lab.env, tmp_path, [{"args": args, "check": True, "diff": True}, {"args": args}]
    )

    assert not would.get("failed"), would
    assert would["changed"] is True and would["scancel_calls"] == 0
    assert [entry["job_id"] for entry in would["terminated"]] == [ids[container]]
    assert [entry["job_id"] for entry in would["cancelled"]] == [ids[crunch_job]]
    assert would["diff"]["after"] == ""

    assert not done.get("failed"), done
    assert sorted(scancel_requests(wrappers["scancel_log"])) == sorted(
        [[ids[crunch_job]], ["--signal=TERM", "--batch", ids[container]]]
    )
    assert [entry["job_id"] for entry in done["cancelled"]] == [ids[crunch_job]]
    assert [entry["job_id"] for entry in done["terminated"]] == [ids[container]]
    assert words(out[crunch_job]) == ["TERM"]  # Slurm signalled every process of the job
    assert words(out[container]) == ["USR1"]  # only the batch shell heard the TERM
    assert own_slurm.final_state(ids[crunch_job]) == "CANCELLED"
    assert own_slurm.final_state(ids[container]) == "COMPLETED"


def test_the_cancel_playbook_passes_stop_and_terminate_grace_on(shared_slurm: Slurm, lab_env, tmp_path: Path):
    container, crunch_job = job_name(), crunch_v1_name()
    ids = {name: shared_slurm.submit(name, hold=True) for name in (container, crunch_job)}
    wrappers = clients(tmp_path)
    common = {"cancel_uuids": [container, crunch_job], "recover_scancel_path": str(wrappers["scancel_path"])}

    refused = ansible_playbook(
        lab_env,
        CANCEL_PLAYBOOK,
        dict(common, cancel_stop="terminate", cancel_after_term="cancel", cancel_terminate_grace=5, cancel_timeout=3),
        expect_rc=2,
    )
    assert "timeout 3 ends the call before terminate_grace 5 is over" in refused.stdout
    refused = ansible_playbook(lab_env, CANCEL_PLAYBOOK, dict(common, cancel_term_interval=0.5), expect_rc=2)
    assert "term_interval must be at least 1, got 0.5" in refused.stdout
    assert scancel_requests(wrappers["scancel_log"]) == []

    run = ansible_playbook(lab_env, CANCEL_PLAYBOOK, dict(common, cancel_stop="terminate"))
    # stop=terminate: the crunch v1 job too is removed as a pending container's job would be.
    (removal,) = scancel_requests(wrappers["scancel_log"])
    assert removal[0] == "--state=PENDING" and sorted(removal[1:]) == sorted(ids.values())
    assert run.changed == 1
    assert run.summary()[0].startswith("2 Slurm jobs cancelled: ")
    assert run.summary()[-1] == "0 Slurm jobs sent TERM"
    assert shared_slurm.queue(ids) == {}


# 3.2.1 services/crunch-dispatch-slurm/slurm.go sends a suspended job `--batch --signal=TERM
# --state=suspended`, which Slurm 22.05 refuses: the dispatcher never ends a suspended job.
@pytest.mark.own_lab
def test_a_suspended_container_job_is_left_and_reported_by_default_and_cancelled_with_after_term_cancel(
    own_slurm: Slurm, private_lab: PrivateLab, tmp_path: Path
):
    name = job_name()
    job_id = own_slurm.submit(name)
    own_slurm.wait_for_state(job_id, "RUNNING")
    own_slurm.run("scontrol", "suspend", job_id)
    own_slurm.wait_for_state(job_id, "SUSPENDED")
    wrappers = clients(tmp_path)
    (would, left, cancelled), wall = run_playbook(
        private_lab.env,
        tmp_path,
        [
            {"args": dict(name=[name], **paths(wrappers)), "check": True},
            {"args": dict(name=[name], **paths(wrappers))},
            {"args": dict(name=[name], after_term="cancel", **paths(wrappers))},
        ],
    )

    for result in (would, left):
        assert result.get("failed") is True, result
        assert [(entry["job_id"], entry["terms"]) for entry in result["left_running"]] == [(job_id, 0)]
        assert "suspended: no TERM reaches it" in result["msg"]
    # Reported at once, not after the default 240 s deadline.
    assert wall < 120
    assert not cancelled.get("failed"), cancelled
    assert scancel_requests(wrappers["scancel_log"]) == [[job_id]]
    assert [entry["job_id"] for entry in cancelled["cancelled"]] == [job_id]
    assert cancelled["terminated"] == [] and cancelled["remaining"] == []
    assert own_slurm.final_state(job_id) == "CANCELLED"


# ---------------------------------------------------------------- ctld (issue 23)


def test_ctld_auto_keeps_one_request_per_job_on_22_05_and_always_forces_the_flag(
    shared_slurm: Slurm, lab_env, tmp_path: Path
):
    # 22.05's scancel takes --ctld but still sends one REQUEST_KILL_JOB per job
    # (src/scancel/scancel.c at slurm-22-05-8-1 has no _ctld_signal_jobs): auto must not
    # pick it there, and learns so from one `scancel --version` per task.
    auto_names, always_names = [job_name(), job_name()], [job_name(), job_name()]
    ids = {name: shared_slurm.submit(name, hold=True) for name in auto_names + always_names}
    wrappers = clients(tmp_path)
    (auto, forced, never), _wall = run_playbook(
        lab_env,
        tmp_path,
        [
            {"args": dict(name=auto_names, **paths(wrappers))},
            {"args": dict(name=always_names, ctld="always", **paths(wrappers))},
            {"args": dict(name=[job_name()], ctld="never", **paths(wrappers))},
        ],
    )

    assert not auto.get("failed") and not forced.get("failed") and not never.get("failed"), (auto, forced, never)
    assert (auto["ctld"], auto["scancel_version"]) == (False, "22.05")
    assert (forced["ctld"], forced["scancel_version"]) == (True, "22.05")
    assert (never["ctld"], never["scancel_version"]) == (None, "")
    calls = logged_calls(wrappers["scancel_log"])
    assert calls[0] == ["--version"] and calls[2] == ["--version"] and len(calls) == 4
    assert calls[1][0] == "--state=PENDING" and sorted(calls[1][1:]) == sorted(ids[name] for name in auto_names)
    assert calls[3][:2] == ["--ctld", "--state=PENDING"]
    assert sorted(calls[3][2:]) == sorted(ids[name] for name in always_names)
    assert shared_slurm.queue(ids) == {}
