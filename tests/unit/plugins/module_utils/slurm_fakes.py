# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A fake clock and a scripted Slurm for the cancel engine's tests.

Time only moves when the code under test sleeps or waits on a command, so
tests assert exact timings and never really wait. The fake Slurm keeps a
queue whose jobs change state at given instants; squeue and scancel act on
it with the timings LAB.md measured, unless a test scripts other outcomes.
"""

from __future__ import annotations

import stat
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Deque, Dict, List, Optional

from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.queue import QueueEntry
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.runner import CommandNotFoundError

UNREACHABLE = "squeue: error: Unable to contact slurm controller (connect failure)"
# What LAB.md measured with slurmctld down and MessageTimeout=10.
SQUEUE_WHEN_DOWN = dict(returncode=1, stderr=UNREACHABLE, duration=9.0)
SCANCEL_WHEN_DOWN = dict(
    returncode=8,
    stderr="scancel: error: Kill job error on job id 1: Unable to contact slurm controller (connect failure)",
    duration=10.0,
    takes_effect=False,
)


# What scancel prints for a job Slurm refuses to this user: the per-job path exits with
# ESLURM_ACCESS_DENIED (2002) modulo 256, scancel --ctld from 24.05 on exits 0 all the same
# (_ctld_signal_jobs in src/scancel/scancel.c).
DENIED_LINE = "scancel: error: Kill job error on job id %s: Access/permission denied\n"
DENIED_EXIT = 2002 % 256
# slurmctld's answer to scancel --ctld --state=PENDING for a job that is running
# (_signal_job_matches_filter in src/slurmctld/job_mgr.c, 24.05 to 25.11).
FILTER_MISMATCH_LINE = (
    "scancel: error: Kill job error on job id %s: Job state %s != filter state PENDING: Cannot signal job\n"
)


def container(number: int) -> str:
    """The UUID of container `number`, as the cancel engine's tests name their Slurm jobs."""
    return "zzzzz-dz642-%015d" % number


def crunch_job(number: int) -> str:
    return "zzzzz-8i9sb-%015d" % number


def listed(job_id, state, name, user="crunch") -> QueueEntry:
    """One line of squeue's listing, as the engine reads it."""
    return QueueEntry(str(job_id), state, user, name)


def release_tuple(release: str):
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.start = start
        self.time = start
        self.sleeps: List[float] = []

    def now(self) -> float:
        return self.time

    # The engines that take a clock as a callable (_cleanup.engine, _database.connect) call it.
    __call__ = now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, seconds
        self.sleeps.append(seconds)
        self.time += seconds

    def elapsed(self) -> float:
        return self.time - self.start


@dataclass
class FakeJob:
    job_id: str
    name: str
    user: str = "crunch"
    state: str = "RUNNING"
    # Instant the job leaves the queue (None: it stays).
    gone_at: Optional[float] = None
    # Instant it turns COMPLETING before leaving.
    completing_at: Optional[float] = None
    # Seconds after a signal reaches it that the job exits (None: it ignores signals) ...
    exits_after_signal: Optional[float] = None
    # ... once this many signals have reached it (a crunch-run busy saving output, say).
    signals_to_exit: int = 1
    # Instant a PENDING job starts RUNNING (None: it stays as it is).
    starts_at: Optional[float] = None
    # What reached it, in order: "cancel", or the signal ("--signal=" value, "+batch" with --batch).
    received: List[str] = field(default_factory=list)

    def state_at(self, now: float) -> Optional[str]:
        if self.gone_at is not None and now >= self.gone_at:
            return None
        if self.completing_at is not None and now >= self.completing_at:
            return "COMPLETING"
        if self.starts_at is not None and now >= self.starts_at:
            return "RUNNING"
        return self.state


@dataclass
class Scripted:
    """One scripted outcome for the next squeue or scancel."""

    returncode: int = 0
    stderr: str = ""
    duration: Optional[float] = None
    # Whether a scancel with this outcome still cancels (a hung slurmctld does, later).
    takes_effect: bool = True
    # What the program prints instead of the fake queue's listing (a program that is not
    # Slurm's squeue, say); None: the listing.
    stdout: Optional[str] = None


