"""Benchmark of slurm_job_cancel's engine against the dispatcher loop and the limit (issue 3).

For each N in --sizes, N jobs named after Arvados container UUIDs are submitted to the lab's
Slurm (2 running `exec sleep 300`, the rest pending), afresh for every contender so each
starts from the same queue, and made absent by:

  engine    this collection's engine, `cancel_jobs(CancelRequest(names=...))`, in-process;
  ansible   the same through `ansible-playbook` (module `slurm_job_cancel`): its wall time
            includes ansible's start-up, the module's own `elapsed` is shown beside it;
  loop      the dispatcher loop of the time: one thread per job running
            `scancel --name=<uuid>` under a lock shared with a global `squeue` poller
            (period 0.5 s), then waiting for the next poll and, if the job is still listed,
            sleeping 1 s and starting over;
  limit     one `squeue`, one `scancel` of all ids, then `squeue` until they are gone.

A second scenario has half of the jobs end on their own during the call: 0.3 s after the
contender starts, a "finisher" removes every other job (one of the two running ones and half
of the pending ones) from the queue with one `scancel` of the real binary, which no contender
counts. This stands for containers finishing by themselves: on the lab's 2-CPU node at most
two jobs run, so `exec sleep 1` jobs could not end on their own in hundreds. The engine runs
there twice: with no grace period, and with `grace_period` 1 s, which lets the finished jobs
leave without being named to any `scancel`.

slurmctld keeps finished jobs for MinJobAge (300 s in the lab), and every `squeue` and
`scancel --name` reads that whole table, so each contender is slowed by the jobs of the
contenders before it. The table's size at each start is reported ("table"), and
`--reverse` runs the contenders in the opposite order: compare a run with a reversed one.

Every contender runs `squeue` and `scancel` through wrapper scripts (bash) that append one
line per call (program, start and end time, argument count, exit code) to a log with a
single O_APPEND write, then exit with the client's status. The process counts and the peak
of Slurm client processes alive at once are computed from those intervals, the same way for
all contenders.

Stopping running containers (issue 10), `--stop-sizes` (default 200): N running jobs named
after containers (`exec sleep 600`, which leaves on its TERM as crunch-run does once it has
stopped its container), afresh for every contender, stopped by:

  term          the floor of one request per job: one `scancel --batch --signal=TERM` of
                all ids, timed alone;
  ctld          the floor of one request for all (Slurm 24.05 and later, issue 23): one
                `scancel --ctld --batch --signal=TERM` of all ids, timed alone;
  ctld, listed  the same timed from the `squeue` that finds the ids, as the engine is timed
                (it must list the queue to know them): the like-for-like floor of `engine`;
  ctld, gone    the same, then `squeue` until the jobs are gone, timed from the first
                `squeue`: the like-for-like floor of `engine, wait`;
  engine        the engine's default stop (`stop: auto`, `ctld: auto`), `wait: false`: one
                squeue, then TERM on the batch steps; it returns once Slurm took every TERM;
  engine, per job  the same with `ctld: never`: one request per job whatever the release;
  engine, one scancel  the same with `max_job_ids_per_scancel` N: all ids in one scancel,
                where the default 500 makes two for 1,000 on the per-job path (a
                --ctld scancel that is one request takes up to 10,000 ids anyway);
  term, gone    the floor, then `squeue` until the jobs are gone;
  engine, wait  the engine's default stop, waiting until the jobs are gone (a job still
                running `term_interval`, 10 s, after Slurm took its TERM gets TERM again,
                never a plain cancel: `after_term: term_again`, the dispatcher's way).

For each contender slurmctld's own count of the requests it served is read from `sdiag`
before and after the contender's run (`sdiag` is one more request each time, not counted):
"kill RPCs" is REQUEST_KILL_JOB plus REQUEST_KILL_JOBS (24.05 and later), "client RPCs"
every message type but those slurmd and slurmstepd send as jobs end. That needs no
`sdiag --reset`, so no SlurmUser. "engine CPU s" is the CPU time the engine took in the
benchmark's own process (its clients' not included), "load" the machine's load average
(1 minute) as the contender starts.

The lab's node has 2 CPUs; for this scenario the benchmark lets the partition run 1000 jobs
per CPU (`scontrol update PartitionName=... OverSubscribe=FORCE:1000`) and puts the setting
back afterwards (slurmctld's restart by labctl forgets it anyway).

Run against the shared lab (`lab/labctl.py start`):

    .venv/bin/python -m bench.slurm_cancel_bench --sizes 200 1000
    .venv/bin/python -m bench.slurm_cancel_bench --sizes --stop-sizes 100    # stopping only
    .venv/bin/python -m bench.slurm_cancel_bench --sizes --stop-sizes 1000 \
        --stop-contenders term engine --stop-timeout 1200                    # ~25 min here

On Slurm 24.05 and later (Debian 13's 24.11 in a container: bench/release-slurm.sh):

    python3 -m bench.slurm_cancel_bench --sizes --no-ansible --stop-sizes 1000 \
        --stop-contenders term ctld engine --stop-timeout 1200

One scancel of 1,000 running jobs takes minutes on the lab's 2 CPUs, longer than the engine's
default deadline (240 s with TERM): `--stop-timeout` gives the engine a longer one.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lab import labctl
from plugins.module_utils._cancel.engine import CancelRequest, cancel_jobs
from plugins.module_utils._common.uuids import CONTAINER_INFIX, new_uuid

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"
ANSIBLE_PLAYBOOK = REPO / ".venv" / "bin" / "ansible-playbook"
MODULE = "arvados_ops.recovery.slurm_job_cancel"

RUNNING_JOBS = 2
LOOP_POLL_PERIOD = 0.5
LOOP_RETRY_SLEEP = 1.0
FINISH_AFTER = 0.3
GRACE_PERIOD = 2.0
LIMIT_POLL_PAUSE = 0.02
SUBMIT_THREADS = 4
# The engine's default bound on scancel processes alive at once.
MAX_CONCURRENT_SCANCEL = CancelRequest().max_concurrent_scancel
SQUEUE_FORMAT = "--format=%i|%j|%T"
STOP_SCENARIO = "stop running containers"
STOP_GONE_TIMEOUT = 600
# Each stopping contender against its floor: (contender, floor).
STOP_FLOORS = {
    "engine": "term",
    "engine, per job": "term",
    "engine, one scancel": "term",
    "engine, wait": "term, gone",
}
# With one request for all (--ctld), each engine contender against the ctld floor doing the
# same work: the engine lists the queue before any scancel, and "engine, wait" also waits
# for the jobs to leave, where "ctld" times its one scancel alone.
CTLD_LIKE_FOR_LIKE = {"engine": "ctld, listed", "engine, one scancel": "ctld, listed", "engine, wait": "ctld, gone"}
# Issue 23's targets where slurmctld takes one request for all (--ctld, 24.05 and later):
# the engine within this factor of the ctld floor ...
CTLD_FLOOR_FACTOR = 1.5
# ... and at least this many times faster than one request per job on the same Slurm.
PER_JOB_SPEEDUP = 10.0
KILL_RPCS = ("REQUEST_KILL_JOB", "REQUEST_KILL_JOBS")
# What slurmd and slurmstepd send as the jobs end, which goes on during the next contender's
# run: not the contender's requests.
DAEMON_RPC_PREFIXES = ("MESSAGE_", "REQUEST_COMPLETE_", "REQUEST_STEP_COMPLETE")
# slurmctld says RUNNING once it has sent the batch job to slurmd; a TERM sent to the batch
# step before slurmstepd has started the script is lost (seen on 24.11 in a container, for
# jobs launched a second before): the jobs are given this long to start for real.
BATCH_START_SETTLE = 5.0
# Before a stop is timed the machine should be idle: 1,000 slurmstepd starting (and the
# previous contender's 1,000 jobs ending, epilogs and all) kept the load at 30-50 on 2
# cores, and the contender timed then waited for a CPU at every wake-up (2x noise between
# rounds). A stop is timed once the CPUs were this idle over QUIET_WINDOW, or after
# QUIET_TIMEOUT whatever they were (the row says how idle).
QUIET_IDLE = 0.8
QUIET_WINDOW = 1.0
QUIET_TIMEOUT = 180.0
_SDIAG_RPC = re.compile(r"^\s+([A-Z][A-Z0-9_]+)\s*\(\s*[0-9]+\)\s+count:([0-9]+)")


# ---------------------------------------------------------------- Slurm clients


class Clients:
    """Wrapper scripts for squeue and scancel that log every call into one file."""

    def __init__(self, directory: Path, env: dict[str, str]):
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / "calls.log"
        self.env = env
        self.paths = {program: self._wrapper(directory, program) for program in ("squeue", "scancel")}

    def _wrapper(self, directory: Path, program: str) -> str:
        real = shutil.which(program)
        if not real:
            raise SystemExit("%s is not on PATH" % program)
        wrapper = directory / program
        wrapper.write_text(
            "#!/bin/bash\n"
            "start=$EPOCHREALTIME\n"
            '%s "$@"\n'
            "rc=$?\n"
            'printf \'%s %%s %%s %%s %%s\\n\' "$start" "$EPOCHREALTIME" "$#" "$rc" >> %s\n'
            "exit $rc\n" % (shlex.quote(real), program, shlex.quote(str(self.log)))
        )
        wrapper.chmod(0o755)
        return str(wrapper)

    @property
    def squeue(self) -> str:
        return self.paths["squeue"]

    @property
    def scancel(self) -> str:
        return self.paths["scancel"]

    def run(self, argv: Sequence[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        calls = []
        for line in self.log.read_text().splitlines():
            program, start, end, argc, rc = line.split()
            calls.append(
                {"program": program, "start": float(start), "end": float(end), "argc": int(argc), "rc": int(rc)}
            )
        return calls


def rpc_counts(env: dict[str, str]) -> dict[str, int] | None:
    """slurmctld's count of the requests it served, by message type (None without sdiag)."""
    result = subprocess.run(["sdiag"], env=env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        print("sdiag: %s" % result.stderr.strip(), file=sys.stderr, flush=True)
        return None
    text = result.stdout.split("Remote Procedure Call statistics by message type", 1)[-1]
    text = text.split("Remote Procedure Call statistics by user", 1)[0]
    counts = {}
    for line in text.splitlines():
        match = _SDIAG_RPC.match(line)
        if match:
            counts[match.group(1)] = int(match.group(2))
    return counts


def rpc_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int] | None:
    if before is None or after is None:
        return None
    delta = {name: count - before.get(name, 0) for name, count in after.items()}
    # The sdiag that read `before` is counted in `after`.
    delta["REQUEST_STATS_INFO"] = delta.get("REQUEST_STATS_INFO", 0) - 1
    return {name: count for name, count in delta.items() if count}


