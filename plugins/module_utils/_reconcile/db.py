# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The database reads of a reconciliation: set-based, streamed, read-only.

Every statement reads a set: the live records of a kind in one scan (memory follows the
live records, never the table), and the rows of many UUIDs with ``uuid = ANY(...)`` in
batches. No statement is ever issued per UUID, and none
writes: the session is read-only (``SET SESSION CHARACTERISTICS AS TRANSACTION READ
ONLY``), and each phase ends its transaction, so nothing is held open across ``settle``.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence

from .._common.errors import ConfigError, RecoveryError
from .._common.uuids import USER_INFIX, is_valid_prefix
from .._database.driver import SQL_NOW_UTC, Connection, pipeline_of, server_version, streams_in_chunks
from .engine import (
    CONTAINERS,
    DEFAULT_ORPHAN_GRACE,
    JOBS,
    REREAD_CHUNK_ROWS,
    LiveRow,
    ReadAgain,
    Record,
    VersionsText,
    inconsistent_of,
)
from .locked_containers import LockToken

# lib/controller/dblock/dblock.go (2.5.0 to 3.2.1): `Dispatch = &DBLocker{key: 10005}
# // any dispatcher running`, taken with pg_try_advisory_lock($1) on a bigint key by
# crunch-dispatch-slurm, arvados-dispatch-cloud and arvados-dispatch-lsf. A one-bigint
# key shows in pg_locks as classid = high 32 bits (0), objid = low 32 bits,
# objsubid = 1. Reading pg_locks takes nothing: a dispatcher waiting for the lock
# is never delayed by this look.
DISPATCH_LOCK_KEY = 10005
SQL_DISPATCH_LOCK = """
    SELECT l.pid, a.application_name, a.client_addr::text, a.backend_start
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = 0 AND l.objid = %(key)s AND l.objsubid = 1
"""

