"""lab/slurm.py starts slurmd in a PID namespace of its own, so that proctrack/pgid's
signals to a process group number cannot reach processes outside the lab's jobs."""

from __future__ import annotations

import subprocess
import types

import pytest

from lab import slurm
from lab.processes import wait_until
from lab.settings import LabError, lab_settings


@pytest.fixture
def settings(tmp_path):
    return lab_settings(lab_dir=tmp_path, environ={})


def test_slurmd_runs_under_catatonit_as_pid_1_of_a_new_pid_namespace(settings):
    command = slurm.slurmd_command(settings)

    assert command[:5] == ["/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    assert command[5:9] == ["/usr/bin/catatonit", "--", "/usr/sbin/slurmd", "-D"]
    assert command[-1] == str(settings.slurm_conf)


def test_the_lab_starts_slurmd_in_its_namespace_and_records_the_namespaces_init(settings, monkeypatch):
    started = []
    monkeypatch.setattr(slurm, "raise_pid_max", lambda: None)
    monkeypatch.setattr(slurm, "in_initial_pid_namespace", lambda: True)
    monkeypatch.setattr(slurm, "spawn", lambda argv, *_a, **_k: started.append(argv) or types.SimpleNamespace(pid=1))
    sleeper = subprocess.Popen(["sleep", "30"])
    monkeypatch.setattr(slurm, "namespace_init", lambda unshare_pid: sleeper.pid if unshare_pid == 1 else 0)
    try:
        record = slurm.start_slurmd(settings)
    finally:
        sleeper.kill()
        sleeper.wait()

    assert started[0][:2] == ["/usr/bin/unshare", "--pid"]
    assert record.pid == sleeper.pid


def command_name(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return cmdline.read().split(b"\0")[0]


def test_the_namespaces_init_is_the_child_unshare_forked():
    parent = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        child = slurm.namespace_init(parent.pid)
        assert slurm.children_of(parent.pid) == [child]
        # Found as soon as it is forked, the child may not have exec'd sleep yet (a busy
        # machine): its pid is what the lab records, and the same process then runs sleep.
        assert wait_until(lambda: command_name(child) == b"sleep", 10)
    finally:
        for pid in slurm.children_of(parent.pid):
            subprocess.run(["kill", str(pid)], check=False)
        parent.wait()


def test_an_unshare_that_forked_nothing_is_an_error():
    ended = subprocess.Popen(["true"])
    ended.wait()

    with pytest.raises(LabError, match="started no namespace for slurmd"):
        slurm.namespace_init(ended.pid)


def test_in_a_container_slurmd_starts_without_another_namespace(settings, monkeypatch):
    started = []
    monkeypatch.setattr(slurm, "raise_pid_max", lambda: None)
    monkeypatch.setattr(slurm, "in_initial_pid_namespace", lambda: False)
    monkeypatch.setattr(slurm, "spawn", lambda argv, *_a, **_k: started.append(argv) or types.SimpleNamespace(pid=1))
    monkeypatch.setattr(slurm.ProcessRecord, "of", classmethod(lambda cls, pid: cls(pid, 0, 0)))

    assert slurm.start_slurmd(settings).pid == 1
    assert started[0][0] == "/usr/bin/catatonit"


def test_only_the_kernels_own_inode_names_the_hosts_pid_namespace(tmp_path):
    assert slurm.INITIAL_PID_NAMESPACE_INODE == 4026531836
    assert not slurm.in_initial_pid_namespace(tmp_path)
    assert not slurm.in_initial_pid_namespace(tmp_path / "absent")
