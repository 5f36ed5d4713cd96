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
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import stat
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Mapping, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = Path(__file__).resolve().parent / "slurm"
PG_BIN = Path("/usr/lib/postgresql/15/bin")

SERVICES = ("postgresql", "munged", "slurmctld", "slurmd")
DATABASE = "arvados_production"
TEMPLATE_DATABASE = "arvados_template"
DB_ROLE = "arvados"
DB_SUPERUSER = "postgres"
SCHEMA_FILES = ("tables.sql", "indexes.sql")
SCHEMA_COMMENT_PREFIX = "lab schema sha256 "

DEFAULT_PG_PORT = 55432
DEFAULT_SLURMCTLD_PORT = 16817
DEFAULT_SLURMD_PORT = 16818
DEFAULT_CLUSTER_ID = "zzzzz"

# sun_path holds 108 bytes; PostgreSQL adds ".s.PGSQL.<port>.lock" to its socket dir.
MAX_SOCKET_PATH = 100
LONGEST_SOCKET_SUFFIX = len("/pg/.s.PGSQL.65535.lock")
# Slurm's config format cannot quote these, and the -o string of pg_ctl goes to a shell.
UNSAFE_PATH_CHARS = re.compile(r"[\s,=#'\"\\$`;]")

READY_TIMEOUT = 30.0
# A probe normally answers in milliseconds; a stranger listening on the port would keep
# it waiting for Slurm's MessageTimeout.
PROBE_TIMEOUT = 5.0
EXIT_TIMEOUT = 15.0
QUEUE_DRAIN_MARGIN = 20.0
LOG_TAIL_LINES = 30


class LabError(Exception):
    """A lab operation failed; the message says what and where."""


class ServiceStartError(LabError):
    def __init__(self, service: str, reason: str):
        super().__init__(f"{service} failed to start: {reason}")
        self.service = service


