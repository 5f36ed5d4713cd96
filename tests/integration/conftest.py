"""Fixtures for tests that use the running lab (start it with `lab/labctl.py start`).

- `lab`: the shared lab's LabSettings (ports, paths, DSN pieces); fails if it is not up.
- `lab_env`: an environment for subprocesses (Slurm clients, psql, ansible-playbook).
- `db_connect`: `db_connect(dbname=..., superuser=False)` -> a psycopg connection,
  closed after the test.
- `fresh_db`: a clone of `arvados_template` for one test, dropped afterwards.
- `slurm`: Slurm's clients on the lab; teardown cancels, by id, what the test submitted.
- `lab_slurm_queue_as_found` (every test that uses the lab): the Slurm jobs that appeared
  on the lab during the test, however they were submitted, are cancelled after it, failed
  or not, and gone from the queue before the next test starts.
- `records`: jobs and containers written straight into the test's `fresh_db`.
- `linked_collection`: the link through which ansible.cfg finds the collection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database import driver as database_driver
from lab import labctl
from tests.integration.module_playbook import REPO_ROOT
from tests.integration.reconcile_helpers import Records
from tests.integration.slurm_helpers import Slurm
from tests.unit.roles.playbook_runs import collections_in


def pytest_report_header(config):
    """Which driver the modules and the command reach PostgreSQL with in this run."""
    forced = os.environ.get(database_driver.DRIVER_ENV)
    how = (
        "%s=%s" % (database_driver.DRIVER_ENV, forced) if forced else "preferred: %s unset" % database_driver.DRIVER_ENV
    )
    try:
        driver = database_driver.load_driver()
    except RecoveryError as error:
        return "database driver: none (%s): %s" % (how, error)
    return "database driver: %s (%s)" % (driver.describe(), how)


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def lab() -> labctl.LabSettings:
    settings = labctl.lab_settings()
    statuses = labctl.service_status(settings)
    down = [f"{name}: {status}" for name, status in statuses.items() if not status.startswith("up")]
    if down:
        pytest.fail(
            f"the lab in {settings.lab_dir} is not up ({'; '.join(down)}); start it with `lab/labctl.py start`",
            pytrace=False,
        )
    return settings


@pytest.fixture(scope="session")
def lab_env(lab: labctl.LabSettings) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "SLURM_", "LAB_"))}
    env.update(lab.exports())
    env["LC_ALL"] = "C"
    return env


@pytest.fixture(scope="session", autouse=True)
def lab_slurm_queue_empty_at_start(request: pytest.FixtureRequest) -> None:
    """The session starts from an empty Slurm queue on the lab: what `make demo` leaves
    running there (its exempt job's Slurm job holds one of the node's two CPUs), or a run
    killed midway, would make tests that count on the node's CPUs wait for nothing. The lab
    is the tests' own; its jobs are cancelled by id and printed."""
    if not any("lab_env" in item.fixturenames for item in request.session.items):
        return
    guard = Slurm(request.getfixturevalue("lab_env"))
    guard.submitted = list(guard.queue())
    if guard.submitted:
        print("integration tests: cancelling the lab's leftover Slurm jobs %s" % ", ".join(guard.submitted))
        guard.cancel_leftovers()


