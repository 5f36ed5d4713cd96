# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Opening the Arvados database (psycopg 3 or psycopg2, see _database.driver), patiently enough
for a boot.

At boot the recovery unit may start while PostgreSQL is still coming up, so a refused or
timed-out connection is tried again until `wait` seconds have passed. A wrong password or
a missing database will not fix itself: those fail at once.
"""

from __future__ import annotations

import getpass
import os
import time
from typing import Any, Callable, Mapping, Optional

from .._common.errors import RecoveryError, cut
from .driver import Connection, Driver, connection_error_text, load_driver, sqlstate_of

# SQLSTATE classes that say "the server answered and refused": retrying cannot help.
# (28: authorization, 3D: no such database). Failures before the server answers carry no
# SQLSTATE, so the wording of libpq's messages for the same cases is checked too.
_PERMANENT_SQLSTATE_CLASSES = ("28", "3D")
_PERMANENT_MESSAGES = (
    "password authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
    # TLS with sslmode verify-ca or verify-full: the server's certificate does not change
    # while we wait (libpq's wording, the same under both drivers).
    "certificate verify failed",
    "does not match host name",
)


# How much of the driver's reason a message keeps.
MAX_REASON_CHARACTERS = 2000


class DatabaseUnavailable(RecoveryError):
    """The database could not be reached or refused the connection."""


def is_permanent(error: BaseException) -> bool:
    """True when a connection error will be the same on the next try."""
    sqlstate = sqlstate_of(error) or ""
    if sqlstate[:2] in _PERMANENT_SQLSTATE_CLASSES:
        return True
    text = str(error)
    return any(marker in text for marker in _PERMANENT_MESSAGES)


def _shortened(text: str) -> str:
    """The driver's reason, cut after MAX_REASON_CHARACTERS (its lines are joined later)."""
    if len(text) <= MAX_REASON_CHARACTERS:
        return text
    return "%s... (%d characters)" % (text[:MAX_REASON_CHARACTERS], len(text))


def redact(text: str, secret: Optional[str]) -> str:
    """`text` with every occurrence of `secret` masked."""
    if secret:
        text = text.replace(secret, "********")
    return text


def describe_target(kwargs: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None) -> str:
    host = cut(kwargs.get("host") or "the local socket")
    port = kwargs.get("port")
    where = "%s:%s" % (host, port) if port else host
    return "database %s as %s on %s" % (_quoted(kwargs.get("dbname")), describe_user(kwargs, environ), where)


def describe_user(kwargs: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None) -> str:
    """The user a connection logs in as: the one given, else the one libpq takes when none
    is given (PGUSER, else the login name), said so, never "None"."""
    if kwargs.get("user"):
        return _quoted(kwargs["user"])
    environ = os.environ if environ is None else environ
    if environ.get("PGUSER"):
        return "%s (no user given: libpq's PGUSER)" % _quoted(environ["PGUSER"])
    try:
        login = getpass.getuser()
    except Exception:  # pylint: disable=broad-except
        # No login name known to the system: libpq then fails with its own reason.
        return "libpq's default user (no user given, no PGUSER, no login name)"
    return "%s (no user given: libpq's default, the login name)" % _quoted(login)


def _quoted(value: object) -> str:
    """'name' (cut when long), or None: how the target's names are written."""
    return "None" if value is None else "'%s'" % cut(value)


def connect(
    conn_kwargs: Mapping[str, Any],
    wait: float = 0.0,
    driver: Optional[Driver] = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Connection:
    """An open connection (autocommit off), trying again for `wait` seconds.

    `conn_kwargs` are libpq's connection parameters (`host`, `port`, `dbname`, `user`,
    `password`, `sslmode`, `connect_timeout`, `application_name`), as both drivers take
    them. Every message this raises has the password masked, and is the same whichever
    driver `driver` (by default load_driver()'s) is.
    """
    driver = driver or load_driver()
    password = conn_kwargs.get("password")
    deadline = clock() + max(0.0, wait)
    delay = 0.5
    attempts = 0
    while True:
        attempts += 1
        try:
            return driver.connect(**conn_kwargs)
        except driver.OperationalError as error:
            # libpq repeats the names it was given (a host, a database): cut, not 100,000
            # characters of them.
            reason = _shortened(redact(connection_error_text(error), password))
            if is_permanent(error) or clock() + delay > deadline:
                raise DatabaseUnavailable(
                    "cannot connect to the %s after %d attempt(s): %s"
                    % (describe_target(conn_kwargs), attempts, reason)
                ) from None
        sleep(delay)
        delay = min(delay * 2, 5.0)