@dataclasses.dataclass(frozen=True)
class LabSettings:
    """Where a lab lives and how to reach it; derived from LAB_* variables only."""

    lab_dir: Path
    pg_port: int
    slurmctld_port: int
    slurmd_port: int
    cluster_id: str
    schema_dir: Path

    @property
    def socket_dir(self) -> Path:
        return socket_dir_for(self.lab_dir)

    @property
    def pg_socket_dir(self) -> Path:
        return self.socket_dir / "pg"

    @property
    def munge_socket(self) -> Path:
        return self.socket_dir / "munge" / "munge.socket.2"

    @property
    def pg_dir(self) -> Path:
        return self.lab_dir / "pg"

    @property
    def pg_data(self) -> Path:
        return self.pg_dir / "data"

    @property
    def munge_dir(self) -> Path:
        return self.lab_dir / "munge"

    @property
    def slurm_dir(self) -> Path:
        return self.lab_dir / "slurm"

    @property
    def slurm_conf(self) -> Path:
        return self.slurm_dir / "slurm.conf"

    @property
    def epilog_script(self) -> Path:
        return self.slurm_dir / "epilog.sh"

    @property
    def epilog_sleep_file(self) -> Path:
        return self.slurm_dir / "epilog_sleep"

    @property
    def pid_dir(self) -> Path:
        return self.lab_dir / "pids"

    @property
    def console_dir(self) -> Path:
        return self.lab_dir / "logs"

    @property
    def arvados_dir(self) -> Path:
        return self.lab_dir / "arvados"

    @property
    def config_yml(self) -> Path:
        return self.arvados_dir / "config.yml"

    @property
    def database_yml(self) -> Path:
        return self.arvados_dir / "database.yml"

    @property
    def password_file(self) -> Path:
        return self.arvados_dir / "db_password"

    @property
    def pgpass(self) -> Path:
        return self.lab_dir / "pgpass"

    @property
    def env_sh(self) -> Path:
        return self.lab_dir / "env.sh"

    def service_logs(self, service: str) -> List[Path]:
        """The daemon's own log first, then what it printed on stdout/stderr."""
        own_log = {
            "postgresql": self.pg_dir / "postgresql.log",
            "munged": self.munge_dir / "munged.log",
            "slurmctld": self.slurm_dir / "slurmctld.log",
            "slurmd": self.slurm_dir / "slurmd.log",
        }[service]
        return [own_log, self.console_dir / f"{service}.console"]

    def db_password(self) -> str:
        return self.password_file.read_text().strip()

    def connection(self, dbname: str = DATABASE) -> Dict[str, object]:
        """psycopg.connect() keywords for the `arvados` role over TCP, as Arvados connects."""
        return {
            "host": "127.0.0.1",
            "port": self.pg_port,
            "user": DB_ROLE,
            "password": self.db_password(),
            "dbname": dbname,
        }

    def superuser_connection(self, dbname: str = DATABASE) -> Dict[str, object]:
        """psycopg.connect() keywords for the superuser over the lab's unix socket (trust)."""
        return {
            "host": str(self.pg_socket_dir),
            "port": self.pg_port,
            "user": DB_SUPERUSER,
            "dbname": dbname,
        }

    def exports(self) -> Dict[str, str]:
        """The environment a shell (or a test's subprocess) needs to use this lab."""
        return {
            "LAB_DIR": str(self.lab_dir),
            "LAB_PG_PORT": str(self.pg_port),
            "LAB_SLURMCTLD_PORT": str(self.slurmctld_port),
            "LAB_SLURMD_PORT": str(self.slurmd_port),
            "LAB_CLUSTER_ID": self.cluster_id,
            "SLURM_CONF": str(self.slurm_conf),
            "PGHOST": "127.0.0.1",
            "PGPORT": str(self.pg_port),
            "PGUSER": DB_ROLE,
            "PGDATABASE": DATABASE,
            "PGPASSFILE": str(self.pgpass),
            "ARVADOS_LAB_CONFIG": str(self.config_yml),
        }

    def slurm_env(self) -> Dict[str, str]:
        """Environment for Slurm client commands aimed at this lab."""
        env = dict(os.environ)
        env.update(LC_ALL="C", SLURM_CONF=str(self.slurm_conf))
        return env


def lab_settings(lab_dir: Optional[os.PathLike] = None,
                 environ: Optional[Mapping[str, str]] = None) -> LabSettings:
    """The settings of the lab in `lab_dir` (default: $LAB_DIR, else <repo>/.lab)."""
    environ = os.environ if environ is None else environ
    chosen = lab_dir or environ.get("LAB_DIR") or REPO_ROOT / ".lab"
    return LabSettings(
        lab_dir=Path(os.path.abspath(os.fspath(chosen))),
        pg_port=_port(environ, "LAB_PG_PORT", DEFAULT_PG_PORT),
        slurmctld_port=_port(environ, "LAB_SLURMCTLD_PORT", DEFAULT_SLURMCTLD_PORT),
        slurmd_port=_port(environ, "LAB_SLURMD_PORT", DEFAULT_SLURMD_PORT),
        cluster_id=_cluster_id(environ.get("LAB_CLUSTER_ID", DEFAULT_CLUSTER_ID)),
        schema_dir=Path(environ.get("LAB_SCHEMA_DIR") or REPO_ROOT / "lab" / "schema"),
    )


