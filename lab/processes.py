"""The lab's processes: started in their own session, recorded with their /proc start time, stopped."""

from __future__ import annotations

import dataclasses
import os
import pwd
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from lab.settings import EXIT_TIMEOUT, PROBE_TIMEOUT, LabError, LabSettings


@dataclasses.dataclass(frozen=True)
class ProcessRecord:
    """A process the lab started: its pid, /proc start time and session id."""

    pid: int
    start_time: int
    session: int

    def is_alive(self) -> bool:
        stat_fields = proc_stat(self.pid)
        return stat_fields is not None and stat_fields["state"] != "Z" and stat_fields["start_time"] == self.start_time

    def serialize(self) -> str:
        return f"{self.pid} {self.start_time} {self.session}\n"

    @classmethod
    def parse(cls, text: str) -> ProcessRecord:
        pid, start_time, session = (int(field) for field in text.split())
        return cls(pid, start_time, session)

    @classmethod
    def of(cls, pid: int) -> ProcessRecord:
        stat_fields = proc_stat(pid)
        if stat_fields is None:
            raise LabError(f"process {pid} vanished before it could be recorded")
        return cls(pid, stat_fields["start_time"], stat_fields["session"])


def proc_stat(pid: int) -> dict[str, object] | None:
    """State, session and start time of a process, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after it.
    fields = raw[raw.rindex(")") + 2 :].split()
    return {"state": fields[0], "ppid": int(fields[1]), "session": int(fields[3]), "start_time": int(fields[19])}


def all_pids() -> list[int]:
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def processes_in_session(session: int) -> list[int]:
    found = []
    for pid in all_pids():
        stat_fields = proc_stat(pid)
        if stat_fields and stat_fields["session"] == session and stat_fields["state"] != "Z":
            found.append(pid)
    return found


def pid_file(settings: LabSettings, service: str) -> Path:
    return settings.pid_dir / f"{service}.pid"


def read_record(settings: LabSettings, service: str) -> ProcessRecord | None:
    try:
        return ProcessRecord.parse(pid_file(settings, service).read_text())
    except (FileNotFoundError, ValueError):
        return None


def write_record(settings: LabSettings, service: str, record: ProcessRecord) -> None:
    settings.pid_dir.mkdir(parents=True, exist_ok=True)
    temporary = pid_file(settings, service).with_suffix(".tmp")
    temporary.write_text(record.serialize())
    temporary.replace(pid_file(settings, service))


def live_record(settings: LabSettings, service: str) -> ProcessRecord | None:
    """The service's recorded process if it still runs; a stale pid file is removed."""
    record = read_record(settings, service)
    if record is None:
        pid_file(settings, service).unlink(missing_ok=True)
        return None
    if not record.is_alive():
        pid_file(settings, service).unlink(missing_ok=True)
        return None
    return record


def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
        interval = min(interval * 1.5, 0.5)


def terminate(record: ProcessRecord, sig: int = signal.SIGTERM, timeout: float = EXIT_TIMEOUT) -> None:
    """Stop a recorded process, SIGKILL if it lingers, then whatever it leaves behind.

    Leftovers are its descendants (slurmstepd and job processes live under slurmd's
    subreaper, in sessions of their own) and its session. A descendant is matched by
    pid and start time, and a session id is not handed out again while any process
    still carries it, so neither ever hits a stranger.
    """
    leftovers = descendants(record.pid) if record.is_alive() else []
    if record.is_alive():
        os.kill(record.pid, sig)
        if not wait_until(lambda: not record.is_alive(), timeout):
            os.kill(record.pid, signal.SIGKILL)
            wait_until(lambda: not record.is_alive(), timeout)
    leftovers += [
        leftover for leftover in map(_record_if_exists, processes_in_session(record.session)) if leftover is not None
    ]
    kill_all(leftovers, timeout)


def _record_if_exists(pid: int) -> ProcessRecord | None:
    stat_fields = proc_stat(pid)
    if stat_fields is None:
        return None
    return ProcessRecord(pid, stat_fields["start_time"], stat_fields["session"])


def descendants(pid: int) -> list[ProcessRecord]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat_fields = proc_stat(int(entry.name))
            if stat_fields is not None:
                children.setdefault(stat_fields["ppid"], []).append(int(entry.name))
    found, pending = [], list(children.get(pid, []))
    while pending:
        child = pending.pop()
        record = _record_if_exists(child)
        if record is not None:
            found.append(record)
        pending.extend(children.get(child, []))
    return found


def kill_all(records: Sequence[ProcessRecord], timeout: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [record for record in records if record.is_alive()]
        for record in alive:
            try:
                os.kill(record.pid, sig)
            except ProcessLookupError:
                pass
        # wait_until calls the lambda within this iteration, so `alive` is the current list.
        if wait_until(lambda: not any(record.is_alive() for record in alive), timeout):  # noqa: B023
            return


def spawn(
    argv: Sequence[str], console: Path, user: str | None = None, env: Mapping[str, str] | None = None
) -> subprocess.Popen:
    """Start a daemon in its own session, as `user`, its output appended to `console`."""
    console.parent.mkdir(parents=True, exist_ok=True)
    with open(console, "ab") as output:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd="/",
            env=dict(env or _base_env()),
            **_as_user(user),
        )


def _as_user(user: str | None) -> dict[str, object]:
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _base_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "SLURM_"))}
    env["LC_ALL"] = "C"
    return env


def run(
    argv: Sequence[str],
    user: str | None = None,
    input_text: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    check: bool = True,
) -> subprocess.CompletedProcess:
    try:
        result = _run_captured(argv, input_text, env, timeout, **_as_user(user))
    except subprocess.TimeoutExpired as error:
        raise LabError(f"{argv[0]} did not finish within {timeout:.0f} s") from error
    if check and result.returncode != 0:
        raise LabError(f"{' '.join(argv)} exited {result.returncode}: {(result.stderr or result.stdout).strip()}")
    return result


def probe(
    argv: Sequence[str], env: Mapping[str, str] | None = None, input_text: str | None = None
) -> subprocess.CompletedProcess | None:
    """Run a readiness check; None when it could not run or took too long."""
    try:
        return _run_captured(argv, input_text, env, PROBE_TIMEOUT)
    except (subprocess.TimeoutExpired, OSError):
        return None


def _run_captured(
    argv: Sequence[str], input_text: str | None, env: Mapping[str, str] | None, timeout: float, **extra: object
) -> subprocess.CompletedProcess:
    """argv in /, its output captured as text, in the lab's base environment unless given one."""
    return subprocess.run(
        list(argv),
        input=input_text,
        capture_output=True,
        text=True,
        cwd="/",
        env=dict(env or _base_env()),
        timeout=timeout,
        **extra,
    )