@dataclass
class FakeProcess:
    clock: FakeClock
    argv: List[str]
    env: Dict[str, str]
    started: float
    ends: float
    returncode: int
    stdout: str = ""
    stderr: str = ""
    killed: bool = False

    def poll(self) -> Optional[int]:
        return self.returncode if self.clock.now() >= self.ends else None

    def wait(self, timeout: float) -> Optional[int]:
        left = self.ends - self.clock.now()
        if left <= timeout:
            self.clock.sleep(max(left, 0.0))
            return self.returncode
        self.clock.sleep(timeout)
        return None

    def kill(self) -> None:
        if self.clock.now() < self.ends:
            self.killed = True
            self.ends = self.clock.now()
            self.returncode = -9
            self.stdout = ""

    def output(self):
        assert self.clock.now() >= self.ends, "output read before the command ended"
        return self.stdout, self.stderr

    def alive_at(self, instant: float) -> bool:
        return self.started <= instant < self.ends


@dataclass
class FakeSlurm:
    clock: FakeClock
    squeue_duration: float = 0.005
    scancel_duration: float = 0.08
    # How long a cancelled running job shows COMPLETING.
    completing_linger: float = 0.04
    jobs: Dict[str, FakeJob] = field(default_factory=dict)
    processes: List[FakeProcess] = field(default_factory=list)
    missing: set = field(default_factory=set)
    scripted: Dict[str, Deque[Scripted]] = field(default_factory=lambda: {"squeue": deque(), "scancel": deque()})
    # Jobs that scancel does not remove (a job stuck in the kernel, say).
    unkillable: set = field(default_factory=set)
    peak_alive: int = 0
    # From this instant on, slurmctld does not answer.
    down_since: Optional[float] = None
    # The clients' release, and what `scancel --version` prints of it (Debian's packages
    # say slurm-wlm, SchedMD's tarball slurm); `version_output`, when set, is printed instead.
    release: str = "22.05.8"
    package: str = "slurm-wlm"
    version_output: Optional[str] = None
    version_returncode: int = 0
    version_duration: float = 0.003
    version_probes: List[FakeProcess] = field(default_factory=list)
    # Jobs of another user, which Slurm refuses to signal or cancel for this one.
    denied: set = field(default_factory=set)
    # REQUEST_KILL_JOB(S) slurmctld received, one entry per scancel: how many.
    kill_requests: List[int] = field(default_factory=list)

    # -- setting the scene ---------------------------------------------------

    def add(
        self,
        job_id,
        name,
        state="RUNNING",
        user="crunch",
        gone_at=None,
        completing_at=None,
        exits_after_signal=None,
        starts_at=None,
        signals_to_exit=1,
    ) -> FakeJob:
        job = FakeJob(
            str(job_id), name, user, state, gone_at, completing_at, exits_after_signal, signals_to_exit, starts_at
        )
        self.jobs[job.job_id] = job
        return job

    def script(self, program: str, *outcomes: Scripted) -> None:
        self.scripted[program].extend(outcomes)

    # -- what happened -------------------------------------------------------

    def calls(self, program: Optional[str] = None) -> List[FakeProcess]:
        return [p for p in self.processes if program is None or p.argv[0].endswith(program)]

    def argvs(self, program: Optional[str] = None) -> List[List[str]]:
        return [p.argv for p in self.calls(program)]

    def relative_starts(self, program: str) -> List[float]:
        return [round(p.started - self.clock.start, 6) for p in self.calls(program)]

    # -- the Runner interface ------------------------------------------------

    def one_request_per_call(self, argv: List[str]) -> bool:
        """Whether this scancel sends one request for all its ids (--ctld from 24.05 on)."""
        return "--ctld" in argv and release_tuple(self.release) >= (24, 5)

    def start(self, argv, env) -> FakeProcess:
        argv = list(argv)
        if argv[0] in self.missing:
            raise CommandNotFoundError("cannot run %s: No such file or directory" % argv[0])
        now = self.clock.now()
        program = "squeue" if argv[0].endswith("squeue") else "scancel"
        if program == "scancel" and "--version" in argv:
            return self._version(argv, env, now)
        outcome = self._outcome(program, now)
        default = self.squeue_duration if program == "squeue" else self.scancel_duration
        duration = default if outcome.duration is None else outcome.duration
        process = FakeProcess(
            self.clock, argv, dict(env), now, now + duration, outcome.returncode, stderr=outcome.stderr
        )
        if outcome.stdout is not None:
            process.stdout = outcome.stdout
        elif program == "squeue" and outcome.returncode == 0:
            process.stdout = self._listing(argv, now)
        if program == "scancel" and outcome.takes_effect:
            self._answer(process, self._cancel(argv, now + duration))
        if program == "scancel":
            ids = _job_ids(argv)
            self.kill_requests.append(1 if self.one_request_per_call(argv) else len(ids))
        self.processes.append(process)
        self.peak_alive = max(self.peak_alive, sum(p.alive_at(now) for p in self.processes))
        return process

    def _version(self, argv: List[str], env, now: float) -> FakeProcess:
        printed = self.version_output if self.version_output is not None else "%s %s\n" % (self.package, self.release)
        process = FakeProcess(
            self.clock, argv, dict(env), now, now + self.version_duration, self.version_returncode, stdout=printed
        )
        self.version_probes.append(process)
        return process

    def _answer(self, process: FakeProcess, refusals: List[str]) -> None:
        """What scancel prints of the jobs Slurm did not take, and its exit status."""
        if not refusals or process.returncode != 0:
            return
        process.stderr += "".join(refusals)
        if not self.one_request_per_call(process.argv) and any("Access/permission denied" in line for line in refusals):
            process.returncode = DENIED_EXIT

    def _outcome(self, program: str, now: float) -> Scripted:
        if self.scripted[program]:
            return self.scripted[program].popleft()
        if self.down_since is not None and now >= self.down_since:
            return Scripted(**(SQUEUE_WHEN_DOWN if program == "squeue" else SCANCEL_WHEN_DOWN))
        return Scripted()

    def _listing(self, argv: List[str], now: float) -> str:
        names = None
        for arg in argv:
            if arg.startswith("--name="):
                names = set(arg[len("--name=") :].split(","))
        lines = []
        for job in self.jobs.values():
            state = job.state_at(now)
            if state is None or (names is not None and job.name not in names):
                continue
            lines.append("%s|%s|%s|%s\n" % (job.job_id, state, job.user, job.name))
        # As squeue: the header first, even for an empty queue, unless --noheader.
        header = "" if "--noheader" in argv else "JOBID|STATE|USER|NAME\n"
        return header + "".join(lines)

    def _cancel(self, argv: List[str], effective_at: float) -> List[str]:
        """Act on the jobs; the lines scancel prints for those Slurm does not take."""
        signal = next((arg[len("--signal=") :] for arg in argv if arg.startswith("--signal=")), None)
        signalled = signal is not None
        refusals = []
        # scancel --state=PENDING leaves a job that is not pending alone, and exits 0; with
        # --ctld from 24.05 on slurmctld says so, and scancel prints it.
        only_state = next((arg[len("--state=") :] for arg in argv if arg.startswith("--state=")), None)
        for job_id in _job_ids(argv):
            job = self.jobs.get(job_id)
            if job is None:
                continue
            state = job.state_at(effective_at)
            if state is None or state == "COMPLETING":
                continue
            if only_state not in (None, state):
                if self.one_request_per_call(argv):
                    refusals.append(FILTER_MISMATCH_LINE % (job_id, state))
                continue
            if job_id in self.denied:
                refusals.append(DENIED_LINE % job_id)
                continue
            job.received.append(signal + ("+batch" if "--batch" in argv else "") if signalled else "cancel")
            if job_id in self.unkillable:
                continue
            if signalled:
                heard = sum(what != "cancel" for what in job.received)
                if state == "RUNNING" and job.exits_after_signal is not None and heard >= job.signals_to_exit:
                    self._leave(job, effective_at + job.exits_after_signal, linger=True)
            elif state == "PENDING":
                self._leave(job, effective_at, linger=False)
            else:
                self._leave(job, effective_at, linger=True)
        return refusals

    def _leave(self, job: FakeJob, instant: float, linger: bool) -> None:
        gone_at = instant + (self.completing_linger if linger else 0.0)
        if job.gone_at is not None and job.gone_at <= gone_at:
            return
        job.gone_at = gone_at
        if linger:
            job.completing_at = instant


