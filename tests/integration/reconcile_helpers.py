"""Shared helpers of the arvados_reconcile_info and recover_after_node_reboot.yml tests.

- `Records`: jobs and containers written straight into a test's fresh database, each with
  a new random UUID (so Slurm job names never collide with another test's);
- `run_reconcile(...)`: the module in a real `ansible-playbook` run, result as a dict;
- `node_down(...)`: the lab's node taken down as a reboot does, and always brought back.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import (
    CONTAINER_INFIX,
    JOB_INFIX,
    TOKEN_INFIX,
    USER_INFIX,
    new_uuid,
)
from lab.postgres import pg
from lab.processes import run
from tests.integration import module_playbook
from tests.integration.module_playbook import REPO_ROOT
from tests.integration.ports import free_ports
from tests.integration.slurm_helpers import wait_for

MODULE = "arvados_ops.recovery.arvados_reconcile_info"
PREFIX = "zzzzz"
DISPATCHER_TOKEN = "%s-%s-000000000000000" % (PREFIX, TOKEN_INFIX)
LAB_NODE = "localhost"
# Rows are last modified this many seconds ago unless a test says otherwise: far past
# arvados_reconcile_info's orphan_grace (60 s), so that only a test about the grace meets it.
MODIFIED_AGO = 600.0
_AGO = "(now() AT TIME ZONE 'UTC') - %s * interval '1 second'"


class Records:
    """Rows of one test's database: only the columns reconciling reads, plus NOT NULL ones."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.user = new_uuid(PREFIX, USER_INFIX)

    def job(self, state: str, started: bool = True, modified_ago: float = MODIFIED_AGO) -> str:
        """A job; its row last modified `modified_ago` seconds ago (UTC, as Arvados writes it)."""
        uuid = new_uuid(PREFIX, JOB_INFIX)
        self.conn.execute(
            "INSERT INTO jobs (uuid, owner_uuid, state, running, created_at, updated_at,"
            " modified_at, started_at, is_locked_by_uuid)"
            " VALUES (%s, %s, %s, %s, now() - interval '1 hour', now(), " + _AGO + ","
            " CASE WHEN %s THEN now() - interval '50 minutes' END, %s)",
            (uuid, self.user, state, state == "Running", modified_ago, started, self.user),
        )
        self.conn.commit()
        return uuid

    def container(self, state: str, priority: int = 1, modified_ago: float = MODIFIED_AGO) -> str:
        uuid = new_uuid(PREFIX, CONTAINER_INFIX)
        locked = state in ("Locked", "Running")
        self.conn.execute(
            "INSERT INTO containers (uuid, owner_uuid, state, priority, created_at, updated_at,"
            " modified_at, started_at, locked_by_uuid)"
            " VALUES (%s, %s, %s, %s, now() - interval '1 hour', now(), " + _AGO + ","
            " CASE WHEN %s = 'Running' THEN now() - interval '50 minutes' END, %s)",
            (uuid, self.user, state, priority, modified_ago, state, DISPATCHER_TOKEN if locked else None),
        )
        self.conn.commit()
        return uuid

    def lock(self, uuid: str, locked_by_uuid: str, lock_count: int) -> None:
        self.conn.execute(
            "UPDATE containers SET locked_by_uuid = %s, lock_count = %s WHERE uuid = %s",
            (locked_by_uuid, lock_count, uuid),
        )
        self.conn.commit()

    def token(self, expires_in: float | None) -> tuple[str, str]:
        """(token UUID, its user's UUID): a user and a token expiring `expires_in` seconds
        from now (negative: expired; None: never), as Arvados writes them (UTC)."""
        user = new_uuid(PREFIX, USER_INFIX)
        user_id = self.conn.execute(
            "INSERT INTO users (uuid, owner_uuid, created_at, updated_at) VALUES (%s, %s, now(), now()) RETURNING id",
            (user, user),
        ).fetchone()[0]
        uuid = new_uuid(PREFIX, TOKEN_INFIX)
        self.conn.execute(
            "INSERT INTO api_client_authorizations (uuid, api_token, api_client_id, user_id, created_at,"
            " updated_at, expires_at) VALUES (%s, %s, 0, %s, now(), now(),"
            " CASE WHEN %s::float8 IS NOT NULL THEN (now() AT TIME ZONE 'UTC') + %s * interval '1 second' END)",
            (uuid, uuid + "secret", user_id, expires_in, expires_in),
        )
        self.conn.commit()
        return uuid, user

    def modified(self, table: str, uuid: str, ago: float) -> None:
        """Sets the row's modified_at `ago` seconds before the database's now (UTC, as Arvados
        writes it): a test moves time back instead of sleeping."""
        self.conn.execute("UPDATE %s SET modified_at = %s WHERE uuid = %%s" % (table, _AGO % "%s"), (ago, uuid))
        self.conn.commit()

    def started_at(self, table: str, uuid: str):
        row = self.conn.execute("SELECT started_at FROM %s WHERE uuid = %%s" % table, (uuid,)).fetchone()
        self.conn.commit()
        return row[0]

    def state(self, table: str, uuid: str) -> str | None:
        row = self.conn.execute("SELECT state FROM %s WHERE uuid = %%s" % table, (uuid,)).fetchone()
        self.conn.commit()
        return row[0] if row else None


