# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PostgreSQL through psycopg 3 or psycopg2, whichever the host has, behind one interface.

The engines are written against the part of psycopg 3's connection they use:
``conn.execute(sql, params)`` returning a cursor, ``conn.cursor(name=..., withhold=True)``
(a cursor the server keeps), ``fetchone``/``fetchmany``/``fetchall``, ``commit``,
``rollback``, ``autocommit``, ``closed``/``broken``, ``info.host/port/dbname`` and
``prepare_threshold``. A psycopg 3 connection is handed over as it is; a psycopg2 one is
wrapped (`Psycopg2Connection`) to offer the same. Both run the same SQL with bound
parameters: the lists the engines bind are cast in the SQL (``%(uuids)s::text[]``), so an
empty list is an empty array with either driver, and each session has DateStyle ISO. A
parameter written ``%(name)b`` is bound in binary by psycopg 3 (long texts with quotes cost
it a Python substitution per quote in text form); psycopg2, which adapts in C and has no
binary parameters, reads it as ``%(name)s``, or, a list cast to an array, as one joined text
the server splits (`psycopg2_query`).

psycopg 3 is preferred: its pipeline mode and chunked streams (`pipeline_of`,
`streams_in_chunks`) speed up the reconciliation's reads. With psycopg2 those reads are
answered one statement at a time, with the same results.

ARVADOS_RECOVERY_PG_DRIVER=psycopg2 (or =psycopg) on the host picks one driver even when
both are installed; the tests run the database modules under each this way.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from datetime import datetime
from types import ModuleType
from typing import Any, Callable, ContextManager, Dict, List, Mapping, Match, Optional, Tuple

from .._common.errors import RecoveryError

# A connection as the engines use it (the module's docstring): psycopg 3's, or
# Psycopg2Connection, or a test's fake. Neither driver's types are importable everywhere.
Connection = Any

DRIVER_ENV = "ARVADOS_RECOVERY_PG_DRIVER"
# The Python modules, preferred first.
DRIVERS = ("psycopg", "psycopg2")
# What to install, for the messages of a host that has neither.
LIBRARY = "psycopg (version 3) or psycopg2"
INSTALL_HINT = (
    "install python3-psycopg or python3-psycopg2 (Debian/Ubuntu; python3-psycopg3 or "
    'python3-psycopg2 on EL), or "pip install psycopg[binary]" or "pip install psycopg2"'
)

# psycopg 3's own words before libpq's message ("connection failed: ", "consuming input
# failed: ", ...). libpq's own messages that say "failed:" quote a host or socket first.
_PSYCOPG3_CONNECT_PREFIX = re.compile(r"^(?:connection is bad|[a-z ]+ failed): ")
# psycopg 3 resolves host names itself (libpq then sees only the address) and says so in
# its words; libpq, which psycopg2 leaves the resolving to, names host and address.
_PSYCOPG3_UNRESOLVED = re.compile(r"^failed to resolve host '([^']*)': (?:\[Errno -?\d+\] )?")
_LIBPQ_HOST_AND_ADDRESS = re.compile(r'server at "[^"]*" \(([^)]*)\)')


def chosen_drivers(environ: Optional[Mapping[str, str]] = None) -> Tuple[str, ...]:
    """The driver modules to try, in order: both, or the one DRIVER_ENV names."""
    wanted = (os.environ if environ is None else environ).get(DRIVER_ENV, "").strip()
    if not wanted:
        return DRIVERS
    if wanted not in DRIVERS:
        raise RecoveryError("%s must be psycopg or psycopg2, got %r" % (DRIVER_ENV, wanted))
    return (wanted,)


def load_driver(
    environ: Optional[Mapping[str, str]] = None, importer: Optional[Callable[[str], ModuleType]] = None
) -> Driver:
    """The Driver of the first of `chosen_drivers` that imports, or a RecoveryError saying
    what to install."""
    importer = importer or _import
    for name in chosen_drivers(environ):
        try:
            module = importer(name)
        except ImportError:
            continue
        return DRIVER_CLASSES[name](module)
    raise RecoveryError(
        "the Python package %s is needed to reach PostgreSQL: %s"
        % (" or ".join(_library(name) for name in chosen_drivers(environ)), INSTALL_HINT)
    )