# The sixth column tells a live row whose finished_at is set: an inconsistent row, which the
# re-read's scan of unfinished rows cannot see (it is read again by UUID instead). The
# seventh, for containers, a row modified within the orphan grace (%(grace)s seconds) before
# the database's now() in UTC, as Arvados writes modified_at (a modified_at ahead of the
# database's clock is recent too); jobs have no grace (reconcile.py), so false. The eighth,
# the seconds from modified_at to the database's now(): the 60 s in which a crunch v1 job's
# Slurm job is ending, not stray (1.4.3:services/api/lib/crunch_dispatch.rb:892-896, which
# compares with its own clock; the database's is the one every writer of modified_at
# shares), and the age of a job awaiting crunch-dispatch.rb's retry. The last is the row's
# version: xmin, the transaction that wrote this version of the row.
# The third is started_at as the report shows it, ISO 8601 (the session's DateStyle is ISO,
# see make_read_only): made by the server in C, it spares a datetime built by the driver and
# formatted again in Python for each of up to 100,000s of records (0.1 s of a 1.2 s run).
_STARTED_AT = "replace(started_at::text, ' ', 'T')"
_RECENT = "modified_at IS NOT NULL AND modified_at > %s - %%(grace)s * interval '1 second'" % SQL_NOW_UTC
# "from" in lower case: " FROM " ends the column list where the tests read it.
_AGE = "extract(epoch from %s - modified_at)::float8" % SQL_NOW_UTC
_COLUMNS = {
    JOBS: "uuid, state, %s, is_locked_by_uuid, NULL::bigint, finished_at IS NOT NULL, false, %s, xmin::text"
    % (_STARTED_AT, _AGE),
    CONTAINERS: "uuid, state, %s, locked_by_uuid, priority, finished_at IS NOT NULL, %s, %s, xmin::text"
    % (_STARTED_AT, _RECENT, _AGE),
}
_LIVE = {JOBS: "state = 'Running'", CONTAINERS: "state IN ('Locked', 'Running')"}
# The live records: the same predicate as arvados_fail_jobs for jobs.
SQL_LIVE = {kind: "SELECT %s FROM %s WHERE %s" % (_COLUMNS[kind], kind, _LIVE[kind]) for kind in _COLUMNS}
# The UUIDs travel as one comma-joined text (UUIDs hold no comma): psycopg builds a text[]
# parameter in Python, one element at a time, which cost as much as the query itself.
_UUIDS = "uuid = ANY(string_to_array(%(uuids)s, ','))"
SQL_BY_UUID = {kind: "SELECT %s FROM %s WHERE %s" % (columns, kind, _UUIDS) for kind, columns in _COLUMNS.items()}
# The re-read asks only for the versions. For the unfinished live rows: jobs.finished_at has
# its own btree index (index_jobs_on_finished_at, 1.4.3 to 3.2.1), which holds NULLs, so for
# jobs this is an index scan over the unfinished jobs where SQL_LIVE is a scan of the whole
# table. No ORDER BY: the server sorts the UUIDs on disk in the collation's order, slower
# than Python sorts the confirmed records (bench/README.md, arvados_reconcile_info). The
# rows come as two texts, UUIDs and versions each joined in the scan's order (both
# aggregates take the rows in the same order): compared whole with the first read's
# (reconcile.VersionsText), they spare 100,000s of rows made tuples.
SQL_VERSIONS_UNFINISHED = {
    kind: "SELECT string_agg(uuid, ','), string_agg(xmin::text, ',') FROM %s WHERE %s AND finished_at IS NULL"
    % (kind, _LIVE[kind])
    for kind in _COLUMNS
}
SQL_VERSIONS_BY_UUID = {kind: "SELECT uuid, xmin::text FROM %s WHERE %s" % (kind, _UUIDS) for kind in _COLUMNS}
# The candidates are read again by UUID while they are at most this share of the live
# records; beyond it, one scan of the unfinished live records costs less than that many
# index probes (measured: 100,000 live jobs among 1,000,000, a probe cost about twice a
# scanned live row).
REREAD_BY_UUID_UP_TO = 0.5
# The cluster's own system user, <prefix>-tpzed-000000000000000 (uuids.system_user_uuid);
# a federation may hold other clusters' system users too.
SQL_SYSTEM_USERS = "SELECT uuid FROM users WHERE uuid LIKE %(pattern)s ORDER BY uuid LIMIT 10"
# Each Locked orphan's lock_count and the token that locked it, in one statement for all of
# them: api_client_authorizations.uuid is unique (index_api_client_authorizations_on_uuid)
# and a token names its user by users.id (user_id), so the joins give one row per
# container. expires_at is UTC without zone, as Arvados writes it; a token expired at the
# database's now() authenticates nobody.
SQL_LOCK_TOKENS = """
    SELECT c.uuid, c.lock_count, a.uuid IS NOT NULL, u.uuid,
           replace(a.expires_at::text, ' ', 'T'), COALESCE(a.expires_at <= {now}, false)
    FROM containers c
    LEFT JOIN api_client_authorizations a ON a.uuid = c.locked_by_uuid
    LEFT JOIN users u ON u.id = a.user_id
    WHERE c.uuid = ANY(string_to_array(%(uuids)s, ','))
""".replace("{now}", SQL_NOW_UTC)
# A hot standby answers reads, but its rows may lag the primary's: a Slurm job whose record
# the primary already has would look missing, a record already changed would look orphaned.
SQL_IN_RECOVERY = "SELECT pg_is_in_recovery()"


