"""The lab's settings: directories, ports and names, from LAB_* variables (LabSettings)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = Path(__file__).resolve().parent / "slurm_conf"
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


class LabError(RuntimeError):
    """A lab operation failed; the message says what and where. A RuntimeError, as the
    generator's and loader's errors always were."""


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

    def service_logs(self, service: str) -> list[Path]:
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

    def connection(self, dbname: str = DATABASE) -> dict[str, object]:
        """psycopg.connect() keywords for the `arvados` role over TCP, as Arvados connects."""
        return {
            "host": "127.0.0.1",
            "port": self.pg_port,
            "user": DB_ROLE,
            "password": self.db_password(),
            "dbname": dbname,
        }

    def superuser_connection(self, dbname: str = DATABASE) -> dict[str, object]:
        """psycopg.connect() keywords for the superuser over the lab's unix socket (trust)."""
        return {
            "host": str(self.pg_socket_dir),
            "port": self.pg_port,
            "user": DB_SUPERUSER,
            "dbname": dbname,
        }

    def exports(self) -> dict[str, str]:
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

    def slurm_env(self) -> dict[str, str]:
        """Environment for Slurm client commands aimed at this lab."""
        env = dict(os.environ)
        env.update(LC_ALL="C", SLURM_CONF=str(self.slurm_conf))
        return env


def lab_settings(lab_dir: os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> LabSettings:
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
