"""The lab itself, on a second lab (own LAB_DIR and ports) so the shared one is never touched.

The expected schema below is written from ARVADOS.md, not read from lab/schema/, so a
schema file that drifts from Arvados fails here.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import NamedTuple

import psycopg
import pytest
import yaml

from lab import labctl
from tests.integration.slurm_helpers import Slurm, SlurmTiming, wait_for

LABCTL = Path(labctl.__file__)
SECOND_LAB_PORTS = {"LAB_PG_PORT": "55433", "LAB_SLURMCTLD_PORT": "16827", "LAB_SLURMD_PORT": "16828"}
JOB_UUID = "zzzzz-8i9sb-{:015d}"

VARCHAR = ("character varying", 255)
TEXT = ("text", None)
TIMESTAMP = ("timestamp without time zone", None)
BOOLEAN = ("boolean", None)
INTEGER = ("integer", None)
BIGINT = ("bigint", None)
ANY_INT = "integer or bigint"
DOUBLE = ("double precision", None)
NEXTVAL = "nextval("


class Column(NamedTuple):
    type: object = None  # (data_type, max length), ANY_INT, or None: not stated
    not_null: bool | None = None
    default: str | None = None  # a substring of column_default; None: not stated


def nullable(kind) -> Column:
    return Column(kind, False)


def required(kind) -> Column:
    return Column(kind, True)


# ARVADOS.md lists every column of jobs and its NOT NULLs: the others must be nullable,
# since failing or requeueing a job writes NULL into them.
JOBS_COLUMNS = {
    "id": Column(BIGINT, True, NEXTVAL),
    **{
        name: nullable(VARCHAR)
        for name in (
            "uuid",
            "owner_uuid",
            "modified_by_client_uuid",
            "modified_by_user_uuid",
            "submit_id",
            "script",
            "script_version",
            "cancelled_by_client_uuid",
            "cancelled_by_user_uuid",
            "output",
            "is_locked_by_uuid",
            "log",
            "repository",
            "supplied_script_version",
            "docker_image_locator",
            "state",
            "arvados_sdk_version",
            "script_parameters_digest",
        )
    },
    **{name: nullable(TEXT) for name in ("script_parameters", "tasks_summary", "runtime_constraints", "components")},
    **{name: nullable(TIMESTAMP) for name in ("modified_at", "cancelled_at", "started_at", "finished_at")},
    **{name: nullable(BOOLEAN) for name in ("running", "success", "nondeterministic")},
    "created_at": required(TIMESTAMP),
    "updated_at": required(TIMESTAMP),
    "priority": Column(INTEGER, True, "0"),
    "description": nullable(("character varying", 524288)),
}

EXPECTED_COLUMNS: dict[str, dict[str, Column]] = {
    "jobs": JOBS_COLUMNS,
    "job_tasks": {
        "id": Column(ANY_INT, True, NEXTVAL),
        **{name: Column(VARCHAR) for name in ("uuid", "owner_uuid", "job_uuid", "created_by_job_task_uuid")},
        **{name: Column() for name in ("sequence", "qsequence", "parameters", "output")},
        "progress": Column(DOUBLE),
        "success": Column(BOOLEAN),
        "created_at": required(TIMESTAMP),
        "updated_at": required(TIMESTAMP),
        **{name: Column(TIMESTAMP) for name in ("modified_at", "started_at", "finished_at")},
    },
    "logs": {
        "id": Column(ANY_INT, True, NEXTVAL),
        **{
            name: Column(VARCHAR)
            for name in (
                "uuid",
                "owner_uuid",
                "modified_by_client_uuid",
                "modified_by_user_uuid",
                "object_uuid",
                "object_owner_uuid",
                "event_type",
            )
        },
        "event_at": Column(TIMESTAMP),
        "summary": Column(TEXT),
        "properties": Column(TEXT),
        "created_at": required(TIMESTAMP),
        "updated_at": required(TIMESTAMP),
        "modified_at": Column(TIMESTAMP),
    },
    "api_client_authorizations": {
        "id": Column(ANY_INT, True, NEXTVAL),
        "uuid": Column(VARCHAR),
        "api_token": Column(VARCHAR),
        "api_client_id": Column(ANY_INT, True),
        "user_id": Column(ANY_INT, True),
        "expires_at": Column(TIMESTAMP),
        "created_at": required(TIMESTAMP),
        "updated_at": required(TIMESTAMP),
        "default_owner_uuid": Column(VARCHAR),
        "scopes": Column(TEXT, None, "'[\"all\"]'"),
        "last_used_at": Column(TIMESTAMP),
        "refreshes_at": Column(TIMESTAMP),
    },
    "containers": {
        "id": Column(ANY_INT, True, NEXTVAL),
        **{name: Column(VARCHAR) for name in ("uuid", "owner_uuid", "state", "auth_uuid", "locked_by_uuid")},
        "created_at": required(TIMESTAMP),
        "updated_at": required(TIMESTAMP),
        "started_at": Column(TIMESTAMP),
        "finished_at": Column(TIMESTAMP),
        **{name: Column() for name in ("priority", "progress", "exit_code")},
        # Added NOT NULL with defaults by the current schema: inserts may leave them out.
        **{
            name: Column(None, True, "")
            for name in ("lock_count", "cost", "subrequests_cost", "service", "interactive_session_started")
        },
    },
    "users": {
        "id": Column(ANY_INT, True, NEXTVAL),
        "uuid": Column(VARCHAR),
        "owner_uuid": required(VARCHAR),
        "created_at": required(TIMESTAMP),
        "updated_at": required(TIMESTAMP),
        **{name: Column(VARCHAR) for name in ("email", "first_name", "last_name", "username")},
        "is_admin": Column(BOOLEAN),
        "is_active": Column(BOOLEAN),
    },
    # What the cleanup reads of crunch v1 pipelines (a running one may own a token).
    "pipeline_instances": {
        "id": Column(ANY_INT, True, NEXTVAL),
        **{name: Column(VARCHAR) for name in ("uuid", "owner_uuid", "modified_by_user_uuid", "state")},
        "created_at": required(TIMESTAMP),
        "updated_at": required(TIMESTAMP),
        **{name: Column(TIMESTAMP) for name in ("modified_at", "started_at", "finished_at")},
    },
}


class Index(NamedTuple):
    table: str
    method: str
    columns: str  # as pg_get_indexdef prints them
    unique: bool = False
    name: str | None = None


JOBS_SEARCH_COLUMNS = (
    "uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, submit_id, script, "
    "script_version, cancelled_by_client_uuid, cancelled_by_user_uuid, output, "
    "is_locked_by_uuid, log, repository, supplied_script_version, docker_image_locator, "
    "state, arvados_sdk_version"
)
LOGS_SEARCH_COLUMNS = (
    "uuid, owner_uuid, modified_by_client_uuid, modified_by_user_uuid, object_uuid, event_type, object_owner_uuid"
)

EXPECTED_INDEXES = [
    *(
        Index("jobs", "btree", column)
        for column in (
            "created_at",
            "finished_at",
            "modified_at",
            "modified_at DESC, uuid",
            "output",
            "owner_uuid",
            "script",
            "script_parameters_digest",
            "started_at",
        )
    ),
    Index("jobs", "btree", "uuid", unique=True),
    Index("jobs", "btree", "submit_id", unique=True),
    Index("jobs", "btree", JOBS_SEARCH_COLUMNS, name="jobs_search_index"),
    *(
        Index("logs", "btree", column)
        for column in (
            "event_at",
            "event_type",
            "object_uuid",
            "object_owner_uuid",
            "owner_uuid",
            "summary",
            "created_at, uuid",
            "modified_at, uuid",
        )
    ),
    Index("logs", "btree", "uuid", unique=True),
    Index("logs", "btree", LOGS_SEARCH_COLUMNS, name="logs_search_index"),
    *(
        Index("job_tasks", "btree", column)
        for column in (
            "job_uuid",
            "created_at",
            "modified_at",
            "owner_uuid",
            "sequence",
            "success",
            "created_by_job_task_uuid",
        )
    ),
    Index("job_tasks", "btree", "uuid", unique=True),
    Index("api_client_authorizations", "btree", "api_token", unique=True),
    Index("api_client_authorizations", "btree", "uuid", unique=True),
    *(Index("api_client_authorizations", "btree", column) for column in ("api_client_id", "expires_at", "user_id")),
    Index("pipeline_instances", "btree", "uuid", unique=True),
]

# The 22 text columns of the trigram index, in Arvados' order.
TRGM_COLUMNS = (
    "uuid",
    "owner_uuid",
    "modified_by_client_uuid",
    "modified_by_user_uuid",
    "submit_id",
    "script",
    "script_version",
    "script_parameters",
    "cancelled_by_client_uuid",
    "cancelled_by_user_uuid",
    "output",
    "is_locked_by_uuid",
    "log",
    "tasks_summary",
    "runtime_constraints",
    "repository",
    "supplied_script_version",
    "docker_image_locator",
    "description",
    "state",
    "arvados_sdk_version",
    "components",
)


# ---------------------------------------------------------------- the second lab


@dataclasses.dataclass
class SecondLab:
    settings: labctl.LabSettings
    env: dict[str, str]

    def labctl(self, *arguments: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [str(LABCTL), *arguments], env=self.env, capture_output=True, text=True, timeout=180, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(f"labctl {' '.join(arguments)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def slurm(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=60, check=True)

    def submit(self, job_number: int, command: str) -> tuple[str, str]:
        name = JOB_UUID.format(job_number)
        result = self.slurm(
            "sbatch", "--parsable", f"--job-name={name}", "--output=/dev/null", "--chdir=/tmp", "--wrap", command
        )
        return result.stdout.strip().split(";")[0], name

    def queue(self) -> dict[str, tuple[str, str]]:
        """job id -> (name, state) for every job in the lab's queue."""
        lines = self.slurm("squeue", "--all", "--noheader", "--format=%i %j %T").stdout
        return {job_id: (name, state) for job_id, name, state in (line.split() for line in lines.splitlines())}

    def records(self) -> dict[str, labctl.ProcessRecord]:
        return {service: labctl.read_record(self.settings, service) for service in labctl.SERVICES}

    @property
    def timing(self) -> SlurmTiming:
        return Slurm(self.env).timing


