"""Does the lab's Slurm SIGKILL processes that are not its jobs'? A reproducible probe.

Why: Molecule's `release_1_4` once died with rc 137 (a SIGKILL inside a podman container)
while the lab's Slurm ran jobs beside it. slurmstepd with proctrack/pgid signals a step by
its process group NUMBER, and sends SIGKILL to that number again after the step ended,
when the group is usually gone. If the number has been handed to a new process group
leader meanwhile, that stranger dies.

How: in a PID namespace of its own (kernel.pid_max is per PID namespace since Linux 6.14:
writing it inside `unshare --pid --fork --mount-proc` leaves the host's value alone), the
probe starts munged, slurmctld and slurmd of the lab named by LAB_DIR and the LAB_*_PORT
variables, lowers the namespace's pid_max, keeps Slurm busy with short batch jobs, and
meanwhile starts "bystanders": process group leaders (`setsid`) that sleep briefly and
belong to no job. A bystander that ends by SIGKILL was killed by Slurm: nothing else in the
namespace sends SIGKILL. Each run lasts --seconds; everything it started dies with the
namespace. With --trace (a mounted tracefs) it also records every kill(-pgid, SIGKILL) of
slurmstepd and slurmd in the namespace, the wait4 that reaped the group's leader before it,
and every new process or thread meanwhile; the raw trace stays in LAB_DIR.

    mount -t tracefs nodev /work/lab-probe-tracefs   # once, for --trace
    LAB_DIR=/work/lab-probe LAB_SLURMCTLD_PORT=16837 LAB_SLURMD_PORT=16838 \\
        .venv/bin/python -m lab.pgid_reuse_probe --pid-max 400 --seconds 60 --linger 3 \\
        --slurmd shared --trace /work/lab-probe-tracefs
    # then the same with --slurmd own-namespace (the default: how the lab starts slurmd)

It prints one JSON line (bystanders, killed by SIGKILL, other endings, spawns refused, how
many numbers they used, jobs) and, with --trace, a second (the killpg calls by sender and
result, their delay after the reap, the new pids made in between, who SIGKILLed a
bystander). Root only; it needs `unshare` and `catatonit`; use a LAB_DIR and ports no
running lab uses. Below pid_max 400 Slurm itself fails (330: slurmctld "fatal:
pthread_create error Resource temporarily unavailable").

Measured 2026-12-05 on the 2-core Debian 12 machine, kernel 6.18, Slurm 22.05.8, load
average 5-10 from other sessions, with --slurmd shared (slurmd beside the bystanders, as
the lab ran it before), 60 s a run, 100 bystanders/s living 0.2 s, ~1,500 jobs:

    pid_max   bystanders (numbers used)  SIGKILLed  stale killpg (all ESRCH)  after reap ms      new pids between
                                                     slurmstepd + slurmd       median/p99/max     median/p99/max
    400       5,194 (188)                0          223 + 242                 10.1 / 19.9 / 25.9  1 / 11 / 13
    1000      5,175 (790)                0          252 + 233                 2.3 / 20.8 / 26.7   1 / 11 / 12
    32768     5,177 (5,064, wrapped)     0          258 + 244                 4.6 / 16.9 / 65.3   1 / 11 / 19
    4194304   5,252 (5,252)              0          258 + 267                 10.0 / 14.3 / 28.8  1 / 11 / 12

What it shows: the stale killpg is real (slurmstepd after a step, slurmd after the Epilog
script), but it comes at most ~65 ms after the group's leader was reaped, and at most 19
new pids were made in that time. Linux hands out numbers cyclically (alloc_pid's
idr_alloc_cyclic goes on from the last number given and wraps to 300 at pid_max), so a
freed number is given again only after every other free number: at least pid_max - 300 -
(live processes) new pids, 100 or more here even at pid_max 400, about 30,000 at 32768. No
killpg reached a live group and no bystander died (20,798 bystanders; at pid_max 400 the
bystanders alone went round the free numbers at least 50 times).

The positive control, --force-reuse (30 s, pid_max 4194304, --slurmd shared): each job
writes its pid and the probe, once that pid is reaped, sets ns_last_pid so that a
bystander takes the number at once. 71 of 88 bystanders got a job's number; 28 of them died by SIGKILL, and the trace
names slurmstepd as the sender (its killpg found a live group 48 times). So the kill does
reach whoever holds the number in that instant; right after a step, only the allocator
keeps it from anyone.

proctrack/pgid's wait loop, --linger: while killpg(pgid, 0) still finds the group,
slurmstepd sends SIGKILL and sleeps 1, 2, 4 ... s before it looks again (up to 32 s a
sleep, for at most a few minutes). Each job leaves a zombie in its group for 3 s, so the
group's number is freed seconds after the step, in the middle of such a sleep:

    slurmd         pid_max   seconds  lingering steps  bystanders  SIGKILLed (sender)
    shared         400       30       14               2,544       2 (slurmstepd)
    shared         400       60       34               5,030       1 (slurmstepd)
    shared         4194304   60       36               5,091       0
    own-namespace  400       60       36               4,971       0

Here the number does come round before slurmstepd looks again, and a stranger that holds
it dies. On a host that needs a group lingering past the first sleeps: at pid_max 32768
the numbers came round every 24 s at CI's busiest rate (1,365 processes a second), within
the 32-s sleeps, and this machine has had steps not reaped for over 60 s when 1,000 jobs
ended at once (LAB.md, UnkillableStepTimeout). At 4194304 they come round every ~51 min
at that rate, longer than the loop lasts. That is a way to the CI's rc 137, not a proof
that it was the way.

The fix (lab/slurm.py slurmd_command): slurmd, and so slurmstepd, run in a PID namespace
of their own, where a number names only the lab's jobs' processes. Besides the --linger
run above, --force-reuse with --slurmd own-namespace gave 130 of 154 bystanders the very
number of a job that had just ended (in the bystanders' namespace), and none died.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from lab.labctl import start_lab, stop_lab
from lab.processes import wait_until, write_record
from lab.settings import READY_TIMEOUT, LabError, LabSettings, lab_settings
from lab.slurm import slurmd_answers, start_slurmd

PID_MAX_PATH = Path("/proc/sys/kernel/pid_max")
# An array of this many jobs is submitted whenever fewer than LOW_WATER are queued.
ARRAY_SIZE = 200
LOW_WATER = 50
SLURMD_PLACES = ("own-namespace", "shared")


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--pid-max", type=int, default=400, help="pid_max inside the probe's namespace (Slurm needs 400 or more here)"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the load runs")
    parser.add_argument("--rate", type=float, default=100.0, help="bystanders started per second")
    parser.add_argument("--lifetime", type=float, default=0.2, help="seconds each bystander sleeps")
    parser.add_argument(
        "--trace",
        type=Path,
        help="a mounted tracefs (mount -t tracefs nodev DIR): also trace Slurm's kill(-pgid, SIGKILL) calls",
    )
    parser.add_argument(
        "--force-reuse",
        action="store_true",
        help="the positive control: give each ended job's number to a bystander at once (ns_last_pid)",
    )
    parser.add_argument(
        "--linger",
        type=float,
        default=0.0,
        help="each job leaves a zombie in its process group for this many seconds (proctrack/pgid's wait loop)",
    )
    parser.add_argument(
        "--slurmd",
        choices=SLURMD_PLACES,
        default="own-namespace",
        help="slurmd in a PID namespace of its own, as the lab starts it, or beside the bystanders (before the fix)",
    )
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    if "LAB_DIR" not in os.environ:
        print("pgid_reuse_probe: set LAB_DIR (and the LAB_*_PORT variables) to a lab of its own", file=sys.stderr)
        return 2
    if arguments.inner:
        print(json.dumps(run_inside(arguments, lab_settings())), flush=True)
        return 0
    inner_argv = argv if argv is not None else sys.argv[1:]
    if arguments.trace is None:
        return enter_namespace(inner_argv)
    with KillTrace(arguments.trace) as trace:
        code = enter_namespace(inner_argv)
    # Kept for a closer look; each run replaces it.
    (lab_settings().lab_dir / "pgid-probe-trace.txt").write_text(trace.text)
    print(json.dumps(trace.summary()), flush=True)
    return code


def enter_namespace(argv: Sequence[str]) -> int:
    """Run this module again as the child of catatonit, PID 1 of a new PID namespace.

    Everything the probe starts dies with that namespace (--kill-child), whatever happens.
    """
    command = [
        "/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
        "/usr/bin/catatonit", "--", sys.executable, "-m", "lab.pgid_reuse_probe", "--inner", *argv,
    ]  # fmt: skip
    return subprocess.run(command, cwd=Path(__file__).resolve().parent.parent, check=False).returncode


def run_inside(arguments: argparse.Namespace, settings: LabSettings) -> dict[str, object]:
    bystander = make_bystander(settings)
    start_slurm(settings, own_pid_namespace=arguments.slurmd == "own-namespace")
    try:
        # After slurmd: the lab's start raises pid_max, in this namespace too.
        set_pid_max(arguments.pid_max)
        if arguments.force_reuse:
            leaders = settings.lab_dir / "job-leaders"
            leaders.mkdir(exist_ok=True)
            jobs = JobLoad(settings, f"echo $$ > {leaders}/$SLURM_JOB_ID; exec /bin/sleep 0.3")
            jobs.start()
            outcome = run_forced_reuse(bystander, leaders, arguments.lifetime, arguments.seconds)
        else:
            jobs = JobLoad(settings, lingering_job(arguments.linger) if arguments.linger else "exec /bin/true")
            jobs.start()
            outcome = run_bystanders(bystander, arguments.rate, arguments.lifetime, arguments.seconds)
        jobs.stop()
        pid_max_at_end = int(PID_MAX_PATH.read_text())
    finally:
        stop_lab(settings)
    return {
        "pid_max": pid_max_at_end,
        "slurmd": arguments.slurmd,
        "seconds": arguments.seconds,
        **outcome,
        "jobs_submitted": jobs.submitted,
        "jobs_left": jobs.left,
    }


def set_pid_max(value: int) -> None:
    PID_MAX_PATH.write_text("%d\n" % value)
    if int(PID_MAX_PATH.read_text()) != value:
        raise LabError(f"kernel.pid_max stays {PID_MAX_PATH.read_text().strip()} in the probe's namespace")


def make_bystander(settings: LabSettings) -> Path:
    """/bin/sleep under a name of its own, so a trace's comm field tells it from jobs' sleeps."""
    path = settings.lab_dir / "pgid-bystander"
    settings.lab_dir.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.symlink_to("/bin/sleep")
    return path


def start_slurm(settings: LabSettings, own_pid_namespace: bool) -> None:
    """The lab's own munged, slurmctld and slurmd (no PostgreSQL); slurmd where asked."""
    start_lab(settings, ("munged", "slurmctld"))
    write_record(settings, "slurmd", start_slurmd(settings, own_pid_namespace=own_pid_namespace))
    if not wait_until(lambda: slurmd_answers(settings), READY_TIMEOUT):
        raise LabError("slurmd does not answer")