class DatabaseReader:
    """The reads a reconciliation makes, each ending its transaction; counts statements."""

    def __init__(self, conn: Connection, batch_size: int, orphan_grace: float = DEFAULT_ORPHAN_GRACE) -> None:
        self.conn = conn
        self.batch_size = batch_size
        self.grace = {"grace": orphan_grace}
        self.statements = 0
        self._pipeline = pipeline_of(conn)

    def in_recovery(self) -> bool:
        """Whether the server is a standby (pg_is_in_recovery())."""
        self.statements += 1
        with self.conn.cursor() as cursor:
            cursor.execute(SQL_IN_RECOVERY)
            standby = bool(cursor.fetchone()[0])
        self.conn.commit()
        return standby

    def read_records(self, kind: str) -> Iterator[LiveRow]:
        """The live records of `kind`, rows in Record's field order as the server sends them
        (stream_live); the transaction ends with the last."""
        self.statements += 1
        yield from stream_live(self.conn, SQL_LIVE[kind], self.grace)
        self.conn.commit()

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        """Statements sent within are answered while Python works on (libpq's pipeline
        mode, libpq 14 and later; elsewhere each is answered as it is sent). The transaction
        ends with the block."""
        with self._pipeline() if self._pipeline else contextlib.nullcontext():
            yield
        self.conn.commit()

    def send_reread(
        self, kind: str, candidates: Mapping[str, Any], record_count: int
    ) -> Callable[[], Iterator[ReadAgain]]:
        """Asks for the candidates' row versions now; returns the call that waits for them
        (reconcile.unconfirmed): by UUID, (UUID, version) rows in chunks of
        REREAD_CHUNK_ROWS; or, when they are most of the live records, one scan of the
        unfinished live records as a VersionsText (a gone or finished one is then absent),
        then by UUID the few candidates whose finished_at was set (reconcile.inconsistent_of:
        the candidates are a reconcile.Candidates, or UUIDs to Records)."""
        if len(candidates) <= REREAD_BY_UUID_UP_TO * record_count:
            return self._send_chunks_by_uuid(SQL_VERSIONS_BY_UUID[kind], candidates)
        scanned = self._send_versions_text(SQL_VERSIONS_UNFINISHED[kind])
        inconsistent = inconsistent_of(candidates)
        if not inconsistent:
            return scanned
        by_uuid = self._send_chunks_by_uuid(SQL_VERSIONS_BY_UUID[kind], inconsistent)
        return lambda: itertools.chain(scanned(), by_uuid())

    def send_by_uuid(self, kind: str, uuids: Iterable[str]) -> Callable[[], Dict[str, Record]]:
        """Asks for the records of these UUIDs; returns the call that waits for those that exist."""
        chunks = self._send_chunks_by_uuid(SQL_BY_UUID[kind], uuids)
        return lambda: {row[0]: Record._make(row) for chunk in chunks() for row in chunk}

    def send_lock_holders(self) -> Callable[[], List[Dict[str, Optional[str]]]]:
        """Asks who holds the Dispatch lock; returns the call that waits for the answer."""
        rows = self._send(SQL_DISPATCH_LOCK, {"key": DISPATCH_LOCK_KEY})
        return lambda: [
            {
                "pid": pid,
                "application_name": application or None,
                "client_addr": address,
                "backend_start": started.isoformat() if started is not None else None,
            }
            for pid, application, address, started in rows()
        ]

    def _send(self, statement: str, params: Optional[Mapping[str, Any]] = None) -> Callable[[], List[tuple]]:
        """Sends one statement on a cursor of its own; returns the call that waits for its rows."""
        self.statements += 1
        cursor = self.conn.cursor()
        cursor.execute(statement, params)

        def rows() -> List[tuple]:
            with cursor:
                return cursor.fetchall()

        return rows

    def _send_chunks(
        self, statement: str, params: Optional[Mapping[str, Any]] = None
    ) -> Callable[[], Iterator[List[tuple]]]:
        """As _send, but the call yields the rows in chunks of REREAD_CHUNK_ROWS: libpq holds
        the whole result, and only a chunk of it at a time becomes Python tuples."""
        self.statements += 1
        cursor = self.conn.cursor()
        cursor.execute(statement, params)

        def chunks() -> Iterator[List[tuple]]:
            with cursor:
                chunk = cursor.fetchmany(REREAD_CHUNK_ROWS)
                while chunk:
                    yield chunk
                    chunk = cursor.fetchmany(REREAD_CHUNK_ROWS)

        return chunks

    def _send_versions_text(self, statement: str) -> Callable[[], Iterator[VersionsText]]:
        """As _send, for a statement of two aggregated texts (SQL_VERSIONS_UNFINISHED):
        the call yields them as one VersionsText, or nothing when no row was read."""
        rows = self._send(statement)

        def chunks() -> Iterator[VersionsText]:
            uuids, versions = rows()[0]
            if uuids is not None:
                yield VersionsText(uuids, versions)

        return chunks

    def _send_chunks_by_uuid(self, statement: str, uuids: Iterable[str]) -> Callable[[], Iterator[List[tuple]]]:
        """_send_chunks for these UUIDs, `batch_size` UUIDs a statement."""
        wanted = sorted(uuids)
        batches = [
            self._send_chunks(statement, dict(self.grace, uuids=",".join(wanted[start : start + self.batch_size])))
            for start in range(0, len(wanted), self.batch_size)
        ]
        return lambda: itertools.chain.from_iterable(chunks() for chunks in batches)

    def send_lock_tokens(self, uuids: Sequence[str]) -> Callable[[], Dict[str, LockToken]]:
        """Asks for the lock of each of these containers in one statement; returns the call
        that waits for them, by UUID."""
        rows = self._send(SQL_LOCK_TOKENS, {"uuids": ",".join(sorted(uuids))})
        return lambda: {row[0]: LockToken._make(row) for row in rows()}

    def cluster_prefix(self) -> str:
        self.statements += 1
        prefix = cluster_prefix_from_users(self.conn)
        self.conn.commit()
        return prefix