def peak_concurrency(calls: Sequence[dict]) -> int:
    events = sorted(
        [(call["start"], 1) for call in calls] + [(call["end"], -1) for call in calls],
        key=lambda event: (event[0], event[1]),
    )  # an end before a start at a tie
    alive = peak = 0
    for _, step in events:
        alive += step
        peak = max(peak, alive)
    return peak


# ---------------------------------------------------------------- the queue


class Queue:
    """Submitting and cleaning up the benchmark's jobs with the real clients (not counted)."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def _run(self, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
        )
        if check and result.returncode != 0:
            raise RuntimeError("%s: %s" % (" ".join(argv[:3]), result.stderr.strip()))
        return result

    def submit(self, name: str, command: str = "exec sleep 300") -> str:
        result = self._run(
            ["sbatch", "--parsable", "--job-name=" + name, "--output=/dev/null", "--chdir=/tmp", "--wrap", command]
        )
        return result.stdout.strip().split(";")[0]

    def fill_running(self, size: int, timeout: float = 300) -> dict[str, str]:
        """N fresh jobs, all RUNNING (the partition oversubscribed, see Oversubscribed)."""
        names = [new_uuid("zzzzz", CONTAINER_INFIX) for _ in range(size)]
        with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            # Long enough to outlast a slow fill: only the stop may end them.
            ids = dict(zip(names, pool.map(lambda name: self.submit(name, "exec sleep 3600"), names), strict=True))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            states = [state for _, state in self.listing(names).values()]
            if states.count("RUNNING") == size:
                time.sleep(BATCH_START_SETTLE)
                return ids
            time.sleep(0.5)
        raise RuntimeError("only %d of %d jobs running after %g s" % (states.count("RUNNING"), size, timeout))

    def listing(self, names: Sequence[str]) -> dict[str, tuple]:
        """job id -> (name, state) of the queued jobs with these names."""
        result = self._run(["squeue", "--noheader", "--all", SQUEUE_FORMAT, "--name=" + ",".join(names)])
        rows = (line.split("|") for line in result.stdout.splitlines() if line.strip())
        return {job_id: (name, state) for job_id, name, state in rows}

    def fill(self, size: int) -> dict[str, str]:
        """N fresh jobs: RUNNING_JOBS running (if the node is free), the rest pending."""
        names = [new_uuid("zzzzz", CONTAINER_INFIX) for _ in range(size)]
        ids = {}
        for name in names[:RUNNING_JOBS]:
            ids[name] = self.submit(name)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            states = [state for _, state in self.listing(names[:RUNNING_JOBS]).values()]
            if states.count("RUNNING") == RUNNING_JOBS:
                break
            time.sleep(0.1)
        with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            for name, job_id in zip(names[RUNNING_JOBS:], pool.map(self.submit, names[RUNNING_JOBS:]), strict=True):
                ids[name] = job_id
        return ids

    def table_size(self) -> int:
        result = self._run(["squeue", "--noheader", "--all", "--states=all", "--format=%i"])
        return len(result.stdout.split())

    def patient_listing(self, names: Sequence[str], timeout: float = 120) -> dict[str, tuple]:
        """listing(), asked again while slurmctld, busy ending hundreds of jobs (their
        epilogs), misses its MessageTimeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.listing(names)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def wait_gone(self, names: Sequence[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.patient_listing(names) and time.monotonic() < deadline:
            time.sleep(0.2)

    def clear(self, names: Sequence[str], timeout: float = 60) -> int:
        """Cancel whatever of these is still queued; the number that was left."""
        left = self.patient_listing(names)
        if left:
            self._run(["scancel", *left], check=False)
            deadline = time.monotonic() + timeout
            while self.listing(names) and time.monotonic() < deadline:
                time.sleep(0.2)
        return len(left)


class Oversubscribed:
    """The lab's default partition runs many jobs per CPU while inside; put back after."""

    def __init__(self, queue: Queue, jobs_per_cpu: int = 1000):
        self.queue = queue
        self.jobs_per_cpu = jobs_per_cpu
        shown = queue._run(["scontrol", "--oneliner", "show", "partition"]).stdout.split()
        fields = dict(field.split("=", 1) for field in shown if "=" in field)
        self.partition = fields["PartitionName"]
        self.before = fields["OverSubscribe"]

    def _set(self, value: str) -> None:
        self.queue._run(["scontrol", "update", "PartitionName=" + self.partition, "OverSubscribe=" + value])

    def __enter__(self) -> Oversubscribed:
        self._set("FORCE:%d" % self.jobs_per_cpu)
        return self

    def __exit__(self, *_exc) -> None:
        self._set(self.before)


# ---------------------------------------------------------------- the contenders


def run_engine(clients: Clients, names: list[str], grace_period: float = 0.0) -> dict:
    request = CancelRequest(
        names=tuple(names),
        squeue_path=clients.squeue,
        scancel_path=clients.scancel,
        timeout=120,
        grace_period=grace_period,
    )
    result = cancel_jobs(request, environ=clients.env)
    return {
        "failed": result.failed,
        "reported_scancel": result.scancel_calls,
        "reported_squeue": result.squeue_calls,
        "module_elapsed": result.elapsed,
    }


def run_engine_stop(
    clients: Clients,
    names: list[str],
    wait: bool,
    timeout: float | None = None,
    ctld: str = "auto",
    one_scancel: bool = False,
) -> dict:
    """The engine's default stop: containers' jobs get TERM on their batch step (with
    `one_scancel`, all their ids in one scancel where the per-job path makes 500 a call)."""
    request = CancelRequest(
        names=tuple(names),
        squeue_path=clients.squeue,
        scancel_path=clients.scancel,
        wait=wait,
        timeout=timeout,
        ctld=ctld,
        **({"max_job_ids_per_scancel": len(names)} if one_scancel else {}),
    )
    cpu_before = time.process_time()
    result = cancel_jobs(request, environ=clients.env)
    cpu = time.process_time() - cpu_before
    if result.slurm_error or result.failed:
        print("engine: %s" % result.msg, file=sys.stderr, flush=True)
    return {
        "engine_cpu": cpu,
        "failed": result.failed or len(result.terminated) != len(names),
        "reported_scancel": result.scancel_calls,
        "reported_squeue": result.squeue_calls,
        "module_elapsed": result.elapsed,
        "ctld": result.ctld,
    }


def run_term(
    clients: Clients, names: list[str], wait: bool, ctld: bool = False, timed_with_listing: bool = False
) -> dict:
    """One squeue for the ids, then the floor: one TERM to every batch step (timed alone
    unless `timed_with_listing`), with --ctld one request for all of them from Slurm 24.05 on."""
    name_filter = "--name=" + ",".join(names)

    def listed() -> list[str]:
        result = clients.run([clients.squeue, "--noheader", "--all", SQUEUE_FORMAT, name_filter])
        return [line.split("|")[0] for line in result.stdout.splitlines() if line.strip()]

    listing_began = time.monotonic()
    ids = listed()
    began = listing_began if timed_with_listing else time.monotonic()
    clients.run([clients.scancel, *(["--ctld"] if ctld else []), "--batch", "--signal=TERM", *ids])
    outcome = {"failed": False, "began": began}
    if not wait:
        outcome["ended"] = time.monotonic()
        return outcome
    while listed():
        time.sleep(LIMIT_POLL_PAUSE)
    return outcome


def run_ansible(clients: Clients, names: list[str], workdir: Path) -> dict:
    result_file = workdir / "result.json"
    variables = workdir / "vars.json"
    variables.write_text(json.dumps({"bench_names": names}))
    playbook = workdir / "playbook.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": str(PYTHON)},
                    "tasks": [
                        {
                            MODULE: {
                                "name": "{{ bench_names }}",
                                "squeue_path": clients.squeue,
                                "scancel_path": clients.scancel,
                                "timeout": 120,
                            },
                            "register": "outcome",
                        },
                        {
                            "ansible.builtin.copy": {
                                "content": "{{ outcome | to_json }}",
                                "dest": str(result_file),
                                "mode": "0600",
                            }
                        },
                    ],
                }
            ]
        )
    )
    completed = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-e", "@" + str(variables), str(playbook)],
        cwd=str(REPO),
        env=dict(clients.env, LC_ALL="C.UTF-8"),
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError("ansible-playbook failed:\n" + completed.stdout[-3000:])
    outcome = json.loads(result_file.read_text())
    return {
        "failed": outcome.get("failed", False),
        "reported_scancel": outcome["scancel_calls"],
        "reported_squeue": outcome["squeue_calls"],
        "module_elapsed": outcome["elapsed"],
    }


