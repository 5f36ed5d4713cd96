"""The lab's munged, slurmctld and slurmd, and its Slurm queue."""

from __future__ import annotations

import sys
from pathlib import Path

from lab.files import write_slurm_files
from lab.processes import ProcessRecord, all_pids, probe, proc_stat, run, spawn, wait_until
from lab.settings import QUEUE_DRAIN_MARGIN, READY_TIMEOUT, LabError, LabSettings


def munge_command(settings: LabSettings) -> list[str]:
    munge_dir = settings.munge_dir
    return [
        "/usr/sbin/munged",
        "--foreground",
        f"--socket={settings.munge_socket}",
        f"--key-file={munge_dir / 'munge.key'}",
        f"--pid-file={munge_dir / 'munged.pid'}",
        f"--log-file={munge_dir / 'munged.log'}",
        f"--seed-file={munge_dir / 'munged.seed'}",
    ]


def start_munged(settings: LabSettings) -> ProcessRecord:
    key = settings.munge_dir / "munge.key"
    if not key.exists():
        run(["/usr/sbin/mungekey", "--create", f"--keyfile={key}"], user="munge")
    settings.munge_socket.unlink(missing_ok=True)
    process = spawn(munge_command(settings), settings.service_logs("munged")[1], user="munge")
    return ProcessRecord.of(process.pid)


def munge_answers(settings: LabSettings) -> bool:
    socket_option = f"--socket={settings.munge_socket}"
    credential = probe(["munge", "-n", socket_option])
    if credential is None or credential.returncode != 0:
        return False
    decoded = probe(["unmunge", socket_option], input_text=credential.stdout)
    return decoded is not None and decoded.returncode == 0


# ---------------------------------------------------------------- Slurm


def start_slurmctld(settings: LabSettings) -> ProcessRecord:
    write_slurm_files(settings)
    process = spawn(
        ["/usr/sbin/slurmctld", "-D", "-c", "-f", str(settings.slurm_conf)],
        settings.service_logs("slurmctld")[1],
        env=settings.slurm_env(),
    )
    return ProcessRecord.of(process.pid)


def slurmctld_answers(settings: LabSettings) -> bool:
    result = probe(["scontrol", "ping"], env=settings.slurm_env())
    return result is not None and result.returncode == 0 and "is UP" in result.stdout


# Debian 12 with systemd as PID 1 runs with kernel.pid_max 4194304 (systemd's
# 50-pid-max.conf); without it the kernel's 32768 stays, and a busy machine hands a number
# out again every ~24 s. The lab's slurmd has PID numbers of its own (slurmd_command); the
# raised value still keeps everything else on the machine as on a real host.
PID_MAX = 4194304
PID_MAX_PATH = Path("/proc/sys/kernel/pid_max")


def raise_pid_max(path: Path = PID_MAX_PATH, wanted: int = PID_MAX) -> int | None:
    """kernel.pid_max raised to `wanted` if lower; what it is then, None if unreadable."""
    try:
        current = int(path.read_text())
        if current < wanted:
            path.write_text("%d\n" % wanted)
            current = int(path.read_text())
    except (OSError, ValueError):
        return None
    return current


def slurmd_command(settings: LabSettings, own_pid_namespace: bool = True) -> list[str]:
    # catatonit reaps the job processes at once; this sandbox's PID 1 takes about a
    # second, and proctrack/pgid waits for those zombies, so cancelled jobs would linger.
    slurmd = ["/usr/bin/catatonit", "--", "/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", str(settings.slurm_conf)]
    if not own_pid_namespace:
        return slurmd
    # proctrack/pgid signals a step by its process group NUMBER, also after the group is
    # gone: while a group lingers, slurmstepd SIGKILLs the number again after sleeps of up
    # to 32 s, and whoever got the number meanwhile dies (lab/pgid_reuse_probe.py --linger).
    # In a PID namespace of their own, slurmd's and slurmstepd's numbers name only the
    # lab's jobs, never a test's process or a Molecule container's. Real Debian hosts run
    # slurmd under systemd, with pid_max 4194304 and usually proctrack/cgroup; this machine
    # has no systemd as PID 1 to give Slurm cgroups of its own, so the lab isolates the
    # numbers. catatonit is the namespace's PID 1; --kill-child ends it if unshare dies.
    return ["/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child", *slurmd]


