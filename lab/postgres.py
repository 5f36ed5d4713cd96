"""The lab's PostgreSQL: the cluster, the server, the role, the template database and its clones."""

from __future__ import annotations

import hashlib
import os
import pwd
import shlex
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from lab.files import ensure_password
from lab.processes import ProcessRecord, live_record, probe, run, spawn, terminate
from lab.settings import (
    DATABASE,
    DB_ROLE,
    DB_SUPERUSER,
    EXIT_TIMEOUT,
    PG_BIN,
    READY_TIMEOUT,
    SCHEMA_COMMENT_PREFIX,
    SCHEMA_FILES,
    TEMPLATE_DATABASE,
    LabError,
    LabSettings,
    ServiceStartError,
)


def pg(tool: str) -> str:
    return str(PG_BIN / tool)


def postgres_options(settings: LabSettings) -> str:
    # pg_ctl hands -o to a shell, hence the quoting.
    return " ".join(
        shlex.quote(word)
        for word in ("-p", str(settings.pg_port), "-k", str(settings.pg_socket_dir), "-c", "listen_addresses=127.0.0.1")
    )


PG_HBA = """\
# Written by lab/labctl.py. Socket: trust (the lab's superuser). TCP: a real password check.
local   all   all                 trust
host    all   all   127.0.0.1/32  scram-sha-256
"""


def init_postgres_cluster(settings: LabSettings) -> None:
    if (settings.pg_data / "PG_VERSION").exists():
        return
    run(
        [
            pg("initdb"),
            "-D",
            str(settings.pg_data),
            "-U",
            DB_SUPERUSER,
            "-E",
            "UTF8",
            "--locale=C",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ],
        user="postgres",
        timeout=120,
    )
    hba = settings.pg_data / "pg_hba.conf"
    hba.write_text(PG_HBA)
    postgres = pwd.getpwnam("postgres")
    os.chown(hba, postgres.pw_uid, postgres.pw_gid)


def start_postgres(settings: LabSettings) -> ProcessRecord:
    init_postgres_cluster(settings)
    log = settings.service_logs("postgresql")[0]
    launcher = spawn(
        [
            pg("pg_ctl"),
            "-D",
            str(settings.pg_data),
            "-l",
            str(log),
            "-o",
            postgres_options(settings),
            "-w",
            "-t",
            str(int(READY_TIMEOUT)),
            "start",
        ],
        settings.service_logs("postgresql")[1],
        user="postgres",
    )
    if launcher.wait(timeout=READY_TIMEOUT + 10) != 0:
        raise ServiceStartError("postgresql", f"pg_ctl start exited {launcher.returncode}")
    postmaster_pid = int((settings.pg_data / "postmaster.pid").read_text().split()[0])
    return ProcessRecord.of(postmaster_pid)


def postgres_answers(settings: LabSettings) -> bool:
    result = probe(
        [
            pg("pg_isready"),
            "-q",
            "-h",
            str(settings.pg_socket_dir),
            "-p",
            str(settings.pg_port),
            "-U",
            DB_SUPERUSER,
            "-d",
            "postgres",
        ]
    )
    return result is not None and result.returncode == 0


