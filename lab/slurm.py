"""The lab's munged, slurmctld and slurmd, and its Slurm queue."""

from __future__ import annotations

import sys
from pathlib import Path

from lab.files import write_slurm_files
from lab.processes import ProcessRecord, probe, run, spawn, wait_until
from lab.settings import QUEUE_DRAIN_MARGIN, LabError, LabSettings


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
# 50-pid-max.conf); without it the kernel's 32768 stays. The lab sets Debian's value so its
# Slurm sees the numbers of a real host. It does not fix a cause: proctrack/pgid's second
# SIGKILL to a finished step's process group (and slurmd's after the Epilog) comes at most
# ~65 ms after the group's leader was reaped, with at most 19 new pids made meanwhile, and
# the kernel gives a freed number again only after every other free one, so that kill
# reaches nobody at 32768 either (lab/pgid_reuse_probe.py: 0 strangers killed in 20,798).
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


def start_slurmd(settings: LabSettings) -> ProcessRecord:
    raise_pid_max()
    # catatonit reaps the job processes at once; this sandbox's PID 1 takes about a
    # second, and proctrack/pgid waits for those zombies, so cancelled jobs would linger.
    process = spawn(
        ["/usr/bin/catatonit", "--", "/usr/sbin/slurmd", "-D", "-N", "localhost", "-f", str(settings.slurm_conf)],
        settings.service_logs("slurmd")[1],
        env=settings.slurm_env(),
    )
    return ProcessRecord.of(process.pid)


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