@pytest.fixture(scope="module")
def second_lab():
    lab_dir = Path(tempfile.mkdtemp(prefix="arvlab-test-", dir="/tmp"))
    lab_dir.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "SLURM_", "LAB_"))}
    env.update(SECOND_LAB_PORTS, LAB_DIR=str(lab_dir), LC_ALL="C")
    settings = labctl.lab_settings(environ=env)
    env.update(settings.exports())
    handle = SecondLab(settings, env)
    try:
        yield handle
    finally:
        handle.labctl("stop", check=False)
        shutil.rmtree(lab_dir, ignore_errors=True)


@pytest.fixture
def running_lab(second_lab: SecondLab) -> SecondLab:
    second_lab.labctl("start")
    return second_lab


def processes_mentioning(text: str) -> list[str]:
    """Live processes with `text` in their command line or environment."""
    needle = os.fsencode(text)
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in cmdline or needle in environ:
            readable = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {readable}")
    return found


def everything_started_by(lab: SecondLab) -> list[labctl.ProcessRecord]:
    """The recorded daemons, their descendants (jobs included) and their sessions."""
    found = []
    for record in lab.records().values():
        assert record is not None
        found.append(record)
        found += labctl.descendants(record.pid)
        found += [
            labctl.ProcessRecord.of(pid) for pid in labctl.processes_in_session(record.session) if labctl.proc_stat(pid)
        ]
    return found


