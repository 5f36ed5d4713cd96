"""lab/pgid_reuse_probe.py: how a trace's SIGKILLs are read, and how a bystander's end is told."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter

from lab import pgid_reuse_probe as probe

# Lines as tracefs prints them (copied from a run's trace, numbers changed).
REAP_300 = "      slurmstepd-1001 [001] ..... 100.000000: sys_wait4 -> 0x12c"
FORK = "          python-2000 [000] ..... 100.000500: sched_process_fork: comm=python pid=2000 child_comm=python child_pid=2001"
KILLPG_300 = "      slurmstepd-1001 [001] ..... 100.001500: sys_kill(pid: 0xfffffffffffffed4, sig: 9)"
GONE = "      slurmstepd-1001 [001] ..... 100.001502: sys_kill -> 0xfffffffffffffffd"
REACHED = "      slurmstepd-1001 [001] ..... 100.001502: sys_kill -> 0x0"
BYSTANDER_KILLED = "      slurmstepd-1001 [001] d..1. 100.001501: signal_generate: sig=9 errno=0 code=0 comm=pgid-bystander pid=2001 grp=1 res=0"


def test_a_killpg_after_the_group_is_gone_is_counted_with_its_delay_and_the_pids_made_meanwhile():
    summary = probe.summarize_kills("\n".join([REAP_300, FORK, FORK, KILLPG_300, GONE]))

    assert summary["slurm_killpg_sigkill"] == {"slurmstepd: no such group": 1}
    assert summary["killpg_after_reap_ms"] == {"n": 1, "median": 1.5, "p99": 1.5, "max": 1.5}
    assert summary["new_pids_between_reap_and_killpg"] == {"n": 1, "median": 2, "p99": 2, "max": 2}
    assert summary["bystander_sigkill_senders"] == {}


def test_a_killpg_that_reaches_a_bystander_names_its_sender():
    summary = probe.summarize_kills("\n".join([REAP_300, KILLPG_300, BYSTANDER_KILLED, REACHED]))

    assert summary["slurm_killpg_sigkill"] == {"slurmstepd: live group": 1}
    assert summary["bystander_sigkill_senders"] == {"slurmstepd": 1}


def test_kills_by_others_and_kills_of_one_process_are_not_slurms_killpg():
    by_python = KILLPG_300.replace("slurmstepd-1001", "python-1001")
    one_process = KILLPG_300.replace("0xfffffffffffffed4", "0x12c")
    summary = probe.summarize_kills("\n".join([by_python, GONE, one_process, GONE, "# tracer: nop", ""]))

    assert summary["slurm_killpg_sigkill"] == {}
    assert summary["killpg_after_reap_ms"] == {}


def test_the_tracepoints_unsigned_pid_is_read_as_pid_t():
    assert probe.as_pid("0xffffff36") == -202
    assert probe.as_pid("0xfffffffffffffed4") == -300
    assert probe.as_pid("0x12c") == 300


def test_a_bystander_ended_by_sigkill_is_told_from_one_that_exited_or_still_runs():
    endings: Counter[str] = Counter()
    killed = subprocess.Popen(["sleep", "30"])
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    failed = subprocess.Popen(["false"])
    failed.wait()
    running = subprocess.Popen(["sleep", "30"])
    try:
        assert probe.ended(killed, endings) and probe.ended(failed, endings)
        assert not probe.ended(running, endings)
    finally:
        running.kill()
        running.wait()

    assert endings == Counter({"SIGKILL": 1, "exit 1": 1})


def test_without_a_lab_dir_of_its_own_the_probe_starts_nothing(monkeypatch, capsys):
    # Without LAB_DIR the lab's default directory and ports would be used: another session's.
    monkeypatch.delenv("LAB_DIR", raising=False)

    assert probe.main(["--seconds", "1"]) == 2
    assert "set LAB_DIR" in capsys.readouterr().err


def test_each_job_leaders_pid_is_taken_once(tmp_path):
    (tmp_path / "101").write_text("4242\n")
    (tmp_path / "102").write_text("")  # the job has not written it yet

    assert probe.take_leaders(tmp_path) == [4242]
    assert probe.take_leaders(tmp_path) == []
    assert [path.name for path in tmp_path.iterdir()] == ["102"]


def test_a_pid_is_gone_once_reaped_and_not_before():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert not probe.gone(child.pid, 0.01)
    finally:
        child.kill()
        child.wait()
    assert probe.gone(child.pid, 0.01)
