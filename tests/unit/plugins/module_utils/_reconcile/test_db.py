# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The database reads of a reconciliation (DatabaseReader and the session it reads in), on
fake connections that keep the SQL and the parameters they are sent."""

from __future__ import annotations

import datetime
import re
import types
from typing import List

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database.driver import SQL_NOW_UTC
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.db import (
    DISPATCH_LOCK_KEY,
    SQL_BY_UUID,
    SQL_DISPATCH_LOCK,
    SQL_IN_RECOVERY,
    SQL_LIVE,
    SQL_LOCK_TOKENS,
    SQL_SYSTEM_USERS,
    SQL_VERSIONS_BY_UUID,
    SQL_VERSIONS_UNFINISHED,
    DatabaseReader,
    choose_prefix,
    cluster_prefix_from_users,
    make_read_only,
    read_live,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.engine import (
    CONTAINERS,
    JOBS,
    Record,
    VersionsText,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile.locked_containers import LockToken
from tests.unit.plugins.module_utils._reconcile.conftest import CTR_A, CTR_B, JOB_A, JOB_B, JOB_C, P, job


def test_the_prefix_must_be_unambiguous():
    assert choose_prefix(["zzzzz"]) == "zzzzz"
    with pytest.raises(ConfigError, match="no system user"):
        choose_prefix([])
    with pytest.raises(ConfigError, match="zzzzz, yyyyy"):
        choose_prefix(["zzzzz", "yyyyy"])


class _VersionsConnection:
    """A connection whose every statement answers (uuid, version) rows: those of `rows` the
    statement asks for (by UUID, or the unfinished ones); it keeps the SQL."""

    def __init__(self, rows):
        self.rows = rows
        self.executed = []

    def cursor(self):
        return _VersionsCursor(self)

    def commit(self):
        pass


class _VersionsCursor:
    def __init__(self, conn):
        self.conn = conn
        self.answer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, statement, params=None):
        self.conn.executed.append(statement)
        if params is not None and "uuids" in params:
            wanted = params["uuids"].split(",")
            found = [row for row in self.conn.rows.values() if row.uuid in wanted]
        else:
            found = [row for row in self.conn.rows.values() if not row.finished]
        self.answer = [(row.uuid, row.version) for row in found]
        if statement.startswith("SELECT string_agg("):
            # One row of two texts, NULLs when no row is found, as string_agg answers.
            texts = [",".join(column) for column in zip(*self.answer)] or [None, None]
            self.answer = [tuple(texts)]

    def fetchall(self):
        return self.answer

    def fetchmany(self, size):
        chunk, self.answer = self.answer[:size], self.answer[size:]
        return chunk


def _reader(rows):
    conn = _VersionsConnection(rows)
    return DatabaseReader(conn=conn, batch_size=10), conn


def _reread(reader, candidates, record_count):
    with reader.pipeline():
        chunks = list(reader.send_reread(JOBS, candidates, record_count)())
    return {uuid: version for chunk in chunks for pairs in _pairs(chunk) for uuid, version in pairs}


def _pairs(chunk):
    return chunk.pair_chunks() if isinstance(chunk, VersionsText) else [chunk]


def test_the_scan_s_rows_come_as_two_texts_in_its_order():
    rows = {uuid: job(uuid)._replace(version=str(n)) for n, uuid in enumerate((JOB_C, JOB_A, JOB_B))}
    reader, _conn = _reader(rows)
    with reader.pipeline():
        (chunk,) = reader.send_reread(JOBS, dict(rows), record_count=3)()
    assert (chunk.uuids, chunk.versions) == (",".join((JOB_C, JOB_A, JOB_B)), "0,1,2")


def test_a_scan_that_finds_no_row_gives_no_chunk():
    rows = {JOB_A: job(JOB_A)._replace(finished=True, version="1")}
    reader, conn = _reader({})
    with reader.pipeline():
        assert list(reader.send_reread(JOBS, {JOB_A: rows[JOB_A], JOB_B: job(JOB_B)}, record_count=2)()) == []
    assert conn.executed == [SQL_VERSIONS_UNFINISHED[JOBS], SQL_VERSIONS_BY_UUID[JOBS]]


def test_candidates_are_reread_by_uuid_while_few_else_by_a_second_scan():
    rows = {uuid: job(uuid)._replace(version=str(n)) for n, uuid in enumerate((JOB_C, JOB_A, JOB_B))}
    reader, conn = _reader(rows)
    assert _reread(reader, {JOB_A: rows[JOB_A]}, record_count=3) == {JOB_A: "1"}
    versions = _reread(reader, {JOB_B: rows[JOB_B], JOB_A: rows[JOB_A]}, record_count=3)
    assert versions == {JOB_A: "1", JOB_B: "2", JOB_C: "0"}
    assert conn.executed == [SQL_VERSIONS_BY_UUID[JOBS], SQL_VERSIONS_UNFINISHED[JOBS]]
    assert reader.statements == 2


def test_a_live_candidate_with_finished_at_is_reread_by_uuid_beside_the_scan():
    # The scan of unfinished rows (an index scan for jobs) cannot see an inconsistent row.
    rows = {
        JOB_A: job(JOB_A)._replace(version="7"),
        JOB_B: job(JOB_B)._replace(finished=True, version="8"),
        JOB_C: job(JOB_C)._replace(version="9"),
    }
    reader, conn = _reader(rows)
    versions = _reread(reader, dict(rows), record_count=3)
    assert versions == {JOB_A: "7", JOB_B: "8", JOB_C: "9"}
    assert conn.executed == [SQL_VERSIONS_UNFINISHED[JOBS], SQL_VERSIONS_BY_UUID[JOBS]]


def test_every_read_of_a_record_carries_its_row_version_last():
    for statement in list(SQL_LIVE.values()) + list(SQL_BY_UUID.values()):
        # Commas inside a call's parentheses part no columns.
        columns = re.split(r",\s*(?![^()]*\))", statement.split(" FROM ")[0])
        assert len(columns) == len(Record._fields)
        assert columns[-1] == "xmin::text"


class _ParamsConnection(_VersionsConnection):
    """Keeps the parameters of every statement too; answers pg_is_in_recovery() with `standby`."""

    def __init__(self, rows, standby=False):
        super().__init__(rows)
        self.params = []
        self.standby = standby

    def cursor(self):
        conn = self

        class Cursor(_VersionsCursor):
            def execute(self, statement, params=None):
                conn.params.append(params)
                if statement.startswith("SELECT pg_is_in_recovery"):
                    conn.executed.append(statement)
                    self.answer = [(conn.standby,)]
                    return
                super().execute(statement, params)

            def fetchone(self):
                return self.answer[0]

        return Cursor(self)


def test_the_grace_is_a_bound_parameter_compared_with_the_database_s_utc_clock():
    for statement in (SQL_LIVE[CONTAINERS], SQL_BY_UUID[CONTAINERS]):
        assert "modified_at > %s - %%(grace)s * interval '1 second'" % SQL_NOW_UTC in statement
    # Jobs have no grace; every record's age is by the same clock.
    for statement in (SQL_LIVE[JOBS], SQL_BY_UUID[JOBS]):
        assert "grace" not in statement and ", false, " in statement
    for statement in list(SQL_LIVE.values()) + list(SQL_BY_UUID.values()):
        assert "extract(epoch from %s - modified_at)::float8" % SQL_NOW_UTC in statement
    conn = _ParamsConnection({})
    assert read_live(conn, SQL_LIVE[JOBS], {"grace": 12.5}) == []
    assert conn.params == [{"grace": 12.5}]
    reader = DatabaseReader(conn, batch_size=10, orphan_grace=7.0)
    with reader.pipeline():
        reader.send_by_uuid(JOBS, [JOB_A])()
    assert conn.params[-1] == {"grace": 7.0, "uuids": JOB_A}


def test_the_reader_asks_whether_the_server_is_a_standby():
    for standby in (True, False):
        conn = _ParamsConnection({}, standby=standby)
        reader = DatabaseReader(conn, batch_size=10)
        assert reader.in_recovery() is standby
        assert conn.executed == [SQL_IN_RECOVERY] and reader.statements == 1


def test_the_read_only_session_has_no_jit_where_the_server_has_one():
    for version, jit in ((110000, ["SET jit = off"]), (100023, []), (None, [])):
        statements: List[str] = []
        conn = types.SimpleNamespace(
            info=types.SimpleNamespace(server_version=version), execute=statements.append, commit=lambda: None
        )
        make_read_only(conn)
        assert statements == ["SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", "SET DateStyle = ISO"] + jit


class _AnswersConnection:
    """A connection whose cursors answer each statement with the rows `answers` gives it;
    it keeps the (statement, parameters) sent and counts the transactions ended."""

    def __init__(self, answers):
        self.answers = answers
        self.sent = []
        self.commits = 0

    def cursor(self):
        conn = self

        class Cursor:
            rows: List[tuple] = []

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def execute(self, statement, params=None):
                conn.sent.append((statement, params))
                self.rows = list(conn.answers[statement])

            def fetchall(self):
                return self.rows

        return Cursor()

    def commit(self):
        self.commits += 1


def test_the_lock_holders_come_as_the_report_names_them():
    started = datetime.datetime(2026, 12, 5, 9, 0, tzinfo=datetime.timezone.utc)
    conn = _AnswersConnection(
        {SQL_DISPATCH_LOCK: [(41, "", "10.0.0.5/32", started), (42, "crunch-dispatch-slurm", None, None)]}
    )
    reader = DatabaseReader(conn, batch_size=10)
    holders = reader.send_lock_holders()()
    assert conn.sent == [(SQL_DISPATCH_LOCK, {"key": DISPATCH_LOCK_KEY})] and reader.statements == 1
    assert holders == [
        # libpq's empty application_name is none given.
        {"pid": 41, "application_name": None, "client_addr": "10.0.0.5/32", "backend_start": started.isoformat()},
        {"pid": 42, "application_name": "crunch-dispatch-slurm", "client_addr": None, "backend_start": None},
    ]


def test_the_locks_of_many_containers_are_read_in_one_statement_by_uuid():
    theirs = LockToken(CTR_B, 3, True, P + "-tpzed-a", "2026-11-01T00:00:00", True)
    conn = _AnswersConnection({SQL_LOCK_TOKENS: [tuple(theirs), (CTR_A, 1, False, None, None, False)]})
    reader = DatabaseReader(conn, batch_size=1)
    tokens = reader.send_lock_tokens([CTR_B, CTR_A])()
    # One statement whatever batch_size says, its UUIDs sorted into one bound text.
    assert conn.sent == [(SQL_LOCK_TOKENS, {"uuids": "%s,%s" % (CTR_A, CTR_B)})] and reader.statements == 1
    assert tokens == {CTR_A: LockToken(CTR_A, 1, False, None, None, False), CTR_B: theirs}


def test_the_cluster_prefix_is_the_one_valid_system_user_s():
    system = P + "-tpzed-000000000000000"
    conn = _AnswersConnection({SQL_SYSTEM_USERS: [(system,), ("ZZ-!!-tpzed-000000000000000",)]})
    reader = DatabaseReader(conn, batch_size=10)
    assert reader.cluster_prefix() == P
    assert conn.sent == [(SQL_SYSTEM_USERS, {"pattern": "_____-tpzed-000000000000000"})]
    assert (reader.statements, conn.commits) == (1, 1)
    federation = _AnswersConnection({SQL_SYSTEM_USERS: [(system,), ("yyyyy-tpzed-000000000000000",)]})
    with pytest.raises(ConfigError, match="system users of zzzzz, yyyyy"):
        cluster_prefix_from_users(federation)


def test_the_live_records_are_streamed_and_their_transaction_ends_with_the_last():
    rows = [tuple(job(uuid)) for uuid in (JOB_A, JOB_B)]
    conn = _AnswersConnection({SQL_LIVE[JOBS]: rows})
    reader = DatabaseReader(conn, batch_size=10, orphan_grace=5.0)
    records = reader.read_records(JOBS)
    assert next(records) == rows[0] and conn.commits == 0
    assert list(records) == rows[1:] and conn.commits == 1
    assert conn.sent == [(SQL_LIVE[JOBS], {"grace": 5.0})] and reader.statements == 1