def _port(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or not 1024 <= int(raw) <= 65535:
        raise LabError(f"{name}={raw!r} is not a port number between 1024 and 65535")
    return int(raw)


def _cluster_id(value: str) -> str:
    if not re.fullmatch(r"[0-9a-z]{5}", value):
        raise LabError(f"LAB_CLUSTER_ID={value!r} is not 5 characters of [0-9a-z]")
    return value


def socket_dir_for(lab_dir: Path) -> Path:
    """Where the lab's unix sockets go: inside LAB_DIR unless that path is too long.

    A unix socket path must fit in 108 bytes; CI checkouts can sit deep in the file
    system, so a long LAB_DIR gets a short directory in /tmp, named by a hash of
    LAB_DIR so that two labs never share one.
    """
    inside = lab_dir / "run"
    if len(os.fsencode(inside)) + LONGEST_SOCKET_SUFFIX <= MAX_SOCKET_PATH:
        return inside
    digest = hashlib.sha256(os.fsencode(lab_dir)).hexdigest()[:16]
    return Path("/tmp") / f"arvados-lab-{digest}"


# ---------------------------------------------------------------- processes

@dataclasses.dataclass(frozen=True)
class ProcessRecord:
    """A process the lab started: its pid, /proc start time and session id."""

    pid: int
    start_time: int
    session: int

    def is_alive(self) -> bool:
        stat_fields = proc_stat(self.pid)
        return (stat_fields is not None and stat_fields["state"] != "Z"
                and stat_fields["start_time"] == self.start_time)

    def serialize(self) -> str:
        return f"{self.pid} {self.start_time} {self.session}\n"

    @classmethod
    def parse(cls, text: str) -> "ProcessRecord":
        pid, start_time, session = (int(field) for field in text.split())
        return cls(pid, start_time, session)

    @classmethod
    def of(cls, pid: int) -> "ProcessRecord":
        stat_fields = proc_stat(pid)
        if stat_fields is None:
            raise LabError(f"process {pid} vanished before it could be recorded")
        return cls(pid, stat_fields["start_time"], stat_fields["session"])


def proc_stat(pid: int) -> Optional[Dict[str, object]]:
    """State, session and start time of a process, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces and parentheses: split after it.
    fields = raw[raw.rindex(")") + 2:].split()
    return {"state": fields[0], "ppid": int(fields[1]), "session": int(fields[3]),
            "start_time": int(fields[19])}


def processes_in_session(session: int) -> List[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat_fields = proc_stat(int(entry.name))
            if stat_fields and stat_fields["session"] == session and stat_fields["state"] != "Z":
                found.append(int(entry.name))
    return found


def pid_file(settings: LabSettings, service: str) -> Path:
    return settings.pid_dir / f"{service}.pid"


def read_record(settings: LabSettings, service: str) -> Optional[ProcessRecord]:
    try:
        return ProcessRecord.parse(pid_file(settings, service).read_text())
    except (FileNotFoundError, ValueError):
        return None


def write_record(settings: LabSettings, service: str, record: ProcessRecord) -> None:
    settings.pid_dir.mkdir(parents=True, exist_ok=True)
    temporary = pid_file(settings, service).with_suffix(".tmp")
    temporary.write_text(record.serialize())
    temporary.replace(pid_file(settings, service))


def live_record(settings: LabSettings, service: str) -> Optional[ProcessRecord]:
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


def terminate(record: ProcessRecord, sig: int = signal.SIGTERM,
              timeout: float = EXIT_TIMEOUT) -> None:
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
    leftovers += [leftover for leftover in map(_record_if_exists,
                                               processes_in_session(record.session))
                  if leftover is not None]
    kill_all(leftovers, timeout)


def _record_if_exists(pid: int) -> Optional[ProcessRecord]:
    stat_fields = proc_stat(pid)
    if stat_fields is None:
        return None
    return ProcessRecord(pid, stat_fields["start_time"], stat_fields["session"])


def descendants(pid: int) -> List[ProcessRecord]:
    children: Dict[int, List[int]] = {}
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
        if wait_until(lambda: not any(record.is_alive() for record in alive), timeout):
            return


def spawn(argv: Sequence[str], console: Path, user: Optional[str] = None,
          env: Optional[Mapping[str, str]] = None) -> subprocess.Popen:
    """Start a daemon in its own session, as `user`, its output appended to `console`."""
    console.parent.mkdir(parents=True, exist_ok=True)
    with open(console, "ab") as output:
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
            start_new_session=True, cwd="/", env=dict(env or _base_env()),
            **_as_user(user))


def _as_user(user: Optional[str]) -> Dict[str, object]:
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def _base_env() -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "SLURM_"))}
    env["LC_ALL"] = "C"
    return env


def run(argv: Sequence[str], user: Optional[str] = None, input_text: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None, timeout: float = 60.0,
        check: bool = True) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(
            list(argv), input=input_text, capture_output=True, text=True, cwd="/",
            env=dict(env or _base_env()), timeout=timeout, **_as_user(user))
    except subprocess.TimeoutExpired as error:
        raise LabError(f"{argv[0]} did not finish within {timeout:.0f} s") from error
    if check and result.returncode != 0:
        raise LabError(f"{' '.join(argv)} exited {result.returncode}: "
                       f"{(result.stderr or result.stdout).strip()}")
    return result


def probe(argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
          input_text: Optional[str] = None) -> Optional[subprocess.CompletedProcess]:
    """Run a readiness check; None when it could not run or took too long."""
    try:
        return subprocess.run(list(argv), input=input_text, capture_output=True, text=True,
                              cwd="/", env=dict(env or _base_env()), timeout=PROBE_TIMEOUT)
    except (subprocess.TimeoutExpired, OSError):
        return None


# ---------------------------------------------------------------- directories

def prepare_directories(settings: LabSettings) -> None:
    if UNSAFE_PATH_CHARS.search(str(settings.lab_dir)):
        raise LabError(f"LAB_DIR {settings.lab_dir} contains whitespace or one of ,=#'\"\\$`; "
                       "which Slurm's configuration cannot hold; choose another LAB_DIR")
    for path in (settings.lab_dir, settings.socket_dir, settings.pid_dir,
                 settings.console_dir, settings.slurm_dir, settings.arvados_dir):
        _make_dir(path, "root", 0o755)
    _make_dir(settings.slurm_dir / "state", "root", 0o700)
    _make_dir(settings.slurm_dir / "spool", "root", 0o755)
    _make_dir(settings.pg_dir, "postgres", 0o700)
    _make_dir(settings.pg_socket_dir, "postgres", 0o755)
    _make_dir(settings.munge_dir, "munge", 0o700)
    _make_dir(settings.munge_socket.parent, "munge", 0o755)
    for path in (settings.lab_dir, settings.socket_dir):
        make_ancestors_traversable(path)


def _make_dir(path: Path, owner: str, mode: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    entry = pwd.getpwnam(owner)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    os.chmod(path, mode)


def make_ancestors_traversable(path: Path) -> List[Path]:
    """Give "other" search permission on the ancestors of `path` that lack it.

    postgres and munge must reach their directories under LAB_DIR wherever it is (CI
    checks out into folders such as /root/...). Only search (x) is added, never read,
    and each change is announced.
    """
    changed = []
    for ancestor in reversed(path.parents):
        mode = ancestor.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(ancestor, stat.S_IMODE(mode) | stat.S_IXOTH)
            print(f"lab: added o+x to {ancestor} so the postgres and munge users can reach "
                  f"{path}", file=sys.stderr)
            changed.append(ancestor)
    return changed


def write_private_file(path: Path, text: str) -> None:
    """Write a file only root can read (it holds the database password)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


# ---------------------------------------------------------------- configuration files

def ensure_password(settings: LabSettings) -> str:
    if not settings.password_file.exists():
        # Hex only: safe in pgpass, YAML and SQL literals without escaping.
        write_private_file(settings.password_file, secrets.token_hex(16) + "\n")
    return settings.db_password()


def render_arvados_config(settings: LabSettings, password: str, dbname: str = DATABASE) -> str:
    # Arvados reads Connection as a map of strings, hence the quoted port.
    return (
        "# Written by lab/labctl.py: the lab's Arvados database settings.\n"
        "Clusters:\n"
        f"  {settings.cluster_id}:\n"
        "    PostgreSQL:\n"
        "      Connection:\n"
        "        host: 127.0.0.1\n"
        f"        port: \"{settings.pg_port}\"\n"
        f"        user: {DB_ROLE}\n"
        f"        password: \"{password}\"\n"
        f"        dbname: {dbname}\n"
    )


def render_database_yml(settings: LabSettings, password: str, dbname: str = DATABASE) -> str:
    return (
        "# Written by lab/labctl.py: the lab's database settings as older Arvados kept them.\n"
        "production:\n"
        "  adapter: postgresql\n"
        "  encoding: utf8\n"
        f"  database: {dbname}\n"
        f"  username: {DB_ROLE}\n"
        f"  password: \"{password}\"\n"
        "  host: 127.0.0.1\n"
        f"  port: {settings.pg_port}\n"
    )


def render_pgpass(settings: LabSettings, password: str) -> str:
    return "".join(f"{host}:{settings.pg_port}:*:{DB_ROLE}:{password}\n"
                   for host in ("127.0.0.1", "localhost"))


def render_env_sh(settings: LabSettings) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n"
                   for name, value in settings.exports().items())


