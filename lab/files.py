"""The lab's directories and the files it writes: config.yml, database.yml, pgpass, env.sh, slurm.conf."""

from __future__ import annotations

import os
import pwd
import secrets
import shlex
import stat
import string
import sys
from collections.abc import Mapping
from pathlib import Path

from lab.processes import run
from lab.settings import DATABASE, DB_ROLE, TEMPLATES_DIR, UNSAFE_PATH_CHARS, LabError, LabSettings


def prepare_directories(settings: LabSettings) -> None:
    if UNSAFE_PATH_CHARS.search(str(settings.lab_dir)):
        raise LabError(
            f"LAB_DIR {settings.lab_dir} contains whitespace or one of ,=#'\"\\$`; "
            "which Slurm's configuration cannot hold; choose another LAB_DIR"
        )
    for path in (
        settings.lab_dir,
        settings.socket_dir,
        settings.pid_dir,
        settings.console_dir,
        settings.slurm_dir,
        settings.arvados_dir,
    ):
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


def make_ancestors_traversable(path: Path) -> list[Path]:
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
            print(f"lab: added o+x to {ancestor} so the postgres and munge users can reach {path}", file=sys.stderr)
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
        f'        port: "{settings.pg_port}"\n'
        f"        user: {DB_ROLE}\n"
        f'        password: "{password}"\n'
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
        f'  password: "{password}"\n'
        "  host: 127.0.0.1\n"
        f"  port: {settings.pg_port}\n"
    )


def render_pgpass(settings: LabSettings, password: str) -> str:
    return "".join(f"{host}:{settings.pg_port}:*:{DB_ROLE}:{password}\n" for host in ("127.0.0.1", "localhost"))


def render_env_sh(settings: LabSettings) -> str:
    return "".join(f"export {name}={shlex.quote(value)}\n" for name, value in settings.exports().items())


def write_client_files(settings: LabSettings) -> None:
    password = ensure_password(settings)
    write_private_file(settings.config_yml, render_arvados_config(settings, password))
    write_private_file(settings.database_yml, render_database_yml(settings, password))
    write_private_file(settings.pgpass, render_pgpass(settings, password))
    settings.env_sh.write_text(render_env_sh(settings))


def parse_node_config(slurmd_c_output: str) -> dict[str, str]:
    """CPUs and RealMemory from what `slurmd -C` prints."""
    fields = dict(token.split("=", 1) for token in slurmd_c_output.split() if "=" in token)
    missing = [key for key in ("CPUs", "RealMemory") if key not in fields]
    if missing:
        raise LabError(f"slurmd -C printed no {', '.join(missing)}: {slurmd_c_output!r}")
    return {"cpus": fields["CPUs"], "real_memory": fields["RealMemory"]}


# Read by the Molecule cluster scenario's slurm.conf.j2 too (cluster_slurm_shared_settings).
SHARED_SLURM_SETTINGS = "shared-settings.conf"


def render_template(name: str, values: Mapping[str, object]) -> str:
    return string.Template((TEMPLATES_DIR / name).read_text()).substitute(values)


def slurm_template_values(settings: LabSettings, node: Mapping[str, str]) -> dict[str, object]:
    return {
        # The settings the Molecule cluster scenario's slurm.conf has too, as they are.
        "shared_settings": (TEMPLATES_DIR / SHARED_SLURM_SETTINGS).read_text().rstrip("\n"),
        "lab_dir": settings.lab_dir,
        "slurm_dir": settings.slurm_dir,
        "slurmctld_port": settings.slurmctld_port,
        "slurmd_port": settings.slurmd_port,
        "munge_socket": settings.munge_socket,
        "state_dir": settings.slurm_dir / "state",
        "spool_dir": settings.slurm_dir / "spool",
        "epilog_script": settings.epilog_script,
        "epilog_sleep_file": settings.epilog_sleep_file,
        **node,
    }


def write_slurm_files(settings: LabSettings) -> None:
    node = parse_node_config(run(["slurmd", "-C"]).stdout)
    values = slurm_template_values(settings, node)
    settings.slurm_conf.write_text(render_template("slurm.conf.in", values))
    settings.epilog_script.write_text(render_template("epilog.sh.in", values))
    settings.epilog_script.chmod(0o755)
    if not settings.epilog_sleep_file.exists():
        settings.epilog_sleep_file.write_text("0\n")