# ---------------------------------------------------------------- tests


@pytest.mark.own_lab
def test_a_second_start_leaves_the_running_services_alone(running_lab: SecondLab):
    before = running_lab.records()
    running_lab.labctl("start")
    assert running_lab.records() == before
    status = running_lab.labctl("status")
    assert [line.split()[:2] for line in status.stdout.splitlines()] == [[service, "up"] for service in labctl.SERVICES]
    assert all(f"pid {before[service].pid}" in status.stdout for service in labctl.SERVICES)


@pytest.mark.own_lab
def test_a_stale_pid_file_is_replaced_and_a_recycled_pid_spared(running_lab: SecondLab):
    crashed = running_lab.records()["munged"]
    labctl.terminate(crashed)
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        # The pid file now names a live process that is not munged: a recycled PID.
        recycled = labctl.ProcessRecord.of(bystander.pid)
        labctl.write_record(
            running_lab.settings,
            "munged",
            labctl.ProcessRecord(recycled.pid, recycled.start_time + 1, recycled.session),
        )
        status = running_lab.labctl("status", check=False)
        assert status.returncode == 1 and "munged      down" in status.stdout
        # A caller that needs only PostgreSQL (the one-host Molecule scenarios) asks only it.
        only_postgres = running_lab.labctl("status", "postgresql", check=False)
        assert only_postgres.returncode == 0 and only_postgres.stdout.split()[:2] == ["postgresql", "up"]
        assert len(only_postgres.stdout.splitlines()) == 1
        assert running_lab.labctl("status", "munged", check=False).returncode == 1
        running_lab.labctl("start")
        replacement = running_lab.records()["munged"]
        assert replacement.pid not in (crashed.pid, bystander.pid) and replacement.is_alive()
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.own_lab
def test_postgres_takes_the_arvados_password_from_config_yml(running_lab: SecondLab):
    settings = running_lab.settings
    config = yaml.safe_load(settings.config_yml.read_text())
    connection = config["Clusters"]["zzzzz"]["PostgreSQL"]["Connection"]
    keywords = dict(
        host=connection["host"],
        port=int(connection["port"]),
        user=connection["user"],
        password=connection["password"],
        dbname=connection["dbname"],
    )
    assert (keywords["host"], keywords["port"], keywords["user"], keywords["dbname"]) == (
        "127.0.0.1",
        55433,
        "arvados",
        "arvados_production",
    )
    with psycopg.connect(**keywords) as conn:
        assert conn.execute("SELECT current_user, inet_server_addr()::text").fetchone() == ("arvados", "127.0.0.1/32")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(**{**keywords, "password": keywords["password"] + "x"}).close()

    production = yaml.safe_load(settings.database_yml.read_text())["production"]
    assert (
        production["database"],
        production["username"],
        production["password"],
        production["host"],
        production["port"],
    ) == ("arvados_production", "arvados", keywords["password"], "127.0.0.1", 55433)