def write_client_files(settings: LabSettings) -> None:
    password = ensure_password(settings)
    write_private_file(settings.config_yml, render_arvados_config(settings, password))
    write_private_file(settings.database_yml, render_database_yml(settings, password))
    write_private_file(settings.pgpass, render_pgpass(settings, password))
    settings.env_sh.write_text(render_env_sh(settings))


def parse_node_config(slurmd_c_output: str) -> Dict[str, str]:
    """CPUs and RealMemory from what `slurmd -C` prints."""
    fields = dict(token.split("=", 1) for token in slurmd_c_output.split() if "=" in token)
    missing = [key for key in ("CPUs", "RealMemory") if key not in fields]
    if missing:
        raise LabError(f"slurmd -C printed no {', '.join(missing)}: {slurmd_c_output!r}")
    return {"cpus": fields["CPUs"], "real_memory": fields["RealMemory"]}


def render_template(name: str, values: Mapping[str, object]) -> str:
    return string.Template((TEMPLATES_DIR / name).read_text()).substitute(values)


def slurm_template_values(settings: LabSettings, node: Mapping[str, str]) -> Dict[str, object]:
    return {
        "lab_dir": settings.lab_dir, "slurm_dir": settings.slurm_dir,
        "slurmctld_port": settings.slurmctld_port, "slurmd_port": settings.slurmd_port,
        "munge_socket": settings.munge_socket, "state_dir": settings.slurm_dir / "state",
        "spool_dir": settings.slurm_dir / "spool", "epilog_script": settings.epilog_script,
        "epilog_sleep_file": settings.epilog_sleep_file, **node,
    }


