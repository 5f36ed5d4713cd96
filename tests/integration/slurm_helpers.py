"""Shared helpers of the slurm_job_cancel integration tests.

- `Slurm`: Slurm's clients aimed at one lab (submit, list, cancel), remembering the jobs a
  test submitted so that teardown cancels exactly those and nothing else;
- `SlurmTiming`: how long slurmctld may take to start or end a job or to take a node back,
  derived from the intervals the running slurmctld reports (`scontrol show config`);
- `PrivateLab`: a lab of its own (LAB_DIR in /tmp, ports 55434/16837/16838) for what must
  not happen to the shared one: a sleeping Epilog, slurmctld or munged stopped;
- `logging_client`: a wrapper script that logs each call of a Slurm client and execs it;
- `run_playbook`: real `ansible-playbook` runs of the module, results as dicts.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import CONTAINER_INFIX, new_uuid
from lab import labctl
from tests.integration import module_playbook
from tests.integration.module_playbook import PYTHON

LABCTL = Path(labctl.__file__)
MODULE = "arvados_ops.recovery.slurm_job_cancel"

PRIVATE_LAB_PORTS = {"LAB_PG_PORT": "55434", "LAB_SLURMCTLD_PORT": "16837", "LAB_SLURMD_PORT": "16838"}
# The lab's slurm.conf says MessageTimeout=10.
MESSAGE_TIMEOUT = 10.0
# Slurm 22.05's defaults (slurm.conf(5)), for what `scontrol show config` does not state.
SLURM_DEFAULTS = {"sched_interval": 60.0, "bf_interval": 30.0, "batch_sched_delay": 3.0}


def job_name() -> str:
    """A container UUID nobody else uses: Slurm job names of parallel runs never collide."""
    return new_uuid("zzzzz", CONTAINER_INFIX)


def wait_for(condition: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def clean_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PG", "SLURM_", "LAB_", "SQUEUE_", "SCANCEL_"))
    }
    env.update(extra)
    env["LC_ALL"] = "C"
    return env


@dataclasses.dataclass(frozen=True)
class SlurmTiming:
    """The intervals of a running slurmctld that bound how long its events may take."""

    sched_interval: float
    bf_interval: float
    batch_sched_delay: float
    kill_wait: float
    message_timeout: float

    @classmethod
    def parse(cls, show_config: str) -> SlurmTiming:
        """From the `Name = value` lines `scontrol show config` prints."""
        config = {}
        for line in show_config.splitlines():
            name, separator, value = line.partition("=")
            if separator:
                config[name.strip()] = value.strip()
        scheduler = dict(SLURM_DEFAULTS)
        for parameter in config.get("SchedulerParameters", "").split(","):
            name, _separator, value = parameter.partition("=")
            if name in scheduler and value:
                scheduler[name] = float(value)
        return cls(
            kill_wait=_seconds(config["KillWait"]),
            message_timeout=_seconds(config["MessageTimeout"]),
            **scheduler,
        )

    @property
    def start_bound(self) -> float:
        """The longest a job that fits a free CPU may stay PENDING.

        slurmctld tries to start it batch_sched_delay after sbatch; a busy slurmctld can
        leave it to a later pass, and no pass starts anything while a job is COMPLETING
        (up to KillWait, then slurmd's reply within MessageTimeout). The main scheduler's
        full pass comes every sched_interval: two of them, so that the one that was due
        anyway may be late. (Backfill, every bf_interval, only runs after a change.)
        """
        return self.batch_sched_delay + self.kill_wait + self.message_timeout + 2 * self.sched_interval

    @property
    def end_bound(self) -> float:
        """The longest a cancelled job may stay queued (COMPLETING): KillWait from SIGTERM to
        SIGKILL, then slurmctld's kill request and slurmd's epilog-complete message, each
        within MessageTimeout. The lab's Epilog sleeps 0 s unless a test says otherwise."""
        return self.kill_wait + 2 * self.message_timeout

    @property
    def node_bound(self) -> float:
        """The longest a resumed node may take to be idle again: slurmctld pings it at once
        and waits MessageTimeout for the answer, once more if that ping is lost."""
        return 2 * self.message_timeout + 2


def _seconds(value: str) -> float:
    """`5 sec` as scontrol prints KillWait and MessageTimeout."""
    return float(value.split()[0])


class Job(NamedTuple):
    job_id: str
    name: str
    state: str
    user: str


class Slurm:
    """Slurm's clients with one lab's environment; `submitted` is what teardown cancels."""

    def __init__(self, env: Mapping[str, str]):
        self.env = dict(env)
        self.submitted: list[str] = []
        self._timing: SlurmTiming | None = None

    @property
    def timing(self) -> SlurmTiming:
        if self._timing is None:
            self._timing = SlurmTiming.parse(self.run("scontrol", "show", "config").stdout)
        return self._timing

    def run(
        self, *argv: str, check: bool = True, user: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess:
        command = list(argv)
        if user is not None:
            # runuser keeps the environment (SLURM_CONF) unless told otherwise.
            command = ["runuser", "-u", user, "--", *command]
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(
                "%s exited %d: %s%s" % (" ".join(command), result.returncode, result.stdout, result.stderr)
            )
        return result

    def submit(self, name: str, command: str = "exec sleep 300", user: str | None = None, hold: bool = False) -> str:
        """sbatch one job; held jobs stay PENDING and never take a CPU of the shared lab."""
        argv = ["sbatch", "--parsable", "--job-name=" + name, "--output=/dev/null", "--chdir=/tmp"]
        if hold:
            argv.append("--hold")
        argv += ["--wrap", command]
        return self.sbatch(argv, user=user)

    def sbatch(self, argv: Sequence[str], user: str | None = None) -> str:
        """Run an `sbatch --parsable ...` command line; its job is then this test's to cancel."""
        job_id = self.run(*argv, user=user).stdout.strip().split(";")[0]
        assert job_id.isdigit(), job_id
        self.submitted.append(job_id)
        return job_id

    def queue(self, names: Iterable[str] = ()) -> dict[str, Job]:
        """Queued jobs (the finished ones squeue keeps for MinJobAge are not shown)."""
        argv = ["squeue", "--noheader", "--all", "--format=%i|%j|%T|%u"]
        names = list(names)
        if names:
            argv.append("--name=" + ",".join(names))
        lines = self.run(*argv).stdout.splitlines()
        jobs = [Job(*line.split("|")) for line in lines if line.strip()]
        return {job.job_id: job for job in jobs}

    def final_state(self, job_id: str) -> str:
        """The state of a job, finished ones included (kept for MinJobAge = 300 s)."""
        result = self.run(
            "squeue", "--noheader", "--all", "--states=all", "--jobs=" + job_id, "--format=%T", check=False
        )
        return result.stdout.strip() or "GONE"

    def wait_for_state(self, job_id: str, state: str, timeout: float | None = None) -> None:
        """Wait until the job is in `state`; by default as long as slurmctld may take to
        start a job that fits (`SlurmTiming.start_bound`)."""
        timeout = self.timing.start_bound if timeout is None else timeout
        seen: list[str] = []

        def reached() -> bool:
            job = self.queue().get(job_id)
            seen.append(job.state if job else "ABSENT")
            return job is not None and job.state == state

        started = time.monotonic()
        assert wait_for(reached, timeout), "job %s never %s in %.0f s; states seen: %s; %s" % (
            job_id,
            state,
            time.monotonic() - started,
            sorted(set(seen)),
            self.queue_report(),
        )

    def queue_report(self) -> str:
        """Every queued job with slurmctld's reason for its state, for a failure message."""
        queue = self.run("squeue", "--noheader", "--all", "--format=%i %T %r", check=False).stdout
        return "slurmctld's queue (id state reason): %s" % "; ".join(queue.splitlines())

    def cancel_leftovers(self) -> None:
        """scancel (by id) whatever this test submitted that is still queued, and wait until
        it has left the queue, so that no job of this test is COMPLETING (which holds back
        every scheduling pass) or running when the next test starts."""
        leftovers = [job_id for job_id in self.submitted if job_id in self.queue()]
        if leftovers:
            self.run("scancel", *leftovers, check=False)
            bound = self.timing.end_bound
            assert wait_for(lambda: not set(leftovers) & set(self.queue()), bound, interval=0.1), (
                "jobs %s still queued %.0f s after scancel; %s" % (leftovers, bound, self.queue_report())
            )


def logging_client(directory: Path, program: str, run_as: str | None = None) -> tuple[Path, Path]:
    """A wrapper of `program` that appends 'start <argv>' and 'end <rc>' lines to a log, and
    runs it as the user `run_as` if given (the log is still written by the caller's user).

    Returns (wrapper, log). The log does not exist until the wrapper first runs.
    """
    real = shutil.which(program)
    assert real, "%s is not on PATH" % program
    directory.mkdir(parents=True, exist_ok=True)
    wrapper = directory / ("logging-" + program)
    log = directory / (program + ".log")
    command = shlex.quote(real)
    if run_as is not None:
        # runuser keeps the environment, SLURM_CONF included.
        command = "runuser -u %s -- %s" % (shlex.quote(run_as), command)
    wrapper.write_text(
        "#!/bin/sh\n"
        "printf 'start %s\\n' \"$*\" >> {log}\n"
        '{command} "$@"\n'
        "rc=$?\n"
        "printf 'end %s\\n' \"$rc\" >> {log}\n"
        "exit $rc\n".format(log=shlex.quote(str(log)), command=command)
    )
    wrapper.chmod(0o755)
    return wrapper, log


def logged_calls(log: Path) -> list[list[str]]:
    """The argument lists (without the program) of each logged call, in order."""
    if not log.exists():
        return []
    return [line.split()[1:] for line in log.read_text().splitlines() if line.startswith("start ")]


def finished_calls(log: Path) -> int:
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.startswith("end "))


# -- ansible-playbook --------------------------------------------------------------------


def start_playbook(
    env: Mapping[str, str], directory: Path, tasks: Sequence[Mapping[str, Any]]
) -> module_playbook.RunningPlaybook:
    return module_playbook.start_playbook(MODULE, env, directory, tasks)


def run_playbook(
    env: Mapping[str, str], directory: Path, tasks: Sequence[Mapping[str, Any]], timeout: float = 300
) -> tuple[list[dict[str, Any]], float]:
    """Each task's result, and the wall time of the whole ansible-playbook run."""
    run = module_playbook.run_playbook(MODULE, env, directory, tasks, timeout)
    return run.results, run.wall


def run_module(
    env: Mapping[str, str], directory: Path, args: Mapping[str, Any], check: bool = False, diff: bool = False
) -> dict[str, Any]:
    results, _wall = run_playbook(env, directory, [{"args": args, "check": check, "diff": diff}])
    return results[0]


# -- a lab of our own --------------------------------------------------------------------


@dataclasses.dataclass
class PrivateLab:
    settings: labctl.LabSettings
    env: dict[str, str]

    @classmethod
    def create(cls, lab_dir: Path) -> PrivateLab:
        env = clean_env(dict(PRIVATE_LAB_PORTS, LAB_DIR=str(lab_dir)))
        settings = labctl.lab_settings(environ=env)
        env.update(settings.exports())
        return cls(settings, env)

    def labctl(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(PYTHON), str(LABCTL), *arguments],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                "labctl %s exited %d:\n%s\n%s" % (" ".join(arguments), result.returncode, result.stdout, result.stderr)
            )
        return result

    def stop_service(self, service: str) -> None:
        """Stop one daemon by its recorded pid (and start time): nothing else is touched."""
        record = labctl.live_record(self.settings, service)
        assert record is not None, "%s of the private lab is not running" % service
        labctl.terminate(record)
        assert not record.is_alive()