def _job_ids(argv: List[str]) -> List[str]:
    return [arg for arg in argv[1:] if not arg.startswith("-")]


def fake_client_directory(directory: Path) -> Path:
    """``directory`` holding executables named squeue and scancel, for a module to find on PATH
    (the fake answers for them)."""
    for program in ("squeue", "scancel"):
        path = directory / program
        path.write_text("")
        path.chmod(stat.S_IRWXU)
    return directory


def cancel_jobs_on(fake: FakeSlurm, cancel_jobs: Callable[..., Any]) -> Callable[..., Any]:
    """`cancel_jobs` as _cancel.run calls it, run on `fake`'s Slurm and clock: what tests
    put in _cancel.run's place for it (the modules' tests import it by the collection's
    name, the engine's by the source tree's, so each patches its own copy)."""

    def cancel_on_fake(request, environ):
        return cancel_jobs(request, runner=fake, clock=fake.clock, environ=environ)

    return cancel_on_fake


# -- scontrol: show node and update NodeName=... State=RESUME ---------------------------------

# The reason slurmctld sets on a node whose slurmd registered after an unplanned reboot,
# with the user and time `scontrol show node` appends to every reason.
REBOOT_REASON = "Node unexpectedly rebooted [slurm@2026-12-03T10:00:06]"
UPDATE_DENIED = "Invalid user for SlurmUser slurm, update request denied\n"