def reconcile_args(config_file: Path, **extra: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"config_file": str(config_file), "cluster_prefix": PREFIX, "settle": 1}
    args.update(extra)
    return args


def run_reconcile(
    env: Mapping[str, str], directory: Path, args: Mapping[str, Any], check: bool = False, timeout: float = 120
) -> dict[str, Any]:
    """One real ansible-playbook run of the module; its result (failed ones too)."""
    run = module_playbook.run_playbook(MODULE, env, directory, [{"args": args, "check": check}], timeout)
    return run.results[0]


def names(entries, key: str = "uuid"):
    return sorted(entry[key] for entry in entries)


def submit_like_the_dispatcher(slurm, name: str) -> str:
    """A running Slurm job submitted with --no-requeue, as crunch-dispatch-slurm does since
    1.4.0: when its node fails Slurm ends it NODE_FAIL instead of queueing it again."""
    return slurm.sbatch(
        [
            "sbatch",
            "--parsable",
            "--no-requeue",
            "--job-name=" + name,
            "--output=/dev/null",
            "--chdir=/tmp",
            "--wrap",
            "exec sleep 300",
        ]
    )


@contextlib.contextmanager
def node_down(slurm, node: str = LAB_NODE, reason: str = "reboot", state: str = "down") -> Iterator[None]:
    """`scontrol update nodename=<node> state=<state> reason=<reason>`; back to service
    afterwards, even when the test failed, and idle again before the next test, which would
    otherwise find no CPU to run on."""
    slurm.run("scontrol", "update", "nodename=" + node, "state=" + state, "reason=" + reason)
    try:
        yield
    finally:
        slurm.run("scontrol", "update", "nodename=" + node, "state=resume", check=False)
        bound = slurm.timing.node_bound
        assert wait_for(lambda: node_takes_jobs(slurm, node), bound, interval=0.2), (
            "node %s not back %.0f s after resume: %s"
            % (
                node,
                bound,
                node_state(slurm, node),
            )
        )


def node_state(slurm, node: str) -> str:
    return slurm.run("sinfo", "--noheader", "--nodes=" + node, "--format=%T", check=False).stdout.strip()


def node_takes_jobs(slurm, node: str) -> bool:
    # sinfo's long states: idle, mixed, allocated; "*" marks a node that does not answer.
    state = node_state(slurm, node)
    return state in ("idle", "mixed", "allocated")


@contextlib.contextmanager
def standby_server(directory: Path) -> Iterator[dict[str, Any]]:
    """A real hot standby: a PostgreSQL primary of its own, with the lab's tables, and a
    streaming replica of it (pg_basebackup -R), both on free loopback ports under
    `directory` (owned by postgres), never the lab's server. Yields the standby's
    connection options for the module (trust authentication: no password)."""
    directory.mkdir(parents=True, exist_ok=True)
    postgres = pwd.getpwnam("postgres")
    os.chown(directory, postgres.pw_uid, postgres.pw_gid)
    primary, standby = directory / "primary", directory / "standby"
    ports = free_ports(2)
    run(
        [pg("initdb"), "-D", str(primary), "-U", "postgres", "--auth=trust", "--locale=C", "-E", "UTF8"],
        user="postgres",
        timeout=180,
    )
    started: list[Path] = []
    try:
        _start(primary, ports[0], started)
        primary_server = ["-h", "127.0.0.1", "-p", str(ports[0]), "-U", "postgres"]
        psql_primary = [pg("psql"), *primary_server, "-v", "ON_ERROR_STOP=1", "-q"]
        run(psql_primary + ["-c", "CREATE EXTENSION pg_trgm"], user="postgres")
        for schema in ("tables.sql", "indexes.sql"):
            run(psql_primary + ["-f", str(REPO_ROOT / "lab" / "schema" / schema)], user="postgres", timeout=120)
        backup = [pg("pg_basebackup"), *primary_server, "-D", str(standby), "-R", "-X", "stream"]
        run(backup, user="postgres", timeout=180)
        _start(standby, ports[1], started)
        yield {"db_host": "127.0.0.1", "db_port": ports[1], "db_name": "postgres", "db_user": "postgres"}
    finally:
        for data in reversed(started):
            run([pg("pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], user="postgres", check=False)
        shutil.rmtree(directory, ignore_errors=True)


def _start(data: Path, port: int, started: list[Path]) -> None:
    options = "-p %d -k %s -c listen_addresses=127.0.0.1" % (port, data.parent)
    run(
        [
            pg("pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(data.parent / (data.name + ".log")),
            "-o",
            options,
            "-w",
            "-t",
            "120",
            "start",
        ],
        user="postgres",
        timeout=180,
    )
    started.append(data)