def run_loop(clients: Clients, names: list[str]) -> dict:
    """The dispatcher of the time, as the issue describes it."""
    slurm_lock = threading.Lock()  # held around every squeue and every scancel
    polled = threading.Condition()
    state = {"generation": 0, "listed": set()}
    stop = threading.Event()

    def poll_once() -> None:
        with slurm_lock:
            result = clients.run([clients.squeue, "--noheader", "--all", "--format=%j"])
        with polled:
            if result.returncode == 0:
                state["listed"] = set(result.stdout.split())
            state["generation"] += 1
            polled.notify_all()

    def poller() -> None:
        next_poll = time.monotonic()
        while not stop.is_set():
            poll_once()
            next_poll += LOOP_POLL_PERIOD
            stop.wait(max(0.0, next_poll - time.monotonic()))

    def worker(name: str) -> None:
        while True:
            with slurm_lock:
                clients.run([clients.scancel, "--name=" + name])
            with polled:
                seen = state["generation"]
                polled.wait_for(lambda seen=seen: state["generation"] > seen)
                still_there = name in state["listed"]
            if not still_there:
                return
            time.sleep(LOOP_RETRY_SLEEP)

    poll_thread = threading.Thread(target=poller, daemon=True)
    poll_thread.start()
    workers = [threading.Thread(target=worker, args=(name,), daemon=True) for name in names]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    ended = time.monotonic()  # the last job seen gone; the poller's end is not the call's
    stop.set()
    poll_thread.join()
    return {"failed": False, "ended": ended}


