"""_database.driver on the lab's PostgreSQL: the same statement through psycopg 3 and through
psycopg2 gives the same Python values, the same SQLSTATE and the same error text, and both
offer what the engines use (a cursor WITH HOLD in autocommit, a dead session noticed).

Both drivers are installed in the project's virtualenv (psycopg2 by scripts/install-deps.sh,
at the oldest version a supported platform packages); this file compares them side by side
whichever ARVADOS_RECOVERY_PG_DRIVER says.
"""

from __future__ import annotations

import datetime
import json

import psycopg
import pytest
from psycopg import sql

from ansible_collections.arvados_ops.recovery.plugins.module_utils._database import connect as database_connect
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database import driver as database_driver
from ansible_collections.arvados_ops.recovery.plugins.module_utils._database.driver import connection_lost

NAMES = ("psycopg", "psycopg2")


def driver_named(name):
    return database_driver.load_driver({database_driver.DRIVER_ENV: name})


@pytest.fixture
def both(fresh_db):
    """{driver name: open connection (autocommit off)} on the test's database."""
    opened = {name: driver_named(name).connect(**fresh_db.connection) for name in NAMES}
    yield opened
    for conn in opened.values():
        if not conn.closed:
            conn.close()


def each(both, query, params=None):
    """{driver name: rows} of one statement through each driver."""
    rows = {}
    for name, conn in both.items():
        rows[name] = conn.execute(query, params).fetchall()
        conn.rollback()
    return rows


def same(rows):
    first, second = rows.values()
    assert first == second, rows
    return first


def test_the_drivers_are_the_ones_named():
    assert isinstance(driver_named("psycopg"), database_driver.Psycopg3Driver)
    driver = driver_named("psycopg2")
    assert isinstance(driver, database_driver.Psycopg2Driver)
    assert driver.module.__name__ == "psycopg2"


def test_lists_bind_as_arrays_the_empty_one_too(both):
    when = datetime.datetime(2026, 12, 3, 11, 0, 0, 123456)
    params = {
        "texts": ["zzzzz-8i9sb-000000000000001", "it's", None],
        "empty": [],
        "ids": [1, 2**40],
        "times": [when, None],
        "none": None,
    }
    rows = same(
        each(
            both,
            "SELECT %(texts)s::text[], %(empty)s::text[], cardinality(%(empty)s::bigint[]), %(ids)s::bigint[], "
            "%(times)s::timestamp[], %(none)s::text[] IS NULL, 'x' = ANY(%(empty)s::text[])",
            params,
        )
    )
    assert rows == [(params["texts"], [], 0, params["ids"], [when, None], True, False)]


def test_unnest_of_parallel_lists_as_the_engines_write_rows(both):
    params = {"ids": [3, 4], "users": ["a", None], "made": [datetime.datetime(2020, 1, 2, 3, 4, 5), None]}
    rows = same(
        each(
            both, "SELECT * FROM unnest(%(ids)s::bigint[], %(users)s::text[], %(made)s::timestamp[]) ORDER BY 1", params
        )
    )
    assert rows == list(zip(params["ids"], params["users"], params["made"], strict=True))


def test_timestamps_with_a_time_zone_read_alike(both):
    for conn in both.values():
        conn.execute("SET TimeZone = 'Europe/Paris'")
        conn.commit()
    aware = datetime.datetime(2026, 7, 1, 9, 30, tzinfo=datetime.UTC)
    rows = each(
        both,
        "SELECT '2026-12-03 11:00:00.5+00'::timestamptz, %(aware)s::timestamptz, %(aware)s::timestamptz::text, "
        "'2026-12-03 11:00:00'::timestamp",
        {"aware": aware},
    )
    for row in rows.values():
        assert row[0][0] == datetime.datetime(2026, 12, 3, 11, 0, 0, 500000, tzinfo=datetime.UTC)
        assert row[0][1] == aware
    # The same instant, the same offset (the session's zone), the same text.
    assert same({name: [value.isoformat() for value in row[0][:2]] for name, row in rows.items()}) == [
        "2026-12-03T12:00:00.500000+01:00",
        "2026-07-01T11:30:00+02:00",
    ]
    assert same({name: row[0][2:] for name, row in rows.items()}) == (
        "2026-07-01 11:30:00+02",
        datetime.datetime(2026, 12, 3, 11, 0),
    )


