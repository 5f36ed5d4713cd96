# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""_database/connect.py: connecting with retries until the deadline, permanent errors at once,
the password masked."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._database import connect as database_connect
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock

JOB = "zzzzz-8i9sb-%015d"
NO_FILES = {"config_file": "", "database_yml": "", "db_name": "arvados_test", "cancel_slurm_jobs": False}


# -- connecting ---------------------------------------------------------------------------


class FakeOperationalError(Exception):
    def __init__(self, text, sqlstate=None):
        super().__init__(text)
        self.sqlstate = sqlstate


class FakePsycopg:
    OperationalError = FakeOperationalError

    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def connect(self, **kwargs):
        self.calls.append(kwargs)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


KWARGS = {
    "host": "db.example",
    "port": 5432,
    "dbname": "arvados_production",
    "user": "arvados",
    "password": "s3cr3t-pw",
}
# libpq's words, which psycopg2 gives as they are and psycopg 3 after "connection failed: ".
LIBPQ_REFUSED = 'connection to server at "db.example", port 5432 failed: Connection refused'
REFUSED = "connection failed: " + LIBPQ_REFUSED


def test_transient_errors_are_retried_until_the_database_answers():
    clock = FakeClock()
    fake = FakePsycopg([FakeOperationalError(REFUSED), FakeOperationalError(REFUSED), "conn"])
    assert database_connect.connect(KWARGS, wait=30, driver=fake, sleep=clock.sleep, clock=clock) == "conn"
    assert clock.sleeps == [0.5, 1.0]
    assert fake.calls == [KWARGS] * 3


def test_retries_stop_at_the_deadline_and_say_how_many_attempts():
    clock = FakeClock()
    fake = FakePsycopg([FakeOperationalError(REFUSED)] * 10)
    with pytest.raises(database_connect.DatabaseUnavailable) as raised:
        database_connect.connect(KWARGS, wait=4, driver=fake, sleep=clock.sleep, clock=clock)
    # 0.5 + 1 + 2 = 3.5 s slept; the next pause (4 s) would pass the deadline
    assert clock.sleeps == [0.5, 1.0, 2.0]
    assert str(raised.value) == (
        "cannot connect to the database 'arvados_production' as 'arvados' on db.example:5432 "
        "after 4 attempt(s): " + LIBPQ_REFUSED
    )


@pytest.mark.parametrize(
    "error",
    [
        FakeOperationalError('FATAL: password authentication failed for user "arvados"', sqlstate="28P01"),
        FakeOperationalError('connection failed: FATAL: password authentication failed for user "arvados"'),
        FakeOperationalError('FATAL: database "arvados_production" does not exist', sqlstate="3D000"),
        FakeOperationalError('FATAL: no pg_hba.conf entry for host "10.0.0.1"'),
        FakeOperationalError("SSL error: certificate verify failed"),
        FakeOperationalError('server certificate for "db.example" does not match host name "10.0.0.1"'),
    ],
)
def test_permanent_errors_fail_at_once(error):
    clock = FakeClock()
    fake = FakePsycopg([error, "conn"])
    with pytest.raises(database_connect.DatabaseUnavailable, match="after 1 attempt"):
        database_connect.connect(KWARGS, wait=60, driver=fake, sleep=clock.sleep, clock=clock)
    assert clock.sleeps == []


def test_the_password_is_masked_in_connection_errors():
    clock = FakeClock()
    leaky = FakeOperationalError('invalid dsn: password=s3cr3t-pw host=db.example\n  missing "=" after s3cr3t-pw')
    fake = FakePsycopg([leaky])
    with pytest.raises(database_connect.DatabaseUnavailable) as raised:
        database_connect.connect(KWARGS, wait=0, driver=fake, sleep=clock.sleep, clock=clock)
    message = str(raised.value)
    assert "s3cr3t-pw" not in message
    assert 'password=******** host=db.example missing "=" after ********' in message
    assert "\n" not in message


def test_is_permanent_and_describe_target():
    assert database_connect.is_permanent(FakeOperationalError("x", sqlstate="28000"))
    assert not database_connect.is_permanent(FakeOperationalError(REFUSED))
    assert not database_connect.is_permanent(FakeOperationalError("x", sqlstate="57P03"))
    assert database_connect.describe_target({"dbname": "d", "user": "u"}) == "database 'd' as 'u' on the local socket"
    # Issue 42 item 6: no user given read "as None".
    assert (
        database_connect.describe_target({"dbname": "d"}, environ={"PGUSER": "arvados"})
        == "database 'd' as 'arvados' (no user given: libpq's PGUSER) on the local socket"
    )
    login = database_connect.describe_user({}, environ={})
    assert login.endswith("(no user given: libpq's default, the login name)") and "None" not in login
    assert database_connect.redact("a pw b pw", "pw") == "a ******** b ********"
    assert database_connect.redact("text", None) == "text"
