# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""_database/driver.py: psycopg 3 preferred, psycopg2 otherwise or when forced, one interface over
both, and the same connection-failure text whichever answered."""

from __future__ import annotations

import types
from datetime import datetime, timezone

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database import driver as database_driver

ENV = database_driver.DRIVER_ENV


class FakeError(Exception):
    pass


class FakeOperationalError(FakeError):
    pass


def fake_module(name, version, connect=None):
    module = types.ModuleType(name)
    module.__version__ = version
    module.Error = FakeError
    module.OperationalError = FakeOperationalError
    module.connect = connect
    return module


def importer_of(*present):
    modules = {module.__name__: module for module in present}

    def importer(name):
        if name not in modules:
            raise ImportError("No module named %r" % name)
        return modules[name]

    return importer


PSYCOPG3 = fake_module("psycopg", "3.1.7")
PSYCOPG2 = fake_module("psycopg2", "2.8.6 (dt dec pq3 ext lo64)")


# -- which driver --------------------------------------------------------------------------


def test_psycopg3_is_preferred_when_both_are_there():
    driver = database_driver.load_driver({}, importer_of(PSYCOPG3, PSYCOPG2))
    assert isinstance(driver, database_driver.Psycopg3Driver)
    assert driver.describe() == "psycopg 3.1.7"


def test_psycopg2_is_taken_when_psycopg3_is_not_there():
    driver = database_driver.load_driver({}, importer_of(PSYCOPG2))
    assert isinstance(driver, database_driver.Psycopg2Driver)
    assert driver.describe() == "psycopg2 2.8.6"
    assert driver.Error is FakeError and driver.OperationalError is FakeOperationalError


def test_the_environment_forces_one_driver():
    both = importer_of(PSYCOPG3, PSYCOPG2)
    assert isinstance(database_driver.load_driver({ENV: "psycopg2"}, both), database_driver.Psycopg2Driver)
    assert isinstance(database_driver.load_driver({ENV: "psycopg"}, both), database_driver.Psycopg3Driver)
    assert isinstance(database_driver.load_driver({ENV: " "}, both), database_driver.Psycopg3Driver)


def test_a_forced_driver_is_not_replaced_by_the_other():
    with pytest.raises(RecoveryError) as raised:
        database_driver.load_driver({ENV: "psycopg2"}, importer_of(PSYCOPG3))
    assert str(raised.value).startswith("the Python package psycopg2 is needed to reach PostgreSQL: ")


def test_without_either_the_message_names_both_packages():
    with pytest.raises(RecoveryError) as raised:
        database_driver.load_driver({}, importer_of())
    assert str(raised.value) == (
        "the Python package psycopg (version 3) or psycopg2 is needed to reach PostgreSQL: "
        "install python3-psycopg or python3-psycopg2 (Debian/Ubuntu; python3-psycopg3 or "
        'python3-psycopg2 on EL), or "pip install psycopg[binary]" or "pip install psycopg2"'
    )


def test_an_unknown_driver_name_is_refused():
    with pytest.raises(RecoveryError, match="ARVADOS_RECOVERY_PG_DRIVER must be psycopg or psycopg2, got 'psycopg3'"):
        database_driver.load_driver({ENV: "psycopg3"}, importer_of(PSYCOPG3))
    # The module's check leaves that message to the engine rather than say "missing".
    assert database_driver.driver_import_error({ENV: "psycopg3"}) is None


# -- what the engines read of errors -----------------------------------------------------------


def test_sqlstate_of_either_drivers_errors():
    psycopg3_error = FakeError("lock timeout")
    psycopg3_error.sqlstate = "55P03"
    psycopg2_error = FakeError("lock timeout")
    psycopg2_error.pgcode = "55P03"
    assert database_driver.sqlstate_of(psycopg3_error) == "55P03"
    assert database_driver.sqlstate_of(psycopg2_error) == "55P03"
    assert database_driver.sqlstate_of(ValueError("x")) is None


LIBPQ_REFUSED = (
    'connection to server at "127.0.0.1", port 5 failed: Connection refused '
    "Is the server running on that host and accepting TCP/IP connections?"
)


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        # psycopg2 hands libpq's message over as it is, newline and tab included.
        (
            'connection to server at "127.0.0.1", port 5 failed: Connection refused\n'
            "\tIs the server running on that host and accepting TCP/IP connections?\n",
            LIBPQ_REFUSED,
        ),
        # psycopg 3 puts its own words first.
        (
            'connection failed: connection to server at "127.0.0.1", port 5 failed: Connection refused\n'
            "\tIs the server running on that host and accepting TCP/IP connections?",
            LIBPQ_REFUSED,
        ),
        (
            'connection is bad: connection to server on socket "/run/x/.s.PGSQL.5" failed: No such file',
            'connection to server on socket "/run/x/.s.PGSQL.5" failed: No such file',
        ),
        # libpq names the host and the address it resolved to; psycopg 3 resolves first.
        (
            'connection to server at "localhost" (127.0.0.1), port 5 failed: Connection refused\n'
            "\tIs the server running on that host and accepting TCP/IP connections?\n",
            LIBPQ_REFUSED,
        ),
        (
            "failed to resolve host 'db.invalid': [Errno -2] Name or service not known",
            'could not translate host name "db.invalid" to address: Name or service not known',
        ),
        (
            'could not translate host name "db.invalid" to address: Name or service not known\n',
            'could not translate host name "db.invalid" to address: Name or service not known',
        ),
    ],
)
def test_connection_failures_read_the_same_with_either_driver(raised, said):
    assert database_driver.connection_error_text(FakeOperationalError(raised)) == said


# -- psycopg 3: handed over as it is, DateStyle ISO -------------------------------------------------


class FakePsycopg3Connection:
    def __init__(self, datestyle):
        self.info = types.SimpleNamespace(parameter_status={"DateStyle": datestyle}.get)
        self.executed = []
        self.commits = 0

    def execute(self, query, params=None):
        self.executed.append(query)

    def commit(self):
        self.commits += 1


@pytest.mark.parametrize(("datestyle", "executed"), [("ISO, MDY", []), ("SQL, DMY", ["SET DateStyle = ISO"])])
def test_psycopg3_sessions_read_timestamps_in_iso(datestyle, executed):
    conn = FakePsycopg3Connection(datestyle)
    driver = database_driver.Psycopg3Driver(fake_module("psycopg", "3.3.9", connect=lambda **kwargs: conn))
    assert driver.connect(host="h") is conn
    assert conn.executed == executed
    assert conn.commits == len(executed)


# -- psycopg2: wrapped to offer what the engines use --------------------------------------------------


class FakeCursor:
    def __init__(self, name=None, withhold=False):
        self.name = name
        self.withhold = withhold
        self.executed = []

    def execute(self, query, params=None):
        self.executed.append((query, params))

    def fetchone(self):
        return (1,)


class FakePsycopg2Connection:
    def __init__(self):
        self.closed = 0
        self.autocommit = False
        self.cursors = []
        self.calls = []

    def cursor(self, name=None, withhold=False):
        cursor = FakeCursor(name, withhold)
        self.cursors.append(cursor)
        return cursor

    def commit(self):
        self.calls.append("commit")

    def rollback(self):
        self.calls.append("rollback")

    def close(self):
        self.calls.append("close")
        self.closed = 1

    def get_dsn_parameters(self):
        return {"host": "/run/postgresql", "port": "5432", "dbname": "arvados_production", "user": "arvados"}


def wrapped():
    raw = FakePsycopg2Connection()
    driver = database_driver.Psycopg2Driver(
        fake_module("psycopg2", "2.7.5 (dt dec pq3 ext lo64)", lambda **kwargs: raw)
    )
    return driver.connect(host="h"), raw


def test_execute_runs_on_a_new_cursor_and_returns_it():
    conn, raw = wrapped()
    cursor = conn.execute("SELECT pg_try_advisory_lock(%s)", (1,))
    assert cursor.fetchone() == (1,)
    # No parameters stays None: psycopg2 then leaves a % in the SQL alone, as psycopg 3 does.
    conn.execute("SELECT 'a%'")
    assert [c.executed for c in raw.cursors] == [[("SELECT pg_try_advisory_lock(%s)", (1,))], [("SELECT 'a%'", None)]]


def test_binary_placeholders_reach_psycopg2_as_its_own():
    conn, raw = wrapped()
    conn.execute("SELECT %(texts)b, %(uuids)s::text[]", {"texts": ['a"b'], "uuids": []})
    # psycopg2 has no binary parameters: it reads %(name)b as %(name)s
    assert raw.cursors[0].executed == [("SELECT %(texts)s, %(uuids)s::text[]", {"texts": ['a"b'], "uuids": []})]
    # an escaped % stays one, whatever follows it
    query, params = database_driver.psycopg2_query("%(a)b, %(_b1)b, %%(c)b, %%%(d)b", {"a": 1})
    assert (query, params) == ("%(a)s, %(_b1)s, %%(c)b, %%%(d)s", {"a": 1})


def test_binary_array_lists_reach_psycopg2_as_one_joined_text():
    conn, raw = wrapped()
    made = datetime(2026, 12, 5, 8, 0, 0, 123456)
    params = {"texts": ['{"a": "b"}', None, ""], "made": [made, None], "none": [], "uuids": ["x"]}
    conn.execute("SELECT %(texts)b::text[], %(made)b::timestamp[], %(none)b::text[], %(uuids)s::text[]", params)
    split = "string_to_array(%({})s, chr(31), chr(30))::{}[]"
    assert raw.cursors[0].executed == [
        (
            "SELECT %s, %s, %s, %%(uuids)s::text[]"
            % (split.format("texts", "text"), split.format("made", "timestamp"), split.format("none", "text")),
            {
                "texts": '{"a": "b"}\x1f\x1e\x1f',
                "made": "2026-12-05T08:00:00.123456\x1f\x1e",
                "none": "",
                "uuids": ["x"],
            },
        )
    ]
    # the caller's parameters are its own
    assert params["texts"] == ['{"a": "b"}', None, ""]


@pytest.mark.parametrize(
    "value",
    [
        ["a\x1fb"],  # the separator inside an element
        ["\x1e"],  # an element that is the NULL mark
        [""],  # one empty text: joined, it would read back as no element
        [datetime(2026, 12, 5, tzinfo=timezone.utc)],  # psycopg2's cast would move it to the session's zone
        [1],
        "not a list",
    ],
)
def test_a_list_the_joined_text_would_change_goes_as_psycopg2_adapts_it(value):
    query, params = database_driver.psycopg2_query("SELECT %(v)b::text[]", {"v": value})
    assert (query, params) == ("SELECT %(v)s::text[]", {"v": value})


def test_named_cursors_keep_their_name_and_hold():
    conn, raw = wrapped()
    listing = conn.cursor(name="listing", withhold=True)
    assert (listing.name, listing.withhold) == ("listing", True)
    plain = conn.cursor()
    assert (plain.name, plain.withhold) == (None, False)
    assert raw.cursors == [listing, plain]


def test_transactions_and_autocommit_go_to_the_psycopg2_connection():
    conn, raw = wrapped()
    conn.autocommit = True
    assert raw.autocommit is True and conn.autocommit is True
    conn.commit()
    conn.rollback()
    conn.close()
    assert raw.calls == ["commit", "rollback", "close"]


@pytest.mark.parametrize(("raw_closed", "closed", "broken"), [(0, False, False), (1, True, False), (2, True, True)])
def test_closed_and_broken_as_psycopg3_says_them(raw_closed, closed, broken):
    conn, raw = wrapped()
    raw.closed = raw_closed
    assert (conn.closed, conn.broken) == (closed, broken)


def test_prepare_threshold_can_be_set_and_changes_nothing():
    conn, raw = wrapped()
    conn.prepare_threshold = None
    assert conn.prepare_threshold is None
    assert raw.cursors == []


def test_info_from_libpq_or_the_connection_parameters():
    conn, raw = wrapped()
    info = conn.info
    assert (info.host, info.port, info.dbname) == ("/run/postgresql", 5432, "arvados_production")
    raw.info = types.SimpleNamespace(host="db", port=5433, dbname="x")
    assert conn.info is raw.info


def test_no_speed_paths_on_psycopg2():
    conn, raw = wrapped()
    assert database_driver.pipeline_of(conn) is None
    assert database_driver.streams_in_chunks(conn) is False


def test_the_server_version_is_libpq_s_number_or_0_when_unknown():
    conn, raw = wrapped()
    raw.info = types.SimpleNamespace(host="db", port=5433, dbname="x", server_version=150004)
    assert database_driver.server_version(conn) == 150004
    # psycopg2 before 2.8 (no info: the parameters' ConnectionInfo), or a fake: no version.
    del raw.info
    assert database_driver.server_version(conn) == 0
    assert database_driver.server_version(object()) == 0


def diagnosed(text, **diag):
    error = FakeError(text)
    fields = dict.fromkeys(("message_primary", "message_detail", "message_hint", "context"))
    fields.update(diag)
    error.diag = types.SimpleNamespace(**fields)
    return error


def test_a_server_error_reads_without_the_statement_either_driver_quotes():
    # psycopg 3 quotes the statement with $1, psycopg2 with the value bound into it.
    psycopg3 = diagnosed(
        'duplicate key value violates unique constraint "logs_pkey"\nDETAIL:  Key (id)=(1) already exists.\n'
        "LINE 1: INSERT INTO logs VALUES ($1)",
        message_primary='duplicate key value violates unique constraint "logs_pkey"',
        message_detail="Key (id)=(1) already exists.",
    )
    psycopg2 = diagnosed(
        str(psycopg3).replace("$1", "1"),
        message_primary='duplicate key value violates unique constraint "logs_pkey"',
        message_detail="Key (id)=(1) already exists.",
    )
    said = 'duplicate key value violates unique constraint "logs_pkey" DETAIL: Key (id)=(1) already exists.'
    assert database_driver.error_text(psycopg3) == database_driver.error_text(psycopg2) == said


def test_hint_and_context_follow_in_libpq_order():
    error = diagnosed(
        "x", message_primary="boom", message_hint="try again", context="PL/pgSQL function f()\nline 3 at RAISE"
    )
    assert database_driver.error_text(error) == "boom HINT: try again CONTEXT: PL/pgSQL function f() line 3 at RAISE"


def test_a_lost_connection_reads_in_libpqs_words():
    lost = "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n"
    assert (
        database_driver.error_text(diagnosed("consuming input failed: " + lost))
        == (database_driver.error_text(FakeError(lost)))
        == "server closed the connection unexpectedly This probably means the server terminated abnormally"
    )