def write_slurm_files(settings: LabSettings) -> None:
    node = parse_node_config(run(["slurmd", "-C"]).stdout)
    values = slurm_template_values(settings, node)
    settings.slurm_conf.write_text(render_template("slurm.conf.in", values))
    settings.epilog_script.write_text(render_template("epilog.sh.in", values))
    settings.epilog_script.chmod(0o755)
    if not settings.epilog_sleep_file.exists():
        settings.epilog_sleep_file.write_text("0\n")


# ---------------------------------------------------------------- PostgreSQL

def pg(tool: str) -> str:
    return str(PG_BIN / tool)


def postgres_options(settings: LabSettings) -> str:
    # pg_ctl hands -o to a shell, hence the quoting.
    return " ".join(shlex.quote(word) for word in (
        "-p", str(settings.pg_port), "-k", str(settings.pg_socket_dir),
        "-c", "listen_addresses=127.0.0.1"))


PG_HBA = """\
# Written by lab/labctl.py. Socket: trust (the lab's superuser). TCP: a real password check.
local   all   all                 trust
host    all   all   127.0.0.1/32  scram-sha-256
"""


def init_postgres_cluster(settings: LabSettings) -> None:
    if (settings.pg_data / "PG_VERSION").exists():
        return
    run([pg("initdb"), "-D", str(settings.pg_data), "-U", DB_SUPERUSER, "-E", "UTF8",
         "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256"],
        user="postgres", timeout=120)
    hba = settings.pg_data / "pg_hba.conf"
    hba.write_text(PG_HBA)
    postgres = pwd.getpwnam("postgres")
    os.chown(hba, postgres.pw_uid, postgres.pw_gid)