@pytest.fixture(autouse=True)
def lab_slurm_queue_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test leaves the lab's Slurm queue as it found it, even when it fails midway.

    One pytest run uses a lab at a time (each LAB_DIR has its own slurmctld), so the jobs
    that appeared during a test are that test's: its module runs, playbooks and helpers
    submit some the `slurm` fixture does not see. A job left running takes a CPU the next
    test counts on; one left COMPLETING holds back every scheduling pass of slurmctld.
    """
    if "lab_env" not in request.fixturenames:
        yield
        return
    guard = Slurm(request.getfixturevalue("lab_env"))
    before = set(guard.queue())
    yield
    guard.submitted = [job_id for job_id in guard.queue() if job_id not in before]
    guard.cancel_leftovers()


@pytest.fixture
def db_connect(lab: labctl.LabSettings) -> Iterator[Callable[..., psycopg.Connection]]:
    """Connect as `arvados` over TCP with its password, or as superuser over the socket."""
    opened: list[psycopg.Connection] = []

    def connect(dbname: str = labctl.DATABASE, superuser: bool = False, **options) -> psycopg.Connection:
        keywords = lab.superuser_connection(dbname) if superuser else lab.connection(dbname)
        keywords.update(options)
        connection = psycopg.connect(**keywords)
        opened.append(connection)
        return connection

    yield connect
    for connection in opened:
        connection.close()


@dataclasses.dataclass
class FreshDatabase:
    """A database cloned from arvados_template, owned by `arvados`."""

    name: str
    lab: labctl.LabSettings

    @property
    def connection(self) -> dict[str, object]:
        return self.lab.connection(self.name)

    @property
    def superuser_connection(self) -> dict[str, object]:
        return self.lab.superuser_connection(self.name)

    def connect(self, superuser: bool = False, **options) -> psycopg.Connection:
        keywords = self.superuser_connection if superuser else self.connection
        return psycopg.connect(**{**keywords, **options})

    def write_arvados_config(self, path: Path) -> Path:
        """An /etc/arvados/config.yml naming this database (file mode 0600)."""
        labctl.write_private_file(
            path, labctl.render_arvados_config(self.lab, self.lab.db_password(), dbname=self.name)
        )
        return path

    def write_database_yml(self, path: Path) -> Path:
        """An older /etc/arvados/api/database.yml naming this database (file mode 0600)."""
        labctl.write_private_file(path, labctl.render_database_yml(self.lab, self.lab.db_password(), dbname=self.name))
        return path


@contextlib.contextmanager
def schema_database(lab: labctl.LabSettings, schema_dir: Path) -> Iterator[FreshDatabase]:
    """A new database of another schema than the template's (lab/schema/2017, 1.4.3, 3.2.1):
    its tables.sql then indexes.sql, as `arvados`; dropped afterwards. Trigram indexes
    (3.2.1's) need pg_trgm, which only a superuser creates, as for the template."""
    name = f"lab_test_{schema_dir.name.replace('.', '')}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE template0").format(
                sql.Identifier(name), sql.Identifier(labctl.DB_ROLE)
            )
        )
    try:
        if "gin_trgm_ops" in (schema_dir / "indexes.sql").read_text():
            with psycopg.connect(**lab.superuser_connection(name), autocommit=True) as admin:
                admin.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        with psycopg.connect(**lab.connection(name), autocommit=True) as conn:
            for file_name in ("tables.sql", "indexes.sql"):
                conn.execute((schema_dir / file_name).read_text())
        yield FreshDatabase(name, lab)
    finally:
        with psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def fresh_db(lab: labctl.LabSettings) -> Iterator[FreshDatabase]:
    name = f"lab_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE DATABASE {} OWNER {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(labctl.DB_ROLE), sql.Identifier(labctl.TEMPLATE_DATABASE)
            )
        )
    try:
        yield FreshDatabase(name, lab)
    finally:
        with psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def slurm(lab_env: dict[str, str]) -> Iterator[Slurm]:
    """Slurm's clients on the lab; teardown cancels, by id, only what the test submitted."""
    client = Slurm(lab_env)
    yield client
    client.cancel_leftovers()


@pytest.fixture
def records(fresh_db: FreshDatabase) -> Iterator[Records]:
    """Jobs and containers written straight into the test's fresh database."""
    with fresh_db.connect() as conn:
        yield Records(conn)


@pytest.fixture(scope="session")
def linked_collection() -> None:
    """ansible.cfg finds arvados_ops.recovery through this link (made by make test too)."""
    subprocess.run([str(REPO_ROOT / "scripts" / "link-collection.sh")], check=True, capture_output=True, timeout=30)


@pytest.fixture
def collections(tmp_path: Path) -> Path:
    """A collections path holding this checkout, for the roles run for real on this host (as
    root, on files in a temporary directory; the host's /etc and systemd are left alone)."""
    return collections_in(tmp_path)