def run_bystanders(bystander: Path, rate: float, lifetime: float, seconds: float) -> dict[str, object]:
    """Start process group leaders that belong to no job, and tell how each ended."""
    endings: Counter[str] = Counter()
    numbers: set[int] = set()
    running: list[subprocess.Popen] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            running.append(subprocess.Popen([str(bystander), str(lifetime)], start_new_session=True))
            numbers.add(running[-1].pid)
        except BlockingIOError:
            endings["spawn refused"] += 1
        running = [process for process in running if not ended(process, endings)]
        time.sleep(1 / rate)
    refused = endings.pop("spawn refused", 0)
    return {
        **tally_endings(running, endings),
        "spawns_refused": refused,
        # Fewer distinct numbers than bystanders: the namespace's numbers came round.
        "bystander_pids": {"distinct": len(numbers), "highest": max(numbers, default=0)},
    }


# A zombie keeps its process group alive, and killpg(pgid, 0) finds it, until its parent
# reaps it. The parent leaves the job's group first, so the step's SIGKILL spares it; the
# child goes back into the group and exits. slurmstepd then loops in proctrack/pgid's wait
# (SIGKILL, sleep 1, 2, 4 ... s) until the group is gone, as with a group that dies slowly.
LINGERING_JOB = """
import os, sys, time
group = os.getpgid(0)
if os.fork() == 0:
    os.setpgid(0, 0)
    child = os.fork()
    if child == 0:
        os.setpgid(0, group)
        os._exit(0)
    time.sleep(float(sys.argv[1]))
    os.waitpid(child, 0)
    os._exit(0)
time.sleep(0.2)
"""