def stop_postgres(settings: LabSettings, record: ProcessRecord) -> None:
    postmaster_file = settings.pg_data / "postmaster.pid"
    try:
        postmaster_pid = int(postmaster_file.read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        postmaster_pid = None
    if postmaster_pid == record.pid and record.is_alive():
        run(
            [pg("pg_ctl"), "-D", str(settings.pg_data), "-m", "fast", "-w", "-t", str(int(EXIT_TIMEOUT)), "stop"],
            user="postgres",
            check=False,
            timeout=EXIT_TIMEOUT + 10,
        )
    # SIGINT is PostgreSQL's fast shutdown, should pg_ctl not have done it.
    terminate(record, signal.SIGINT)


def psql(
    settings: LabSettings,
    sql: str,
    dbname: str = "postgres",
    user: str = DB_SUPERUSER,
    files: Sequence[Path] = (),
    variables: Mapping[str, str] | None = None,
) -> str:
    """Run SQL through the lab socket. Values go in as psql variables (:'name'), which
    psql quotes as literals; they travel on stdin, never on a command line."""
    argv = [
        pg("psql"),
        "-X",
        "-q",
        "-A",
        "-t",
        "-v",
        "ON_ERROR_STOP=1",
        "-h",
        str(settings.pg_socket_dir),
        "-p",
        str(settings.pg_port),
        "-U",
        user,
        "-d",
        dbname,
    ]
    if files:
        argv.append("--single-transaction")
        for path in files:
            argv += ["-f", str(path)]
    script = "".join(f"\\set {name} '{value}'\n" for name, value in (variables or {}).items())
    return run(argv, input_text=script + sql, timeout=3600).stdout


def schema_files(settings: LabSettings) -> list[Path]:
    paths = [settings.schema_dir / name for name in SCHEMA_FILES]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise LabError(f"schema file(s) missing: {', '.join(missing)} (set LAB_SCHEMA_DIR to use another schema)")
    return paths


def schema_digest(settings: LabSettings) -> str:
    digest = hashlib.sha256()
    for path in schema_files(settings):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def database_exists(settings: LabSettings, dbname: str) -> bool:
    return (
        psql(settings, "SELECT count(*) FROM pg_database WHERE datname = :'name';", variables={"name": dbname}).strip()
        == "1"
    )


def database_schema_digest(settings: LabSettings, dbname: str) -> str | None:
    comment = psql(
        settings,
        "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = :'name';",
        variables={"name": dbname},
    ).strip()
    if comment.startswith(SCHEMA_COMMENT_PREFIX):
        return comment[len(SCHEMA_COMMENT_PREFIX) :]
    return None


def ensure_role(settings: LabSettings) -> None:
    psql(
        settings,
        "SELECT format('CREATE ROLE %I', :'role') WHERE NOT EXISTS "
        "(SELECT FROM pg_roles WHERE rolname = :'role') \\gexec\n"
        "SELECT format('ALTER ROLE %I WITH LOGIN PASSWORD %L', :'role', :'password') \\gexec\n",
        variables={"role": DB_ROLE, "password": ensure_password(settings)},
    )


def create_template_database(settings: LabSettings) -> None:
    """arvados_template: pg_trgm (as superuser), then the schema files as `arvados`."""
    files = schema_files(settings)
    digest = schema_digest(settings)
    variables = {"db": TEMPLATE_DATABASE, "role": DB_ROLE, "comment": SCHEMA_COMMENT_PREFIX + digest}
    psql(
        settings,
        "SELECT format('CREATE DATABASE %I OWNER %I TEMPLATE template0', :'db', :'role') \\gexec\n",
        variables=variables,
    )
    try:
        psql(settings, "CREATE EXTENSION IF NOT EXISTS pg_trgm;", dbname=TEMPLATE_DATABASE)
        psql(settings, "", dbname=TEMPLATE_DATABASE, user=DB_ROLE, files=files)
    except LabError:
        drop_database(settings, TEMPLATE_DATABASE)
        raise
    psql(
        settings,
        "SELECT format('COMMENT ON DATABASE %I IS %L', :'db', :'comment') \\gexec\n"
        "SELECT format('ALTER DATABASE %I IS_TEMPLATE true', :'db') \\gexec\n",
        variables=variables,
    )


def clone_database(settings: LabSettings, name: str) -> None:
    """A copy of arvados_template owned by `arvados` (a file copy: fast)."""
    psql(
        settings,
        "SELECT format('CREATE DATABASE %I OWNER %I TEMPLATE %I', "
        ":'db', :'role', :'tpl') \\gexec\n"
        "SELECT format('COMMENT ON DATABASE %I IS %L', :'db', "
        "shobj_description(oid, 'pg_database')) FROM pg_database WHERE datname = :'tpl' \\gexec\n",
        variables={"db": name, "role": DB_ROLE, "tpl": TEMPLATE_DATABASE},
    )


def drop_database(settings: LabSettings, name: str) -> None:
    psql(
        settings,
        "SELECT format('ALTER DATABASE %I IS_TEMPLATE false', :'db') FROM pg_database "
        "WHERE datname = :'db' \\gexec\n"
        "SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db') \\gexec\n",
        variables={"db": name},
    )


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
            print(
                f"lab: {name} was not built from the current {settings.schema_dir} files; "
                "`lab/labctl.py reset-db` rebuilds it",
                file=sys.stderr,
            )


def reset_databases(settings: LabSettings) -> None:
    if live_record(settings, "postgresql") is None:
        raise LabError("postgresql is not running; run `lab/labctl.py start` first")
    schema_files(settings)
    for name in (DATABASE, TEMPLATE_DATABASE):
        drop_database(settings, name)
    ensure_databases(settings)