@dataclass
class FakeNode:
    name: str
    state: str = "IDLE"
    # As scontrol shows it, [user@time] included; None: no Reason= line.
    reason: Optional[str] = None


def show_node_text(nodes: List[FakeNode]) -> str:
    """What `scontrol --all show node` prints of `nodes`: the lines slurm_nodes reads, each
    node's other fields cut to a few (the full text of each release is in _slurm/test_nodes.py)."""
    lines = []
    for node in nodes:
        lines.append("NodeName=%s Arch=x86_64 CoresPerSocket=1" % node.name)
        lines.append("   State=%s ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A" % node.state)
        if node.reason is not None:
            lines.append("   Reason=%s" % node.reason)
    return "".join(line + "\n" for line in lines)


@dataclass
class EndedCommand:
    """A command's process as slurm_runner starts it, already ended (returncode None: one that
    never ends, until killed)."""

    returncode: Optional[int]
    stdout: str = ""
    stderr: str = ""
    killed: bool = False

    def wait(self, timeout: float) -> Optional[int]:
        return self.returncode

    def kill(self) -> None:
        self.killed = True

    def output(self):
        return self.stdout, self.stderr


class FakeScontrol:
    """scontrol for the engines' runner: `show node` prints the nodes as they are now (or
    `show_answer`, a failure say), `update NodeName=N State=RESUME` makes N IDLE without a
    reason, unless `refuse_update` has slurmctld refuse it as it refuses a user not
    SlurmUser or root. Every argv and environment is kept."""

    def __init__(
        self, nodes: List[FakeNode], refuse_update: bool = False, show_answer: Optional[EndedCommand] = None
    ) -> None:
        self.nodes = {node.name: node for node in nodes}
        self.refuse_update = refuse_update
        self.show_answer = show_answer
        self.calls: List[List[str]] = []
        self.envs: List[Dict[str, str]] = []

    def start(self, argv: List[str], env: Dict[str, str]) -> EndedCommand:
        self.calls.append(list(argv))
        self.envs.append(dict(env))
        if argv[-2:] == ["show", "node"]:
            return self.show_answer or EndedCommand(0, self.text())
        if self.refuse_update:
            return EndedCommand(1, stderr=UPDATE_DENIED)
        named = [arg[len("NodeName=") :] for arg in argv if arg.startswith("NodeName=")]
        if "State=RESUME" in argv and named and named[0] in self.nodes:
            self.nodes[named[0]] = FakeNode(named[0])
        return EndedCommand(0)

    def text(self) -> str:
        return show_node_text(list(self.nodes.values()))

    def updates(self) -> List[List[str]]:
        return [call for call in self.calls if "update" in call]


def scontrol_on_path(directory: Path, nodes: List[FakeNode]) -> Path:
    """An executable scontrol in `directory`, for a module to find on PATH: `show node`
    prints `nodes`, `update` appends its arguments to the log file it returns (the nodes
    stay as they are)."""
    (directory / "nodes.txt").write_text(show_node_text(nodes))
    log = directory / "updates.log"
    program = directory / "scontrol"
    program.write_text(
        '#!/bin/sh\ncase " $* " in *" update "*) echo "$*" >> %s ;; *) cat %s ;; esac\n'
        % (log, directory / "nodes.txt")
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return log