def run_limit(clients: Clients, names: list[str]) -> dict:
    name_filter = "--name=" + ",".join(names)

    def listed() -> list[str]:
        result = clients.run([clients.squeue, "--noheader", "--all", SQUEUE_FORMAT, name_filter])
        return [line.split("|")[0] for line in result.stdout.splitlines() if line.strip()]

    ids = listed()
    if ids:
        clients.run([clients.scancel, *ids])
        while listed():
            time.sleep(LIMIT_POLL_PAUSE)
    return {"failed": False}


# ---------------------------------------------------------------- one measurement


@dataclasses.dataclass
class Measurement:
    scenario: str
    size: int
    contender: str
    wall: float
    squeue: int
    scancel: int
    named: int  # job ids or names given to scancel, summed over its calls
    peak: int
    left: int  # jobs the contender left queued (cleaned up afterwards)
    running_at_start: int
    table: int  # jobs slurmctld holds at the start, finished ones included
    module_elapsed: float | None = None
    failed: bool = False
    # Requests slurmctld served during the run, by message type (from sdiag; None without).
    rpcs: dict[str, int] | None = None
    # The engine's own CPU seconds in this process (its clients' not included).
    engine_cpu: float | None = None
    # The machine's load average (1 min) as the contender started.
    load: float | None = None
    # Which round of --stop-rounds it belongs to (0 when the contenders ran once).
    round: int = 0
    # The CPUs' idle share in the second before a stop was timed (see wait_for_quiet).
    idle: float | None = None

    @property
    def kill_rpcs(self) -> int | None:
        return None if self.rpcs is None else sum(self.rpcs.get(name, 0) for name in KILL_RPCS)

    @property
    def client_rpcs(self) -> int | None:
        if self.rpcs is None:
            return None
        return sum(count for name, count in self.rpcs.items() if not name.startswith(DAEMON_RPC_PREFIXES))

    @property
    def processes(self) -> int:
        return self.squeue + self.scancel