# PostgreSQL 11 and later compile a plan whose estimated cost passes jit_above_cost
# (100,000 by default; optimized and inlined past 500,000). SQL_LIVE's scan of the
# benchmark's 1,000,000 jobs is estimated just under it: a few more jobs and each run would
# compile, for seconds, a plan that is a scan and nothing more (bench/README.md, issue 40's
# P6, "the first read as chunks of arrays, tried and dropped").
NO_JIT_SINCE = 110000


def make_read_only(conn: Connection) -> None:
    """Read-only, timestamps as text in ISO 8601 whatever the server's DateStyle, no JIT."""
    conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    conn.execute("SET DateStyle = ISO")
    if server_version(conn) >= NO_JIT_SINCE:
        conn.execute("SET jit = off")
    conn.commit()


# Rows a chunk of the live records' stream (psycopg 3.2 with libpq 17 and later).
LIVE_CHUNK_ROWS = 2000


def read_live(conn: Connection, statement: str, params: Mapping[str, Any]) -> List[Record]:
    """The live records `statement` (one of SQL_LIVE) reads, all at once."""
    return list(map(Record._make, stream_live(conn, statement, params)))


def stream_live(conn: Connection, statement: str, params: Mapping[str, Any]) -> Iterator[LiveRow]:
    """The live records `statement` reads, in one pass of the server, yielded as they come:
    the driver's rows, in Record's field order (reconcile.LiveRow).

    Where psycopg 3 and libpq can, in chunks of LIVE_CHUNK_ROWS rows as the server finds
    them: the caller works on each chunk while the server still scans (the Python of a
    100,000-record read waited for the server most of its 0.6 s). Measured on 100,000 live
    jobs among 1,000,000: 0.57-0.60 s, against 0.62-0.72 s for the whole result at once.
    Elsewhere, whole into libpq's buffer (a few hundred bytes per live record, none per other
    row), then tuples in one fetchall, in C. Both beat a server-side cursor (twice as long:
    it plans for the first rows) and one row at a time (1.8 us a row in Python)."""
    with conn.cursor() as cursor:
        if streams_in_chunks(conn):
            yield from cursor.stream(statement, params, size=LIVE_CHUNK_ROWS)
            return
        cursor.execute(statement, params)
        yield from cursor.fetchall()


def refuse_standby(server: str) -> RecoveryError:
    return RecoveryError(
        "the database server %s is a standby (pg_is_in_recovery() is true): its rows may lag "
        "the primary's, so live work would look missing or orphaned; point the database "
        "settings at the primary, or set allow_standby: true to read the standby anyway" % server
    )


def cluster_prefix_from_users(conn: Connection) -> str:
    """The prefix of the one system user in `users`, or a ConfigError asking for it."""
    with conn.cursor() as cursor:
        cursor.execute(SQL_SYSTEM_USERS, {"pattern": "_____-%s-000000000000000" % USER_INFIX})
        prefixes = [row[0][:5] for row in cursor.fetchall() if is_valid_prefix(row[0][:5])]
    return choose_prefix(prefixes)


def choose_prefix(prefixes: Sequence[str]) -> str:
    if len(prefixes) == 1:
        return prefixes[0]
    if not prefixes:
        raise ConfigError(
            "cannot tell the cluster's prefix: the database has no system user "
            "(<prefix>-tpzed-000000000000000); set cluster_prefix"
        )
    raise ConfigError(
        "cannot tell the cluster's prefix: the database has the system users of "
        "%s (a federation?); set cluster_prefix" % ", ".join(prefixes)
    )