# PROC_PID_INIT_INO (include/linux/proc_ns.h): the inode of the host's own PID namespace.
INITIAL_PID_NAMESPACE_INODE = 0xEFFFFFFC


def in_initial_pid_namespace(path: Path = Path("/proc/self/ns/pid")) -> bool:
    try:
        return path.stat().st_ino == INITIAL_PID_NAMESPACE_INODE
    except OSError:
        return False


def start_slurmd(settings: LabSettings, own_pid_namespace: bool | None = None) -> ProcessRecord:
    """slurmd, in a PID namespace of its own unless told otherwise or already in one.

    A container (bench/release_slurm.py) is a PID namespace that holds only the lab, and
    podman gives it no CAP_SYS_ADMIN to make another.
    """
    if own_pid_namespace is None:
        own_pid_namespace = in_initial_pid_namespace()
    raise_pid_max()
    process = spawn(
        slurmd_command(settings, own_pid_namespace), settings.service_logs("slurmd")[1], env=settings.slurm_env()
    )
    if not own_pid_namespace:
        return ProcessRecord.of(process.pid)
    return ProcessRecord.of(namespace_init(process.pid))


def namespace_init(unshare_pid: int) -> int:
    """The process `unshare --fork` started (the namespace's PID 1), by its pid seen from here.

    The lab records it rather than unshare: unshare ignores SIGTERM, while catatonit passes
    SIGTERM on to slurmd and exits with it, and unshare then exits too.
    """
    found: list[int] = []

    def forked() -> bool:
        found[:] = children_of(unshare_pid)
        return bool(found) or proc_stat(unshare_pid) is None

    wait_until(forked, READY_TIMEOUT)
    if not found:
        raise LabError(f"unshare (process {unshare_pid}) started no namespace for slurmd")
    return found[0]


def children_of(pid: int) -> list[int]:
    return [child for child in all_pids() if (proc_stat(child) or {}).get("ppid") == pid]


def node_state(settings: LabSettings) -> str:
    result = probe(["sinfo", "--noheader", "--Node", "--format=%t"], env=settings.slurm_env())
    return result.stdout.strip() if result is not None and result.returncode == 0 else ""


def slurmd_answers(settings: LabSettings) -> bool:
    # '*' marks a node that does not respond; drain/down/unknown cannot run jobs.
    state = node_state(settings)
    return bool(state) and "*" not in state and not state.startswith(("down", "drain", "unk", "fail", "inval"))


def queued_job_ids(settings: LabSettings) -> list[str]:
    result = run(["squeue", "--all", "--noheader", "--format=%i"], env=settings.slurm_env(), timeout=30)
    return result.stdout.split()


def cancel_all_jobs(settings: LabSettings) -> None:
    """Empty the queue: killing slurmd would leave its jobs running."""
    try:
        job_ids = queued_job_ids(settings)
    except LabError as error:
        print(f"lab: cannot list Slurm jobs ({error}); stopping anyway", file=sys.stderr)
        return
    if not job_ids:
        return
    run(["scancel", *job_ids], env=settings.slurm_env(), check=False, timeout=60)
    patience = epilog_sleep_seconds(settings) + QUEUE_DRAIN_MARGIN
    if not wait_until(lambda: not queued_job_ids(settings), patience, interval=0.1):
        print(
            f"lab: Slurm jobs still queued after {patience:.0f} s; their processes are killed with slurmd's session",
            file=sys.stderr,
        )


def epilog_sleep_seconds(settings: LabSettings) -> float:
    try:
        return float(settings.epilog_sleep_file.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0.0


def set_epilog_sleep(settings: LabSettings, seconds: float) -> None:
    if seconds < 0:
        raise LabError("epilog-sleep needs a number of seconds >= 0")
    settings.slurm_dir.mkdir(parents=True, exist_ok=True)
    text = f"{seconds:g}\n"
    if "e" in text:
        raise LabError(f"epilog-sleep {seconds} is out of range")
    settings.epilog_sleep_file.write_text(text)