def finisher(queue: Queue, job_ids: list[str], started: threading.Event) -> threading.Thread:
    def finish() -> None:
        started.wait()
        time.sleep(FINISH_AFTER)
        queue._run(["scancel", *job_ids], check=False)

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return thread


def cpu_times() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    return fields[3] + fields[4], sum(fields)  # idle and iowait


def wait_for_quiet(idle_wanted: float = QUIET_IDLE, timeout: float = QUIET_TIMEOUT) -> float:
    """Wait until the CPUs were at least `idle_wanted` idle over a window; the last window's idle share."""
    deadline = time.monotonic() + timeout
    idle_share = 0.0
    while True:
        idle_before, total_before = cpu_times()
        time.sleep(QUIET_WINDOW)
        idle_after, total_after = cpu_times()
        idle_share = (idle_after - idle_before) / max(total_after - total_before, 1)
        if idle_share >= idle_wanted or time.monotonic() >= deadline:
            return idle_share


def measure(
    queue: Queue,
    env: dict[str, str],
    workdir: Path,
    scenario: str,
    size: int,
    contender: str,
    run: Callable[[Clients, list[str]], dict],
) -> Measurement:
    ids = queue.fill_running(size) if scenario == STOP_SCENARIO else queue.fill(size)
    names = list(ids)
    running = sum(1 for _, state in queue.listing(names).values() if state == "RUNNING")
    table_size = queue.table_size()
    clients = Clients(Path(tempfile.mkdtemp(dir=workdir, prefix=contender + "-")), env)
    started = threading.Event()
    helper = None
    if scenario == "half end on their own":
        helper = finisher(queue, [ids[name] for name in names[::2]], started)
    idle = wait_for_quiet() if scenario == STOP_SCENARIO else None
    counted_before = rpc_counts(env)
    load = os.getloadavg()[0]
    began = time.monotonic()
    started.set()
    outcome = run(clients, names)
    ended = outcome.get("ended", time.monotonic())
    rpcs = rpc_delta(counted_before, rpc_counts(env))
    if "began" in outcome:  # the floor's own squeue is not part of it
        began = outcome["began"]
    wall = ended - began
    began_epoch = time.time() - (time.monotonic() - began)
    ended_epoch = time.time() - (time.monotonic() - ended)
    if helper is not None:
        helper.join()
    if scenario == STOP_SCENARIO:
        # A job sent TERM leaves on its own within seconds (minutes for 1,000 on this lab);
        # what stays was not reached.
        queue.wait_gone(names, timeout=STOP_GONE_TIMEOUT)
    left = queue.clear(names)
    # The loop's poller may start one last squeue after the last job was seen gone.
    calls = [call for call in clients.calls() if began_epoch <= call["start"] <= ended_epoch]
    squeue = [call for call in calls if call["program"] == "squeue"]
    scancel = [call for call in calls if call["program"] == "scancel"]
    named = sum(call["argc"] for call in scancel)
    return Measurement(
        scenario,
        size,
        contender,
        wall,
        len(squeue),
        len(scancel),
        named,
        peak_concurrency(calls),
        left,
        running,
        table_size,
        outcome.get("module_elapsed"),
        bool(outcome.get("failed")),
        rpcs,
        outcome.get("engine_cpu"),
        load,
        idle=idle,
    )


