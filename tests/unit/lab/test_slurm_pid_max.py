"""lab/slurm.py's kernel.pid_max, raised as Debian's systemd sets it (on a file standing in
for /proc/sys/kernel/pid_max)."""

from __future__ import annotations

from lab import slurm


def test_a_low_pid_max_is_raised_to_debians(tmp_path):
    pid_max = tmp_path / "pid_max"
    pid_max.write_text("32768\n")

    assert slurm.raise_pid_max(pid_max) == slurm.PID_MAX == 4194304
    assert pid_max.read_text() == "4194304\n"


def test_a_higher_pid_max_is_left_alone(tmp_path):
    pid_max = tmp_path / "pid_max"
    pid_max.write_text("4194305\n")

    assert slurm.raise_pid_max(pid_max) == 4194305
    assert pid_max.read_text() == "4194305\n"


def test_an_unreadable_pid_max_changes_nothing(tmp_path):
    assert slurm.raise_pid_max(tmp_path / "absent") is None