def driver_import_error(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The traceback of importing the last driver tried when none imports, else None (also
    for a wrong DRIVER_ENV, which load_driver then reports)."""
    try:
        names = chosen_drivers(environ)
    except RecoveryError:
        return None
    error = None
    for name in names:
        try:
            _import(name)
        except ImportError:
            error = traceback.format_exc()
            continue
        return None
    return error


def _library(name: str) -> str:
    return "psycopg (version 3)" if name == "psycopg" else name


def _import(name: str) -> ModuleType:
    # Imported when a connection is wanted, not with this file: the module then loads,
    # and says what to install, on a host that has neither.
    return __import__(name)


# Arvados stores UTC in `timestamp without time zone`; the database's own clock decides
# "now", so a host whose clock is off cannot put a token's expiry in the future.
SQL_NOW_UTC = "(now() AT TIME ZONE 'UTC')"

# lock_not_available: a lock waited for longer than lock_timeout.
SQLSTATE_LOCK_TIMEOUT = "55P03"


def sqlstate_of(error: BaseException) -> Optional[str]:
    """The SQLSTATE of a database error of either driver (None for others)."""
    return getattr(error, "sqlstate", None) or getattr(error, "pgcode", None)


def connection_lost(conn: Connection) -> bool:
    """Whether the driver has found `conn` dead (closed, or its server session gone)."""
    return bool(getattr(conn, "closed", False) or getattr(conn, "broken", False))


# What PostgreSQL's error report says, in libpq's order, after the primary message.
_DIAG_FIELDS = (("DETAIL", "message_detail"), ("HINT", "message_hint"), ("CONTEXT", "context"))


def error_text(error: BaseException) -> str:
    """A database error on one line, the same with either driver: PostgreSQL's message with
    its detail, hint and context, without the statement's text, which psycopg2 quotes with
    the values bound into it and psycopg 3 with $1; or, for an error the client found (a
    lost connection), libpq's words."""
    diag = getattr(error, "diag", None)
    primary = getattr(diag, "message_primary", None)
    if not primary:
        return connection_error_text(error)
    parts = [primary]
    for label, field in _DIAG_FIELDS:
        value = getattr(diag, field, None)
        if value:
            parts.append("%s: %s" % (label, value))
    return " ".join(" ".join(parts).split())


def connection_error_text(error: BaseException) -> str:
    """The reason a connection failed, in libpq's words with either driver, on one line."""
    text = " ".join(str(error).split())
    text = _PSYCOPG3_CONNECT_PREFIX.sub("", text)
    text = _PSYCOPG3_UNRESOLVED.sub(r'could not translate host name "\1" to address: ', text)
    return _LIBPQ_HOST_AND_ADDRESS.sub(r'server at "\1"', text)


def pipeline_of(conn: Connection) -> Optional[Callable[[], ContextManager[Any]]]:
    """`conn.pipeline` where psycopg 3.1+ and libpq (14+) have a pipeline mode, else None
    (psycopg2, older ones, a test's fake): statements are then answered as they are sent."""
    pipeline = getattr(_psycopg3_of(conn), "Pipeline", None)
    return conn.pipeline if pipeline is not None and pipeline.is_supported() else None


def streams_in_chunks(conn: Connection) -> bool:
    """Whether `conn` streams a result in chunks: psycopg 3.2+ (capabilities) with libpq 17+."""
    capabilities = getattr(_psycopg3_of(conn), "capabilities", None)
    return capabilities is not None and capabilities.has_stream_chunked()


def server_version(conn: Connection) -> int:
    """The server's version as a number (150004 for 15.4), or 0 where the connection does
    not say (psycopg2 before 2.8, a test's fake): then no feature of a version is assumed."""
    version = getattr(getattr(conn, "info", None), "server_version", 0)
    return version if isinstance(version, int) else 0


def _psycopg3_of(conn: Connection) -> Optional[ModuleType]:
    """The psycopg 3 module, when `conn` is one of its connections (imported by then)."""
    psycopg = sys.modules.get("psycopg")
    return psycopg if psycopg is not None and isinstance(conn, psycopg.Connection) else None


class Driver:
    """One driver module: its errors, its version, and connecting through it."""

    name = ""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.Error = module.Error  # pylint: disable=invalid-name
        self.OperationalError = module.OperationalError  # pylint: disable=invalid-name

    @property
    def version(self) -> str:
        return self.module.__version__.split(" ", 1)[0]

    def connect(self, **kwargs: Any) -> Connection:
        """An open connection, autocommit off, DateStyle ISO."""
        raise NotImplementedError

    def describe(self) -> str:
        return "%s %s" % (self.name, self.version)


class Psycopg3Driver(Driver):
    name = "psycopg"

    def connect(self, **kwargs: Any) -> Connection:
        conn = self.module.connect(**kwargs)
        if not (conn.info.parameter_status("DateStyle") or "ISO").startswith("ISO"):
            # psycopg2 does the same when it connects: timestamps then read alike.
            conn.execute("SET DateStyle = ISO")
            conn.commit()
        return conn


class Psycopg2Driver(Driver):
    name = "psycopg2"

    def connect(self, **kwargs: Any) -> Connection:
        # psycopg2 sets DateStyle ISO itself when the server's is another.
        return Psycopg2Connection(self.module.connect(**kwargs))


class ConnectionInfo:
    """What the engines read of psycopg 3's `conn.info`."""

    def __init__(self, host: Optional[str], port: Optional[int], dbname: Optional[str]) -> None:
        self.host = host
        self.port = port
        self.dbname = dbname


# A binary placeholder with the array cast that follows it if any, or an escaped % (whose
# next character is no placeholder's start).
BINARY_PLACEHOLDER = re.compile(r"%%|%\(([A-Za-z_][A-Za-z0-9_]*)\)b(::[a-z ]+\[\])?")

# psycopg2 writes a list as ARRAY['a', 'b', ...], each element a constant the server parses,
# coerces and folds on its own: a batch's log rows (nine lists of 2,000, two MB of
# properties) took the server several times what psycopg 3's binary lists take. A list
# bound where psycopg 3 binds one in binary goes instead as one text, its elements joined
# by the unit separator, that string_to_array splits on the server, an element that is the
# record separator alone read as NULL; unless an element could be taken for either, or is
# of a type without one text form (bench/README.md, "psycopg2's lists").
LIST_SEPARATOR = "\x1f"
LIST_NULL = "\x1e"
SPLIT_LIST = "string_to_array(%%(%s)s, chr(31), chr(30))%s"


def joined_list(value: object) -> Optional[str]:
    """`value`, a list of texts, naive datetimes and Nones, as SPLIT_LIST's one text; None
    when it is no such list, or when an element could be read back as another."""
    if not isinstance(value, list) or value == [""]:
        return None
    texts: List[str] = []
    for element in value:
        if element is None:
            texts.append(LIST_NULL)
        elif isinstance(element, str) and element != LIST_NULL and LIST_SEPARATOR not in element:
            texts.append(element)
        elif isinstance(element, datetime) and element.tzinfo is None:
            texts.append(element.isoformat())
        else:
            return None
    return LIST_SEPARATOR.join(texts)


def psycopg2_query(query: object, params: Any = None) -> Tuple[object, Any]:
    """(query, params) for psycopg2: psycopg 3's binary placeholders as psycopg2's, an
    array-cast list among them joined as SPLIT_LIST takes it (`params` itself unchanged)."""
    if not isinstance(query, str):
        return query, params
    joined: Dict[str, str] = {}

    def placeholder(match: Match[str]) -> str:
        name, cast = match.group(1), match.group(2) or ""
        if not name:
            return match.group(0)
        text = joined_list(params.get(name)) if cast and isinstance(params, dict) else None
        if text is None:
            return "%%(%s)s%s" % (name, cast)
        joined[name] = text
        return SPLIT_LIST % (name, cast)

    query = BINARY_PLACEHOLDER.sub(placeholder, query)
    return query, (dict(params, **joined) if joined else params)


class Psycopg2Connection:
    """A psycopg2 connection offering the part of psycopg 3's interface the engines use."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        # psycopg2 never prepares statements on the server: nothing to turn off.
        self.prepare_threshold = None

    def execute(self, query: object, params: Optional[Mapping[str, Any]] = None) -> Any:
        """Runs `query` on a new cursor and returns the cursor, as psycopg 3 does."""
        cursor = self.raw.cursor()
        cursor.execute(*psycopg2_query(query, params))
        return cursor

    def cursor(self, name: Optional[str] = None, withhold: bool = False) -> Any:
        if name is None:
            return self.raw.cursor()
        return self.raw.cursor(name=name, withhold=withhold)

    @property
    def autocommit(self) -> bool:
        return self.raw.autocommit

    @autocommit.setter
    def autocommit(self, value: bool) -> None:
        self.raw.autocommit = value

    def commit(self) -> None:
        self.raw.commit()

    def rollback(self) -> None:
        self.raw.rollback()

    def close(self) -> None:
        self.raw.close()

    @property
    def closed(self) -> bool:
        # psycopg2: 0 open, 1 closed, 2 found broken by the last operation.
        return bool(self.raw.closed)

    @property
    def broken(self) -> bool:
        return self.raw.closed == 2

    @property
    def info(self) -> Any:
        if hasattr(self.raw, "info"):  # psycopg2 2.8 and later: libpq's answer
            return self.raw.info
        params = self.raw.get_dsn_parameters()
        port = params.get("port")
        return ConnectionInfo(params.get("host"), int(port) if port else None, params.get("dbname"))


DRIVER_CLASSES = {"psycopg": Psycopg3Driver, "psycopg2": Psycopg2Driver}