# ---------------------------------------------------------------- report


def verdicts(rows: list[Measurement]) -> list[str]:
    """The issue's targets, for every engine row against its scenario's limit and loop."""
    lines = []
    for row in rows:
        if not row.contender.startswith(("engine", "ansible")):
            continue
        peers = {
            other.contender: other
            for other in rows
            if (other.scenario, other.size, other.round) == (row.scenario, row.size, row.round)
        }
        if row.scenario == STOP_SCENARIO:
            lines.append(
                stop_verdict(
                    row,
                    peers.get(STOP_FLOORS[row.contender]),
                    peers.get("ctld"),
                    peers.get(CTLD_LIKE_FOR_LIKE.get(row.contender, "")),
                )
            )
            continue
        wall = row.module_elapsed if row.contender == "ansible" else row.wall
        checks = [
            ("<= 10 client processes", row.processes <= 10),
            ("peak <= %d" % (MAX_CONCURRENT_SCANCEL + 1), row.peak <= MAX_CONCURRENT_SCANCEL + 1),
        ]
        if "grace" not in row.contender:  # a grace period is waited for by design
            checks += [
                ("wall <= 3 x limit (%.2f s)" % (3 * peers["limit"].wall), wall <= 3 * peers["limit"].wall),
                ("wall <= loop / 4 (%.2f s)" % (peers["loop"].wall / 4), wall <= peers["loop"].wall / 4),
            ]
        checks.append(("nothing left", row.left == 0 and not row.failed))
        lines.append(
            "%s, N=%d, %s: %s"
            % (
                row.scenario,
                row.size,
                row.contender,
                "; ".join("%s %s" % (text, "ok" if ok else "MISSED") for text, ok in checks),
            )
        )
    return lines


def stop_verdict(
    row: Measurement,
    floor: Measurement | None,
    ctld_floor: Measurement | None = None,
    like_for_like: Measurement | None = None,
) -> str:
    checks = [
        ("<= 10 client processes", row.processes <= 10),
        ("peak <= %d" % (MAX_CONCURRENT_SCANCEL + 1), row.peak <= MAX_CONCURRENT_SCANCEL + 1),
    ]
    if like_for_like is not None:
        limit = CTLD_FLOOR_FACTOR * like_for_like.wall
        checks.append(
            ("wall <= %g x %s (%.2f s)" % (CTLD_FLOOR_FACTOR, like_for_like.contender, limit), row.wall <= limit)
        )
    one_request = ctld_floor is not None and row.contender in ("engine", "engine, one scancel")
    if one_request:
        # Issue 23: where slurmctld takes one request for all, against both floors.
        limit = CTLD_FLOOR_FACTOR * ctld_floor.wall
        checks.append(("wall <= %g x ctld (%.2f s)" % (CTLD_FLOOR_FACTOR, limit), row.wall <= limit))
    if floor is not None and one_request:
        checks.append(
            (
                "wall <= %s / %g (%.2f s)" % (floor.contender, PER_JOB_SPEEDUP, floor.wall / PER_JOB_SPEEDUP),
                row.wall <= floor.wall / PER_JOB_SPEEDUP,
            )
        )
        if row.kill_rpcs is not None and floor.kill_rpcs is not None:
            checks.append(
                (
                    "kill RPCs %d < %s's %d" % (row.kill_rpcs, floor.contender, floor.kill_rpcs),
                    row.kill_rpcs < floor.kill_rpcs,
                )
            )
    elif floor is not None:
        checks.append(("wall <= 3 x %s (%.2f s)" % (floor.contender, 3 * floor.wall), row.wall <= 3 * floor.wall))
    checks.append(("all sent TERM, nothing left", row.left == 0 and not row.failed))
    return "%s, N=%d, %s: %s" % (
        row.scenario,
        row.size,
        row.contender,
        "; ".join("%s %s" % (text, "ok" if ok else "MISSED") for text, ok in checks),
    )