def test_jsonb_reads_as_python_values(both):
    document = {"text": "ended by arvados_fail_jobs", "old": {"state": "Running", "n": [1, None, 2.5]}}
    rows = same(each(both, "SELECT %(doc)s::jsonb, to_jsonb(%(doc)s::jsonb -> 'old')", {"doc": json.dumps(document)}))
    assert rows == [(document, document["old"])]


def test_a_database_with_another_datestyle_reads_iso(fresh_db, lab):
    with psycopg.connect(**lab.superuser_connection("postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} SET DateStyle = 'SQL, DMY'").format(sql.Identifier(fresh_db.name)))
    rows = {}
    for name in NAMES:
        conn = driver_named(name).connect(**fresh_db.connection)
        try:
            rows[name] = conn.execute("SELECT '2026-12-03 11:00:00'::timestamp, '2026-12-03'::date::text").fetchone()
        finally:
            conn.close()
    # Without DateStyle ISO the text would be 03/12/2026.
    assert same(rows) == (datetime.datetime(2026, 12, 3, 11, 0), "2026-12-03")


def test_errors_have_the_same_sqlstate_and_text(both):
    said = {}
    for name, conn in both.items():
        with pytest.raises(driver_named(name).Error) as raised:
            conn.execute("SELECT uuid FROM no_such_table WHERE uuid = %(uuid)s", {"uuid": "x"})
        conn.rollback()
        said[name] = (database_driver.sqlstate_of(raised.value), database_driver.error_text(raised.value))
    assert same(said) == ("42P01", 'relation "no_such_table" does not exist')


def test_a_cursor_with_hold_pages_through_in_autocommit(both):
    pages = {}
    for name, conn in both.items():
        conn.autocommit = True
        cursor = conn.cursor(name="listing", withhold=True)
        cursor.execute("SELECT n FROM generate_series(1, %(last)s) AS n ORDER BY n", {"last": 5})
        pages[name] = [cursor.fetchmany(2), cursor.fetchmany(2), cursor.fetchmany(2), cursor.fetchmany(2)]
        cursor.close()
        conn.autocommit = False
    assert same(pages) == [[(1,), (2,)], [(3,), (4,)], [(5,)], []]


def test_a_session_the_server_ended_is_noticed(both, fresh_db):
    for name, conn in both.items():
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.commit()
        with fresh_db.connect(superuser=True, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        assert not connection_lost(conn), name
        with pytest.raises(driver_named(name).OperationalError):
            conn.execute("SELECT 1")
        assert connection_lost(conn), name


def test_the_server_and_its_database_as_the_engines_report_them(both, fresh_db):
    infos = {name: (conn.info.host, conn.info.port, conn.info.dbname) for name, conn in both.items()}
    assert same(infos) == (fresh_db.connection["host"], int(fresh_db.connection["port"]), fresh_db.name)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"port": 1}, id="nothing-listens"),
        pytest.param({"host": "localhost", "port": 1}, id="a-host-name"),
        pytest.param({"host": "no-such-host.invalid"}, id="an-unknown-host"),
        pytest.param({"password": "wrong-pw"}, id="a-wrong-password"),
        pytest.param({"dbname": "no_such_database"}, id="no-such-database"),
    ],
)
def test_a_failed_connection_reads_the_same(fresh_db, change):
    kwargs = dict(fresh_db.connection, connect_timeout=5, **change)
    said = {}
    for name in NAMES:
        with pytest.raises(database_connect.DatabaseUnavailable) as raised:
            database_connect.connect(kwargs, wait=0, driver=driver_named(name))
        said[name] = str(raised.value)
    message = same(said)
    assert "wrong-pw" not in message
    assert message.startswith("cannot connect to the database %r" % kwargs["dbname"])