def lingering_job(seconds: float) -> str:
    return f"exec /usr/bin/python3 -c '{LINGERING_JOB}' {seconds:g}"


NS_LAST_PID_PATH = Path("/proc/sys/kernel/ns_last_pid")


def run_forced_reuse(bystander: Path, leaders: Path, lifetime: float, seconds: float) -> dict[str, object]:
    """Hand each ended job's number to a bystander at once, as a wrap at the worst moment would.

    The job writes its pid; once that pid is reaped (gone from /proc), ns_last_pid makes the
    next fork take the number, usually before Slurm's killpg. If that killpg then kills the
    bystander, the probe sees what the mechanism would do if numbers came round that fast.
    Polls /proc every 0.2 ms while a job runs: meant for short runs.
    """
    endings: Counter[str] = Counter()
    running: list[subprocess.Popen] = []
    attempts = reused = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for leader in take_leaders(leaders):
            if not gone(leader, min(2.0, deadline - time.monotonic())):
                continue
            attempts += 1
            NS_LAST_PID_PATH.write_text("%d\n" % (leader - 1))
            running.append(subprocess.Popen([str(bystander), str(lifetime)], start_new_session=True))
            reused += running[-1].pid == leader
        running = [process for process in running if not ended(process, endings)]
        time.sleep(0.01)
    return {
        **tally_endings(running, endings),
        "reuse_attempts": attempts,
        "bystanders_on_a_jobs_number": reused,
    }