def table(rows: list[Measurement]) -> str:
    header = (
        "| scenario | N | round | contender | wall s | squeue | scancel | processes | "
        "named to scancel | peak alive | left | table | kill RPCs | client RPCs | engine CPU s | load | idle |"
    )
    lines = [header, "|" + "---|" * 17]
    for row in rows:
        wall = "%.2f" % row.wall
        if row.module_elapsed is not None and row.contender == "ansible":
            wall += " (module %.2f)" % row.module_elapsed
        lines.append(
            "| %s | %d | %d | %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s | %s |"
            % (
                row.scenario,
                row.size,
                row.round + 1,
                row.contender,
                wall,
                row.squeue,
                row.scancel,
                row.processes,
                row.named,
                row.peak,
                row.left,
                row.table,
                _count(row.kill_rpcs),
                _count(row.client_rpcs),
                "-" if row.engine_cpu is None else "%.2f" % row.engine_cpu,
                "-" if row.load is None else "%.1f" % row.load,
                "-" if row.idle is None else "%.0f %%" % (100 * row.idle),
            )
        )
    return "\n".join(lines)


def _count(value: int | None) -> str:
    return "-" if value is None else str(value)


STOP_CONTENDERS = (
    "term",
    "ctld",
    "ctld, listed",
    "engine",
    "engine, per job",
    "engine, one scancel",
    "term, gone",
    "ctld, gone",
    "engine, wait",
)


def stop_floors(engine: str) -> list[str]:
    """The floors an engine contender can be judged against: one request per job, and with
    one request for all (--ctld) the floor timed alone and the like-for-like one."""
    floors = [STOP_FLOORS[engine]]
    if engine in ("engine", "engine, one scancel"):
        floors.append("ctld")
    if engine in CTLD_LIKE_FOR_LIKE:
        floors.append(CTLD_LIKE_FOR_LIKE[engine])
    return floors


def stop_contender(name: str, engine_timeout: float | None) -> Callable[[Clients, list[str]], dict]:
    wait = name.endswith(("gone", "wait"))
    if name.startswith("engine"):
        ctld = "never" if name == "engine, per job" else "auto"
        one_scancel = name == "engine, one scancel"
        return lambda clients, names: run_engine_stop(clients, names, wait, engine_timeout, ctld, one_scancel)
    ctld = name.startswith("ctld")
    timed_with_listing = name in CTLD_LIKE_FOR_LIKE.values()
    return lambda clients, names: run_term(clients, names, wait, ctld, timed_with_listing)


def measure_stopping(
    queue: Queue, env: dict[str, str], workdir: Path, size: int, arguments: argparse.Namespace
) -> list[Measurement]:
    contenders = [
        (name, stop_contender(name, arguments.stop_timeout))
        for name in STOP_CONTENDERS
        if name in arguments.stop_contenders
    ]
    if arguments.reverse:
        contenders.reverse()
    rows = []
    for number in range(arguments.stop_rounds):
        # Each round starts one contender later: the one after another's 1,000 TERMs runs
        # while those jobs still end, and no contender should always be that one.
        shift = number % len(contenders)
        for contender, run in contenders[shift:] + contenders[:shift]:
            row = measure(queue, env, workdir, STOP_SCENARIO, size, contender, run)
            row.round = number
            rows.append(row)
            report_row(row)
    return rows


def round_summary(rows: list[Measurement]) -> list[str]:
    """With several rounds: each contender's median wall, and each engine's median of its
    per-round ratios to the floors it is held to (the verdicts judge single rounds)."""
    stopping = [row for row in rows if row.scenario == STOP_SCENARIO]
    if len({row.round for row in stopping}) < 2:
        return []
    lines = []
    for size in sorted({row.size for row in stopping}):
        sized = [row for row in stopping if row.size == size]
        walls: dict[str, list[float]] = {}
        for row in sized:
            walls.setdefault(row.contender, []).append(row.wall)
        for contender, values in walls.items():
            lines.append(
                "N=%d, %s: wall median %.3f s (%.3f-%.3f), %d rounds"
                % (size, contender, statistics.median(values), min(values), max(values), len(values))
            )
        for contender in walls:
            for floor in (CTLD_LIKE_FOR_LIKE.get(contender), "ctld", STOP_FLOORS.get(contender)):
                ratios = _round_ratios(sized, contender, floor)
                if ratios:
                    lines.append(
                        "N=%d, %s / %s: median %.2fx (rounds: %s)"
                        % (size, contender, floor, statistics.median(ratios), ", ".join("%.2f" % r for r in ratios))
                    )
    return lines