def start_postgres(settings: LabSettings) -> ProcessRecord:
    init_postgres_cluster(settings)
    log = settings.service_logs("postgresql")[0]
    launcher = spawn(
        [pg("pg_ctl"), "-D", str(settings.pg_data), "-l", str(log), "-o",
         postgres_options(settings), "-w", "-t", str(int(READY_TIMEOUT)), "start"],
        settings.service_logs("postgresql")[1], user="postgres")
    if launcher.wait(timeout=READY_TIMEOUT + 10) != 0:
        raise ServiceStartError("postgresql", f"pg_ctl start exited {launcher.returncode}")
    postmaster_pid = int((settings.pg_data / "postmaster.pid").read_text().split()[0])
    return ProcessRecord.of(postmaster_pid)


def postgres_answers(settings: LabSettings) -> bool:
    result = probe([pg("pg_isready"), "-q", "-h", str(settings.pg_socket_dir), "-p",
                    str(settings.pg_port), "-U", DB_SUPERUSER, "-d", "postgres"])
    return result is not None and result.returncode == 0


def stop_postgres(settings: LabSettings, record: ProcessRecord) -> None:
    postmaster_file = settings.pg_data / "postmaster.pid"
    try:
        postmaster_pid = int(postmaster_file.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        postmaster_pid = None
    if postmaster_pid == record.pid and record.is_alive():
        run([pg("pg_ctl"), "-D", str(settings.pg_data), "-m", "fast", "-w", "-t",
             str(int(EXIT_TIMEOUT)), "stop"], user="postgres", check=False,
            timeout=EXIT_TIMEOUT + 10)
    # SIGINT is PostgreSQL's fast shutdown, should pg_ctl not have done it.
    terminate(record, signal.SIGINT)


def psql(settings: LabSettings, sql: str, dbname: str = "postgres",
         user: str = DB_SUPERUSER, files: Sequence[Path] = (),
         variables: Optional[Mapping[str, str]] = None) -> str:
    """Run SQL through the lab socket. Values go in as psql variables (:'name'), which
    psql quotes as literals; they travel on stdin, never on a command line."""
    argv = [pg("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
            "-h", str(settings.pg_socket_dir), "-p", str(settings.pg_port),
            "-U", user, "-d", dbname]
    if files:
        argv.append("--single-transaction")
        for path in files:
            argv += ["-f", str(path)]
    script = "".join(f"\\set {name} '{value}'\n" for name, value in (variables or {}).items())
    return run(argv, input_text=script + sql, timeout=3600).stdout


def schema_files(settings: LabSettings) -> List[Path]:
    paths = [settings.schema_dir / name for name in SCHEMA_FILES]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise LabError(f"schema file(s) missing: {', '.join(missing)} "
                       "(set LAB_SCHEMA_DIR to use another schema)")
    return paths


def schema_digest(settings: LabSettings) -> str:
    digest = hashlib.sha256()
    for path in schema_files(settings):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def database_exists(settings: LabSettings, dbname: str) -> bool:
    return psql(settings, "SELECT count(*) FROM pg_database WHERE datname = :'name';",
                variables={"name": dbname}).strip() == "1"


def database_schema_digest(settings: LabSettings, dbname: str) -> Optional[str]:
    comment = psql(settings, "SELECT shobj_description(oid, 'pg_database') FROM pg_database "
                   "WHERE datname = :'name';", variables={"name": dbname}).strip()
    if comment.startswith(SCHEMA_COMMENT_PREFIX):
        return comment[len(SCHEMA_COMMENT_PREFIX):]
    return None


def ensure_role(settings: LabSettings) -> None:
    psql(settings,
         "SELECT format('CREATE ROLE %I', :'role') WHERE NOT EXISTS "
         "(SELECT FROM pg_roles WHERE rolname = :'role') \\gexec\n"
         "SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', :'role', :'password') \\gexec\n",
         variables={"role": DB_ROLE, "password": ensure_password(settings)})


def create_template_database(settings: LabSettings) -> None:
    """arvados_template: pg_trgm (as superuser), then the schema files as `arvados`."""
    files = schema_files(settings)
    digest = schema_digest(settings)
    variables = {"db": TEMPLATE_DATABASE, "role": DB_ROLE,
                 "comment": SCHEMA_COMMENT_PREFIX + digest}
    psql(settings, "SELECT format('CREATE DATABASE %I OWNER %I TEMPLATE template0', "
                   ":'db', :'role') \\gexec\n", variables=variables)
    try:
        psql(settings, "CREATE EXTENSION IF NOT EXISTS pg_trgm;", dbname=TEMPLATE_DATABASE)
        psql(settings, "", dbname=TEMPLATE_DATABASE, user=DB_ROLE, files=files)
    except LabError:
        drop_database(settings, TEMPLATE_DATABASE)
        raise
    psql(settings, "SELECT format('COMMENT ON DATABASE %I IS %L', :'db', :'comment') \\gexec\n"
                   "SELECT format('ALTER DATABASE %I IS_TEMPLATE true', :'db') \\gexec\n",
         variables=variables)


def clone_database(settings: LabSettings, name: str) -> None:
    """A copy of arvados_template owned by `arvados` (a file copy: fast)."""
    psql(settings,
         "SELECT format('CREATE DATABASE %I OWNER %I TEMPLATE %I', "
         ":'db', :'role', :'tpl') \\gexec\n"
         "SELECT format('COMMENT ON DATABASE %I IS %L', :'db', "
         "shobj_description(oid, 'pg_database')) FROM pg_database WHERE datname = :'tpl' \\gexec\n",
         variables={"db": name, "role": DB_ROLE, "tpl": TEMPLATE_DATABASE})


def drop_database(settings: LabSettings, name: str) -> None:
    psql(settings,
         "SELECT format('ALTER DATABASE %I IS_TEMPLATE false', :'db') FROM pg_database "
         "WHERE datname = :'db' \\gexec\n"
         "SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \\gexec\n",
         variables={"db": name})


def ensure_databases(settings: LabSettings) -> None:
    ensure_role(settings)
    if not database_exists(settings, TEMPLATE_DATABASE):
        create_template_database(settings)
    if not database_exists(settings, DATABASE):
        clone_database(settings, DATABASE)
    warn_if_schema_changed(settings)


def warn_if_schema_changed(settings: LabSettings) -> None:
    current = schema_digest(settings)
    for name in (TEMPLATE_DATABASE, DATABASE):
        if database_schema_digest(settings, name) != current:
            print(f"lab: {name} was not built from the current {settings.schema_dir} files; "
                  "`lab/labctl.py reset-db` rebuilds it", file=sys.stderr)


def reset_databases(settings: LabSettings) -> None:
    if live_record(settings, "postgresql") is None:
        raise LabError("postgresql is not running; run `lab/labctl.py start` first")
    schema_files(settings)
    for name in (DATABASE, TEMPLATE_DATABASE):
        drop_database(settings, name)
    ensure_databases(settings)


# ---------------------------------------------------------------- munge

def munge_command(settings: LabSettings) -> List[str]:
    munge_dir = settings.munge_dir
    return ["/usr/sbin/munged", "--foreground", f"--socket={settings.munge_socket}",
            f"--key-file={munge_dir / 'munge.key'}", f"--pid-file={munge_dir / 'munged.pid'}",
            f"--log-file={munge_dir / 'munged.log'}", f"--seed-file={munge_dir / 'munged.seed'}"]


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
    process = spawn(["/usr/sbin/slurmctld", "-D", "-c", "-f", str(settings.slurm_conf)],
                    settings.service_logs("slurmctld")[1], env=settings.slurm_env())
    return ProcessRecord.of(process.pid)


def slurmctld_answers(settings: LabSettings) -> bool:
    result = probe(["scontrol", "ping"], env=settings.slurm_env())
    return result is not None and result.returncode == 0 and "is UP" in result.stdout


def start_slurmd(settings: LabSettings) -> ProcessRecord:
    # catatonit reaps the job processes at once; this sandbox's PID 1 takes about a
    # second, and proctrack/pgid waits for those zombies, so cancelled jobs would linger.
    process = spawn(["/usr/bin/catatonit", "--", "/usr/sbin/slurmd", "-D", "-N", "localhost",
                     "-f", str(settings.slurm_conf)],
                    settings.service_logs("slurmd")[1], env=settings.slurm_env())
    return ProcessRecord.of(process.pid)


def node_state(settings: LabSettings) -> str:
    result = probe(["sinfo", "--noheader", "--Node", "--format=%t"], env=settings.slurm_env())
    return result.stdout.strip() if result is not None and result.returncode == 0 else ""


def slurmd_answers(settings: LabSettings) -> bool:
    # '*' marks a node that does not respond; drain/down/unknown cannot run jobs.
    state = node_state(settings)
    return bool(state) and "*" not in state and not state.startswith(("down", "drain", "unk",
                                                                       "fail", "inval"))


def queued_job_ids(settings: LabSettings) -> List[str]:
    result = run(["squeue", "--all", "--noheader", "--format=%i"], env=settings.slurm_env(),
                 timeout=30)
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
        print(f"lab: Slurm jobs still queued after {patience:.0f} s; their processes are "
              "killed with slurmd's session", file=sys.stderr)


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


def start_lab(settings: LabSettings) -> None:
    """Bring every service up; on failure stop what this call launched and raise."""
    prepare_directories(settings)
    write_client_files(settings)
    launched: List[Service] = []
    try:
        for service in SERVICE_TABLE:
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


def service_status(settings: LabSettings) -> Dict[str, str]:
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


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> List[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 200 * lines))
            text = handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    return text.splitlines()[-lines:]


def print_logs(settings: LabSettings, services: Sequence[str], lines: int,
               stream=sys.stdout) -> None:
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

def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("start", help="start every service (no harm if already up)")
    commands.add_parser("stop", help="cancel the lab's jobs and stop every service")
    commands.add_parser("status", help="one line per service; exit 0 only if all are up")
    commands.add_parser("env", help="print export lines for a shell (also in $LAB_DIR/env.sh)")
    logs = commands.add_parser("logs", help="print the end of the services' logs")
    logs.add_argument("services", nargs="*", metavar="SERVICE",
                      help=f"any of {', '.join(SERVICES)} (default: all)")
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
        print(f"lab: up in {settings.lab_dir}; `eval \"$({sys.argv[0]} env)\"` to use it")
        return 0
    if arguments.command == "stop":
        stop_lab(settings)
        return 0
    if arguments.command == "status":
        statuses = service_status(settings)
        for name, status in statuses.items():
            print(f"{name:<11} {status}")
        return 0 if all(status.startswith("up") for status in statuses.values()) else 1
    if arguments.command == "env":
        write_env_sh_if_lab_exists(settings)
        sys.stdout.write(render_env_sh(settings))
        return 0
    if arguments.command == "logs":
        unknown = sorted(set(arguments.services) - set(SERVICES))
        if unknown:
            raise LabError(f"unknown service(s) {', '.join(unknown)}; known: {', '.join(SERVICES)}")
        print_logs(settings, arguments.services or SERVICES, arguments.lines)
        return 0
    if arguments.command == "epilog-sleep":
        set_epilog_sleep(settings, arguments.seconds)
        return 0
    if arguments.command == "reset-db":
        reset_databases(settings)
        return 0
    raise LabError(f"unknown command {arguments.command}")


def write_env_sh_if_lab_exists(settings: LabSettings) -> None:
    if settings.lab_dir.is_dir():
        settings.env_sh.write_text(render_env_sh(settings))


if __name__ == "__main__":
    sys.exit(main())
