#!/usr/bin/env python3
"""Start, stop and inspect the local lab: PostgreSQL 15, munged, slurmctld and slurmd.

Every file, socket and port of a lab belongs to its LAB_DIR, so several labs can run
side by side. Processes are started in their own session and recorded in
``$LAB_DIR/pids/`` with their /proc start time; ``stop`` touches nothing else.

Python code gets the same settings without parsing shell output::

    from lab.labctl import lab_settings
    lab = lab_settings()          # from LAB_DIR, LAB_PG_PORT, ... in os.environ
    psycopg.connect(**lab.connection())

Standard library only: this runs before the project virtualenv exists.

This file is the command line, the order in which services start and stop, and the lab's
Python interface (``__all__``: what tests, benchmarks and Molecule use). The parts:

- ``settings.py``: LabSettings, from LAB_DIR, LAB_PG_PORT, ...; the names and defaults;
- ``processes.py``: starting, recording (with the /proc start time) and stopping processes;
- ``files.py``: the directories and every file the lab writes (config.yml, database.yml,
  pgpass, env.sh, slurm.conf);
- ``postgres.py``: the PostgreSQL cluster, its role, the template database and its clones;
- ``slurm.py``: munged, slurmctld, slurmd and the lab's queue.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
if str(_CHECKOUT) not in sys.path:
    # Run as a script (python lab/labctl.py), the lab package is found from the repository root.
    sys.path.insert(0, str(_CHECKOUT))

from lab.files import (  # noqa: E402
    make_ancestors_traversable,
    parse_node_config,
    prepare_directories,
    render_arvados_config,
    render_database_yml,
    render_env_sh,
    render_pgpass,
    render_template,
    slurm_template_values,
    write_client_files,
    write_private_file,
)
from lab.postgres import (  # noqa: E402
    ensure_databases,
    postgres_answers,
    postgres_options,
    reset_databases,
    start_postgres,
    stop_postgres,
)
from lab.processes import (  # noqa: E402
    ProcessRecord,
    descendants,
    live_record,
    pid_file,
    proc_stat,
    processes_in_session,
    read_record,
    terminate,
    wait_until,
    write_record,
)
from lab.settings import (  # noqa: E402
    DATABASE,
    DB_ROLE,
    LOG_TAIL_LINES,
    READY_TIMEOUT,
    REPO_ROOT,
    SERVICES,
    TEMPLATE_DATABASE,
    LabError,
    LabSettings,
    ServiceStartError,
    lab_settings,
)
from lab.slurm import (  # noqa: E402
    cancel_all_jobs,
    munge_answers,
    set_epilog_sleep,
    slurmctld_answers,
    slurmd_answers,
    start_munged,
    start_slurmctld,
    start_slurmd,
)

# The lab's Python interface: what tests, benchmarks and Molecule use, wherever it lives.
__all__ = [
    "DATABASE",
    "DB_ROLE",
    "LabError",
    "LabSettings",
    "ProcessRecord",
    "REPO_ROOT",
    "SERVICES",
    "TEMPLATE_DATABASE",
    "descendants",
    "echoes_log",
    "lab_env_sh",
    "lab_settings",
    "live_record",
    "make_ancestors_traversable",
    "parse_env_sh",
    "parse_node_config",
    "pid_file",
    "postgres_options",
    "prepare_directories",
    "proc_stat",
    "processes_in_session",
    "read_record",
    "render_arvados_config",
    "render_database_yml",
    "render_env_sh",
    "render_pgpass",
    "render_template",
    "service_status",
    "slurm_template_values",
    "start_postgres",
    "stop_postgres",
    "terminate",
    "wait_until",
    "write_private_file",
    "write_record",
]

# ---------------------------------------------------------------- the services


@dataclasses.dataclass(frozen=True)
class Service:
    name: str
    start: Callable[[LabSettings], ProcessRecord]
    answers: Callable[[LabSettings], bool]
    stop: Callable[[LabSettings, ProcessRecord], None]


def _stop_by_sigterm(settings: LabSettings, record: ProcessRecord) -> None:
    terminate(record)


def _stop_slurmctld(settings: LabSettings, record: ProcessRecord) -> None:
    cancel_all_jobs(settings)
    terminate(record)


SERVICE_TABLE = (
    Service("postgresql", start_postgres, postgres_answers, stop_postgres),
    Service("munged", start_munged, munge_answers, _stop_by_sigterm),
    Service("slurmctld", start_slurmctld, slurmctld_answers, _stop_slurmctld),
    Service("slurmd", start_slurmd, slurmd_answers, _stop_by_sigterm),
)


def start_lab(settings: LabSettings, services: Sequence[str] = SERVICES) -> None:
    """Bring every service (or those named) up; on failure stop what this call launched and
    raise. Slurm alone (munged, slurmctld, slurmd) is another release's Slurm in a container
    (bench/release_slurm.py)."""
    prepare_directories(settings)
    write_client_files(settings)
    launched: list[Service] = []
    try:
        for service in (service for service in SERVICE_TABLE if service.name in services):
            if live_record(settings, service.name) is None:
                record = _launch(settings, service)
                launched.append(service)
            else:
                record = read_record(settings, service.name)
            _wait_until_answers(settings, service, record)
            if service.name == "postgresql":
                _prepare_databases(settings)
    except BaseException:
        # Also on Ctrl-C or an unexpected error: no half-started lab stays behind.
        for service in reversed(launched):
            _stop_service(settings, service)
        raise


def _launch(settings: LabSettings, service: Service) -> ProcessRecord:
    try:
        record = service.start(settings)
    except ServiceStartError:
        raise
    except (LabError, OSError, subprocess.SubprocessError) as error:
        raise ServiceStartError(service.name, str(error)) from error
    write_record(settings, service.name, record)
    return record


def _wait_until_answers(settings: LabSettings, service: Service, record: ProcessRecord) -> None:
    def answered_or_died() -> bool:
        return not record.is_alive() or service.answers(settings)

    wait_until(answered_or_died, READY_TIMEOUT, interval=0.05)
    if not record.is_alive():
        raise ServiceStartError(service.name, f"process {record.pid} exited")
    if not service.answers(settings):
        raise ServiceStartError(service.name, f"no answer within {READY_TIMEOUT:.0f} s")


def _prepare_databases(settings: LabSettings) -> None:
    try:
        ensure_databases(settings)
    except LabError as error:
        raise ServiceStartError("postgresql", f"preparing the databases: {error}") from error


def _stop_service(settings: LabSettings, service: Service) -> None:
    record = live_record(settings, service.name)
    if record is not None:
        service.stop(settings, record)
    pid_file(settings, service.name).unlink(missing_ok=True)


def stop_lab(settings: LabSettings) -> None:
    """Stop every recorded service, jobs first, in reverse start order. Idempotent."""
    if live_record(settings, "slurmctld") is not None and settings.slurm_conf.exists():
        cancel_all_jobs(settings)
    for service in reversed(SERVICE_TABLE):
        _stop_service(settings, service)
    if settings.lab_dir not in settings.socket_dir.parents:
        shutil.rmtree(settings.socket_dir, ignore_errors=True)


def service_status(settings: LabSettings) -> dict[str, str]:
    """One word per service: 'up pid N', 'down', or 'not answering pid N'."""
    statuses = {}
    for service in SERVICE_TABLE:
        record = live_record(settings, service.name)
        if record is None:
            statuses[service.name] = "down"
        elif service.answers(settings):
            statuses[service.name] = f"up pid {record.pid}"
        else:
            statuses[service.name] = f"not answering pid {record.pid}"
    return statuses


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 200 * lines))
            text = handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:]


def print_logs(settings: LabSettings, services: Sequence[str], lines: int, stream=sys.stdout) -> None:
    for service in services:
        own_log, console = settings.service_logs(service)
        own_lines, console_lines = tail(own_log, lines), tail(console, lines)
        _print_tail(service, own_log, own_lines, stream)
        if not echoes_log(console_lines, own_lines):
            _print_tail(service, console, console_lines, stream)


def echoes_log(console_lines: Sequence[str], log_lines: Sequence[str]) -> bool:
    """True if the console only repeats the log (slurmctld -D copies its log to stdout)."""
    log_text = "\n".join(log_lines)
    return all(line.split(": ", 1)[-1] in log_text for line in console_lines)


def _print_tail(service: str, path: Path, content: Sequence[str], stream) -> None:
    if content:
        print(f"==> {service}: {path} (last {len(content)} lines) <==", file=stream)
        print("\n".join(content), file=stream)


# ---------------------------------------------------------------- command line


def _known_services(named: Sequence[str]) -> Sequence[str]:
    """The services a command names, all when none; a name the lab does not have is an error."""
    unknown = sorted(set(named) - set(SERVICES))
    if unknown:
        raise LabError(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(SERVICES)}")
    return named or SERVICES


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("start", help="start every service (no harm if already up)")
    commands.add_parser("stop", help="cancel the lab's jobs and stop every service")
    status = commands.add_parser("status", help="one line per service; exit 0 only if all named are up")
    status.add_argument("services", nargs="*", metavar="SERVICE", help=f"any of {', '.join(SERVICES)} (default: all)")
    commands.add_parser("env", help="print export lines for a shell (also in $LAB_DIR/env.sh)")
    logs = commands.add_parser("logs", help="print the end of the services' logs")
    logs.add_argument("services", nargs="*", metavar="SERVICE", help=f"any of {', '.join(SERVICES)} (default: all)")
    logs.add_argument("-n", "--lines", type=int, default=LOG_TAIL_LINES)
    sleep = commands.add_parser("epilog-sleep", help="how long a finished job stays COMPLETING")
    sleep.add_argument("seconds", type=float)
    commands.add_parser("reset-db", help="drop and rebuild the databases from lab/schema/")
    arguments = parser.parse_args(argv)
    try:
        settings = lab_settings()
        return _dispatch(settings, arguments)
    except ServiceStartError as error:
        print(f"lab: {error}", file=sys.stderr)
        print_logs(settings, [error.service], LOG_TAIL_LINES, stream=sys.stderr)
        return 1
    except (LabError, OSError) as error:
        print(f"lab: {error}", file=sys.stderr)
        return 1


def _dispatch(settings: LabSettings, arguments: argparse.Namespace) -> int:
    if arguments.command == "start":
        start_lab(settings)
        print(f'lab: up in {settings.lab_dir}; `eval "$({sys.argv[0]} env)"` to use it')
        return 0
    if arguments.command == "stop":
        stop_lab(settings)
        return 0
    if arguments.command == "status":
        named = _known_services(arguments.services)
        statuses = {name: status for name, status in service_status(settings).items() if name in named}
        for name, status in statuses.items():
            print(f"{name:<11} {status}")
        return 0 if all(status.startswith("up") for status in statuses.values()) else 1
    if arguments.command == "env":
        sys.stdout.write(lab_env_sh(settings))
        return 0
    if arguments.command == "logs":
        print_logs(settings, _known_services(arguments.services), arguments.lines)
        return 0
    if arguments.command == "epilog-sleep":
        set_epilog_sleep(settings, arguments.seconds)
        return 0
    if arguments.command == "reset-db":
        reset_databases(settings)
        return 0
    raise LabError(f"unknown command {arguments.command}")


def lab_env_sh(settings: LabSettings) -> str:
    """The export lines of the lab in settings.lab_dir: those its start recorded.

    The ports of the calling environment may be another lab's; rewriting env.sh with them
    would send this lab's users to that lab. Without a record (a lab never started), the
    lines come from the calling environment and nothing is written.
    """
    try:
        recorded = settings.env_sh.read_text()
    except FileNotFoundError:
        return render_env_sh(settings)
    differing = sorted(
        name
        for name, value in parse_env_sh(recorded).items()
        if name in settings.exports() and settings.exports()[name] != value
    )
    if differing:
        print(
            f"lab: {settings.lab_dir} was started with other settings than this environment's "
            f"({', '.join(differing)}); printing the lab's own",
            file=sys.stderr,
        )
    return recorded


def parse_env_sh(text: str) -> dict[str, str]:
    """name -> value of the `export NAME=value` lines render_env_sh writes."""
    values = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            values[name] = value
    return values


if __name__ == "__main__":
    sys.exit(main())