def take_leaders(leaders: Path) -> list[int]:
    found = []
    for path in sorted(leaders.iterdir()):
        text = path.read_text().strip()
        if text:
            path.unlink()
            found.append(int(text))
    return found


def gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.0002)
    return True


def tally_endings(running: Sequence[subprocess.Popen], endings: Counter[str]) -> dict[str, object]:
    """Wait for the bystanders still running; how they all ended, SIGKILL apart."""
    for process in running:
        process.wait()
        ended(process, endings)
    killed = endings.pop("SIGKILL", 0)
    return {"bystanders": sum(endings.values()) + killed, "killed_by_sigkill": killed, "other_endings": dict(endings)}


def ended(process: subprocess.Popen, endings: Counter[str]) -> bool:
    code = process.poll()
    if code is None:
        return False
    endings["SIGKILL" if code == -9 else f"exit {code}"] += 1
    return True


class KillTrace:
    """A tracefs instance that records the SIGKILLs sent by this process and its descendants.

    Other sessions' Slurm on the machine sends its own; set_event_pid with event-fork keeps
    them out. slurmstepd's kill(-pgid, 9) returning 0 reached a live group, -ESRCH none.
    """

    EVENTS = (
        "syscalls/sys_enter_kill",
        "syscalls/sys_exit_kill",
        "syscalls/sys_exit_wait4",
        "signal/signal_generate",
        "sched/sched_process_fork",
    )
    FILTERS = {
        "syscalls/sys_enter_kill": "sig == 9",
        "syscalls/sys_exit_wait4": "ret > 0",
        "signal/signal_generate": "sig == 9",
    }

    def __init__(self, tracefs: Path) -> None:
        self.instance = tracefs / "instances" / f"pgid-probe-{os.getpid()}"
        self.text = ""

    def __enter__(self) -> KillTrace:
        self.instance.mkdir()
        (self.instance / "buffer_size_kb").write_text("16384\n")
        (self.instance / "options" / "event-fork").write_text("1\n")
        (self.instance / "set_event_pid").write_text(f"{os.getpid()}\n")
        for event, condition in self.FILTERS.items():
            (self.instance / "events" / event / "filter").write_text(condition + "\n")
        for event in self.EVENTS:
            (self.instance / "events" / event / "enable").write_text("1\n")
        return self

    def __exit__(self, *_exc: object) -> None:
        (self.instance / "tracing_on").write_text("0\n")
        self.text = (self.instance / "trace").read_text()
        for event in self.EVENTS:
            (self.instance / "events" / event / "enable").write_text("0\n")
        self.instance.rmdir()

    def summary(self) -> dict[str, object]:
        return summarize_kills(self.text)