def _round_ratios(rows: list[Measurement], contender: str, floor: str | None) -> list[float]:
    if floor is None or contender == floor:
        return []
    by_round: dict[int, dict[str, float]] = {}
    for row in rows:
        by_round.setdefault(row.round, {})[row.contender] = row.wall
    return [walls[contender] / walls[floor] for walls in by_round.values() if contender in walls and walls.get(floor)]


def report_row(row: Measurement) -> None:
    print(
        "%-22s N=%-5d %-16s %6.2f s  squeue %4d  scancel %4d  named %4d  "
        "peak %d  left %d  running at start %d  table %d  kill RPCs %s  client RPCs %s  engine CPU %s  load %.1f  idle %s"
        % (
            row.scenario,
            row.size,
            row.contender,
            row.wall,
            row.squeue,
            row.scancel,
            row.named,
            row.peak,
            row.left,
            row.running_at_start,
            row.table,
            _count(row.kill_rpcs),
            _count(row.client_rpcs),
            "-" if row.engine_cpu is None else "%.2f s" % row.engine_cpu,
            row.load or 0.0,
            "-" if row.idle is None else "%.0f %%" % (100 * row.idle),
        ),
        file=sys.stderr,
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[200, 1000])
    parser.add_argument(
        "--stop-sizes", type=int, nargs="*", default=[200], help="N running containers to stop (issue 10); none to skip"
    )
    parser.add_argument(
        "--stop-contenders",
        nargs="+",
        choices=list(STOP_CONTENDERS),
        default=list(STOP_CONTENDERS),
        metavar="NAME",
        help="which stopping contenders run (default all: %s); each engine needs its floor"
        % ", ".join(STOP_CONTENDERS),
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        help="the engine's timeout when stopping (default its own, 240 s with TERM); a single scancel "
        "of 1,000 running jobs takes minutes on the 2-CPU lab",
    )
    parser.add_argument(
        "--stop-rounds",
        type=int,
        default=1,
        help="run the stopping contenders this many times, each round starting one contender later; "
        "medians and per-round ratios follow the table",
    )
    parser.add_argument("--no-ansible", action="store_true", help="skip the run through ansible-playbook")
    parser.add_argument(
        "--reverse", action="store_true", help="run the contenders of each scenario in the opposite order"
    )
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument(
        "--keep-logs",
        type=Path,
        help="keep each contender's client log (calls.log: program, start, end, argument count, exit code) "
        "under this directory instead of a temporary one",
    )
    arguments = parser.parse_args(argv)
    unmatched = [
        name
        for name in arguments.stop_contenders
        if name in STOP_FLOORS and not set(stop_floors(name)).intersection(arguments.stop_contenders)
    ]
    if unmatched:
        parser.error(
            "--stop-contenders: %s need(s) a floor (%s)"
            % (", ".join(unmatched), "; ".join(" or ".join(stop_floors(name)) for name in unmatched))
        )

    lab = labctl.lab_settings()
    env = lab.slurm_env()
    env = {key: value for key, value in env.items() if not key.startswith(("SQUEUE_", "SCANCEL_"))}
    queue = Queue(env)
    contenders = [("engine", run_engine)]
    if not arguments.no_ansible:
        contenders.append(("ansible", None))
    contenders += [("loop", run_loop), ("limit", run_limit)]
    half_contenders = [
        ("engine", run_engine),
        ("engine, grace %g s" % GRACE_PERIOD, lambda clients, names: run_engine(clients, names, GRACE_PERIOD)),
        ("loop", run_loop),
        ("limit", run_limit),
    ]
    rows: list[Measurement] = []
    if arguments.keep_logs:
        arguments.keep_logs.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="slurm-cancel-bench-", dir=arguments.keep_logs))
    try:
        for size in arguments.sizes:
            for scenario, entries in (("all queued", contenders), ("half end on their own", half_contenders)):
                if arguments.reverse:
                    entries = list(reversed(entries))
                for contender, run in entries:
                    if contender == "ansible":
                        run_dir = Path(tempfile.mkdtemp(dir=workdir, prefix="playbook-"))
                        run = (lambda directory: lambda clients, names: run_ansible(clients, names, directory))(run_dir)
                    row = measure(queue, env, workdir, scenario, size, contender, run)
                    rows.append(row)
                    report_row(row)
        if arguments.stop_sizes:
            with Oversubscribed(queue):
                for size in arguments.stop_sizes:
                    rows.extend(measure_stopping(queue, env, workdir, size, arguments))
    finally:
        if not arguments.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
    print(table(rows))
    print()
    for line in verdicts(rows):
        print("- " + line)
    for line in round_summary(rows):
        print("- " + line)
    if arguments.json:
        arguments.json.write_text(json.dumps([dataclasses.asdict(row) for row in rows], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