@pytest.mark.own_lab
def test_env_gives_psql_the_password_through_a_private_pgpass(running_lab: SecondLab):
    exports = running_lab.labctl("env").stdout
    password = running_lab.settings.db_password()
    assert password not in exports and "PGPASSWORD" not in exports
    assert running_lab.settings.env_sh.read_text() == exports
    assert running_lab.settings.pgpass.stat().st_mode & 0o777 == 0o600
    sourced = subprocess.run(
        ["bash", "-c", 'eval "$1" && exec psql -X -A -t -c "SELECT current_user"', "-", exports],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (sourced.returncode, sourced.stdout.strip()) == (0, "arvados"), sourced.stderr


def actual_columns(conn: psycopg.Connection, table: str) -> dict[str, tuple]:
    rows = conn.execute(
        "SELECT column_name, data_type, character_maximum_length, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = 'public' AND table_name = %s",
        (table,),
    ).fetchall()
    return {name: (data_type, length, nullable == "NO", default) for name, data_type, length, nullable, default in rows}


def column_problems(table: str, actual: dict[str, tuple]) -> list[str]:
    problems = []
    for name, expected in EXPECTED_COLUMNS[table].items():
        if name not in actual:
            problems.append(f"{table}.{name} is missing")
            continue
        data_type, length, not_null, default = actual[name]
        if expected.type == ANY_INT:
            if data_type not in ("integer", "bigint"):
                problems.append(f"{table}.{name} is {data_type}, not an integer")
        elif expected.type is not None and expected.type != (data_type, length):
            problems.append(f"{table}.{name} is {data_type}({length}), not {expected.type}")
        if expected.not_null is not None and expected.not_null != not_null:
            problems.append(f"{table}.{name} NOT NULL is {not_null}, not {expected.not_null}")
        if expected.default is not None and (default is None or expected.default not in default):
            problems.append(f"{table}.{name} default is {default!r}, not {expected.default!r}")
    return problems


@pytest.mark.own_lab
@pytest.mark.parametrize("dbname", [labctl.DATABASE, labctl.TEMPLATE_DATABASE])
def test_schema_has_every_required_column(running_lab: SecondLab, dbname: str):
    with psycopg.connect(**running_lab.settings.superuser_connection(dbname)) as conn:
        problems = [
            problem for table in EXPECTED_COLUMNS for problem in column_problems(table, actual_columns(conn, table))
        ]
        owners = conn.execute(
            "SELECT tablename, tableowner FROM pg_tables WHERE schemaname = 'public' AND tablename = ANY(%s)",
            (list(EXPECTED_COLUMNS),),
        ).fetchall()
    assert problems == []
    assert sorted(owners) == sorted((table, "arvados") for table in EXPECTED_COLUMNS)


def actual_indexes(conn: psycopg.Connection) -> list[tuple[str, str, str, bool, str]]:
    """(table, method, columns, unique, name) parsed from pg_get_indexdef."""
    rows = conn.execute(
        "SELECT c.relname, i.relname, x.indisunique, pg_get_indexdef(x.indexrelid) "
        "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
        "JOIN pg_class c ON c.oid = x.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public'"
    ).fetchall()
    parsed = []
    for table, name, unique, definition in rows:
        method_and_columns = definition.split(" USING ", 1)[1]
        method, columns = method_and_columns.split(" ", 1)
        parsed.append((table, method, columns[1:-1], unique, name))
    return parsed


@pytest.mark.own_lab
def test_schema_has_every_index_arvados_maintains(running_lab: SecondLab):
    with psycopg.connect(**running_lab.settings.superuser_connection()) as conn:
        indexes = actual_indexes(conn)
        extensions = [row[0] for row in conn.execute("SELECT extname FROM pg_extension")]
    missing = [
        expected
        for expected in EXPECTED_INDEXES
        if not any(
            (table, method, columns, unique) == expected[:4] and expected.name in (None, name)
            for table, method, columns, unique, name in indexes
        )
    ]
    assert missing == []
    assert "pg_trgm" in extensions
    no_state_index = [index for index in indexes if index[:3] == ("jobs", "btree", "state")]
    assert no_state_index == []


@pytest.mark.own_lab
def test_jobs_have_the_trigram_text_search_index(running_lab: SecondLab):
    with psycopg.connect(**running_lab.settings.superuser_connection()) as conn:
        definition = conn.execute("SELECT pg_get_indexdef(%s::regclass)", ("jobs_trgm_text_search_idx",)).fetchone()[0]
    assert " USING gin " in definition and "gin_trgm_ops" in definition
    coalesced = [part.split(",")[0] for part in definition.split("COALESCE(")[1:]]
    assert coalesced == list(TRGM_COLUMNS)
    assert definition.count("' '::text") == len(TRGM_COLUMNS) - 1


@pytest.mark.own_lab
def test_reset_db_rebuilds_empty_databases_idempotently(running_lab: SecondLab):
    production = running_lab.settings.connection()
    with psycopg.connect(**production) as conn:
        conn.execute(
            "INSERT INTO users (uuid, owner_uuid, created_at, updated_at) "
            "VALUES ('zzzzz-tpzed-000000000000000', 'zzzzz-tpzed-000000000000000', "
            "now(), now())"
        )
    lingering = psycopg.connect(**production)  # reset-db must not wait for it
    try:
        for _attempt in range(2):
            result = running_lab.labctl("reset-db")
            assert "reset-db rebuilds" not in result.stderr
    finally:
        lingering.close()
    with psycopg.connect(**production) as conn:
        assert conn.execute("SELECT count(*) FROM users").fetchone() == (0,)
    with psycopg.connect(**running_lab.settings.superuser_connection("postgres")) as conn:
        assert conn.execute(
            "SELECT datistemplate FROM pg_database WHERE datname = %s", (labctl.TEMPLATE_DATABASE,)
        ).fetchone() == (True,)


@pytest.mark.own_lab
def test_logs_shows_the_end_of_each_log(running_lab: SecondLab):
    result = running_lab.labctl("logs", "postgresql", "-n", "3")
    sections = [section.splitlines() for section in result.stdout.split("==> ")[1:]]
    assert sections[0][0].startswith(f"postgresql: {running_lab.settings.pg_dir}/")
    assert all(section[0].startswith("postgresql: ") and 0 < len(section[1:]) <= 3 for section in sections)
    assert running_lab.labctl("logs", "bogus", check=False).returncode == 1


@pytest.mark.own_lab
def test_a_job_named_after_an_arvados_uuid_shows_in_squeue(running_lab: SecondLab):
    job_id, name = running_lab.submit(1, "exec sleep 60")
    try:
        assert running_lab.queue()[job_id][0] == name
        assert wait_for(lambda: running_lab.queue()[job_id][1] == "RUNNING", running_lab.timing.start_bound)
    finally:
        running_lab.slurm("scancel", job_id)
    assert wait_for(lambda: job_id not in running_lab.queue(), running_lab.timing.end_bound)


@pytest.mark.own_lab
def test_epilog_sleep_holds_a_finished_job_in_completing(running_lab: SecondLab):
    running_lab.labctl("epilog-sleep", "2")
    try:
        job_id, _name = running_lab.submit(2, "exec true")
        seen = []

        def completing() -> bool:
            state = running_lab.queue().get(job_id, ("", "GONE"))[1]
            seen.append(state)
            return state == "COMPLETING"

        timing = running_lab.timing
        assert wait_for(completing, timing.start_bound, interval=0.05), f"states seen: {sorted(set(seen))}"
        assert wait_for(lambda: job_id not in running_lab.queue(), 2 + timing.end_bound)
    finally:
        running_lab.labctl("epilog-sleep", "0")
    job_id, _name = running_lab.submit(3, "exec true")
    assert wait_for(lambda: job_id not in running_lab.queue(), timing.start_bound + timing.end_bound)
    assert running_lab.settings.epilog_sleep_file.read_text().strip() == "0"


@pytest.mark.own_lab
def test_stop_leaves_no_process_behind(running_lab: SecondLab):
    job_id, _name = running_lab.submit(4, "exec sleep 300")
    assert wait_for(lambda: running_lab.queue()[job_id][1] == "RUNNING", running_lab.timing.start_bound)
    started = everything_started_by(running_lab)
    assert len(started) > len(labctl.SERVICES)  # the job's processes are among them

    running_lab.labctl("stop")

    # is_alive() counts a zombie waiting for this sandbox's slow PID 1 as gone.
    assert [record for record in started if record.is_alive()] == []
    lab_dir = str(running_lab.settings.lab_dir)
    assert wait_for(lambda: not processes_mentioning(lab_dir), 3) is True, processes_mentioning(lab_dir)
    assert list(running_lab.settings.pid_dir.iterdir()) == []
    status = running_lab.labctl("status", check=False)
    assert status.returncode == 1
    assert [line.split() for line in status.stdout.splitlines()] == [[service, "down"] for service in labctl.SERVICES]
    assert running_lab.labctl("stop").returncode == 0


@pytest.mark.own_lab
def test_a_failed_start_names_the_service_and_stops_what_it_started(second_lab: SecondLab):
    second_lab.labctl("stop")
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", second_lab.settings.slurmctld_port))
    squatter.listen()
    try:
        result = second_lab.labctl("start", check=False)
    finally:
        squatter.close()
    assert result.returncode != 0
    assert "slurmctld failed to start" in result.stderr
    assert "Address already in use" in result.stderr  # the end of slurmctld's log
    assert list(second_lab.settings.pid_dir.iterdir()) == []
    lab_dir = str(second_lab.settings.lab_dir)
    assert wait_for(lambda: not processes_mentioning(lab_dir), 3) is True, processes_mentioning(lab_dir)
    # The port is free again: the same lab now starts.
    second_lab.labctl("start")
    assert second_lab.labctl("status").returncode == 0


def test_fresh_db_is_a_writable_clone_of_the_template(fresh_db, db_connect):
    with fresh_db.connect() as conn:
        conn.execute(
            "INSERT INTO users (uuid, owner_uuid, created_at, updated_at) VALUES (%s, %s, now(), now())",
            ("zzzzz-tpzed-000000000000000", "zzzzz-tpzed-000000000000000"),
        )
        assert conn.execute("SELECT current_user, current_database()").fetchone() == ("arvados", fresh_db.name)
    template = db_connect(labctl.TEMPLATE_DATABASE, superuser=True)
    assert template.execute("SELECT count(*) FROM users").fetchone() == (0,)