TRACE_LINE = re.compile(
    r"^\s*(?P<comm>.+?)-(?P<tid>\d+)\s+\[\d+\]\s+\S+\s+(?P<time>[\d.]+): (?P<event>\w+)(?P<rest>.*)$"
)


@dataclasses.dataclass
class KillStats:
    """What slurmstepd's kill(-pgid, SIGKILL) calls met, and how close the number came round."""

    results: Counter[str] = dataclasses.field(default_factory=Counter)
    delays_ms: list[float] = dataclasses.field(default_factory=list)
    forks_between: list[int] = dataclasses.field(default_factory=list)
    bystander_senders: Counter[str] = dataclasses.field(default_factory=Counter)

    def as_dict(self) -> dict[str, object]:
        return {
            "slurm_killpg_sigkill": dict(self.results),
            "killpg_after_reap_ms": percentiles(self.delays_ms),
            "new_pids_between_reap_and_killpg": percentiles(self.forks_between),
            "bystander_sigkill_senders": dict(self.bystander_senders),
        }


def summarize_kills(text: str) -> dict[str, object]:
    """Pair each stale killpg with the wait4 that reaped its group's leader."""
    stats = KillStats()
    pending: dict[str, tuple[str, int]] = {}
    reaped: dict[int, tuple[float, int]] = {}
    forks = 0
    for match in filter(None, map(TRACE_LINE.match, text.splitlines())):
        comm, tid, when, event, rest = match["comm"], match["tid"], float(match["time"]), match["event"], match["rest"]
        if event == "sched_process_fork":
            forks += 1
        elif event == "sys_wait4" and comm in ("slurmd", "slurmstepd"):
            reaped[int(rest.split("->")[-1], 16)] = (when, forks)
        elif event == "sys_kill" and rest.startswith("(") and comm in ("slurmd", "slurmstepd"):
            pending[tid] = (comm, as_pid(re.search(r"pid: (0x[0-9a-f]+)", rest)[1]))
        elif event == "sys_kill" and tid in pending:
            sender, target = pending.pop(tid)
            record_killpg(stats, sender, -target, int(rest.split("->")[-1], 16) == 0, reaped, when, forks)
        elif event == "signal_generate" and "comm=pgid-bystander" in rest:
            stats.bystander_senders[comm] += 1
    return stats.as_dict()


def record_killpg(
    stats: KillStats, sender: str, group: int, reached: bool, reaped: dict, when: float, forks: int
) -> None:
    if group <= 0:
        return
    stats.results[f"{sender}: {'live group' if reached else 'no such group'}"] += 1
    if group in reaped:
        reaped_at, forks_then = reaped[group]
        stats.delays_ms.append((when - reaped_at) * 1000)
        stats.forks_between.append(forks - forks_then)


def percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda share: round(ordered[min(len(ordered) - 1, int(share * len(ordered)))], 2)  # noqa: E731
    return {"n": len(ordered), "median": pick(0.5), "p99": pick(0.99), "max": round(ordered[-1], 2)}


def as_pid(hex_text: str) -> int:
    """The syscall tracepoint prints pid_t as an unsigned 64-bit number."""
    value = int(hex_text, 16) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class JobLoad:
    """Short batch jobs, kept queued in arrays so that steps end all the time."""

    def __init__(self, settings: LabSettings, script: str = "exec /bin/true") -> None:
        self.settings = settings
        self.script = script
        self.submitted = 0
        self.left = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self.left = self._queued()

    def _queued(self) -> int:
        # --array: a pending array counts as its tasks, not as one line.
        command = ["squeue", "--array", "--noheader", "--format=%i"]
        result = subprocess.run(command, env=self.settings.slurm_env(), capture_output=True, text=True, check=False)
        return len(result.stdout.split())

    def _run(self) -> None:
        while not self._stopping.is_set():
            if self._queued() < LOW_WATER:
                self._submit()
            self._stopping.wait(1.0)

    def _submit(self) -> None:
        command = ["sbatch", f"--array=0-{ARRAY_SIZE - 1}", "--output=/dev/null", "--wrap", self.script]
        result = subprocess.run(command, env=self.settings.slurm_env(), capture_output=True, text=True, check=False)
        if result.returncode == 0:
            self.submitted += ARRAY_SIZE


if __name__ == "__main__":
    sys.exit(main())
