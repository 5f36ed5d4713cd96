# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the Arvados database is and how to log in to it.

Sources, per key, the later winning:

1. One settings file, chosen like this:

   * ``config_file`` given: that file, ``Clusters.<id>.PostgreSQL.Connection``
     (``host``, ``port``, ``user``, ``password``, ``dbname``, ``sslmode``,
     ``sslrootcert``).
   * ``database_yml`` given: that file, section ``production`` (``database``,
     ``username``, ``password``, ``host``, ``port``, ``sslmode``, ``sslrootcert``).
   * neither given: ``/etc/arvados/config.yml`` if it exists; if that file has no
     ``PostgreSQL.Connection`` for the cluster (an older cluster in the middle of
     its move to config.yml), or does not exist, ``/etc/arvados/api/database.yml``
     if it exists; else no file.
   * an empty string for ``config_file`` or ``database_yml`` skips that file.

   ``cluster_id`` is needed only when config.yml defines several clusters, and
   only makes sense with config.yml. A file that was named or found but cannot be
   read is an error, never silently skipped.
2. The explicit options ``db_host``, ``db_port``, ``db_name``, ``db_user``,
   ``db_password``, ``db_sslmode``, ``db_ca_cert``, ``db_connect_timeout``. An empty string
   counts as not given, as an empty value does in Arvados' own config.

A database name is required in the end. Host, port, user and password may all be
missing: libpq then uses its own defaults (``PGHOST``, ``PGPASSWORD``,
``~/.pgpass``, the local socket), which keeps the password off command lines.

Files are read with every scalar kept as the text written, as Arvados' Go
config loader does (``password: 0123`` is ``"0123"``, not 83). Rails'
database.yml may hold ERB: a value written as ``<%= ... %>`` is refused unless an
explicit option replaces it, and a file with ERB code (``<% ... %>``) is refused
whole, because only Ruby can tell what it means.

The password never appears in a message, ``repr()`` or ``redacted()``: YAML
syntax errors are reported by line and column only, since PyYAML quotes the
offending text.

A settings file is read as the options file of the commands is (options_file's
``read_trusted_file``): a symlink is followed (Arvados' own loader follows it, and a site
may link ``/etc/arvados/config.yml`` to where its configuration lives), but its target must
be a regular file of at most :data:`MAX_CONFIG_FILE_BYTES` (a FIFO would block the read
for ever, ``/dev/zero`` would fill the memory) owned by root or the caller and writable by
neither its group nor others. The file chooses the server the run connects to and
writes to, and the password (``PGPASSWORD``, a client certificate) it presents there: a
file another user could change would choose them for a run as root, the same trust as
the options file's. Arvados' installer writes config.yml root-owned, 0640.

A host (``db_host`` or the file's ``host``) must be what libpq can resolve: a socket
directory (``/...``), an IP address, or a DNS name of ASCII labels of 1 to 63
characters, 253 in all; several, comma-separated, as libpq takes them. Anything else is
refused by name before a connection is tried (Python's IDNA codec would fail on it
with an error naming nothing).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from .._common.errors import ConfigError, cut
from .._common.option_bounds import MAX_PORT, MAX_SLEEP_SECONDS
from .._common.options import Option, Range, excerpt, seconds, value_text
from .._common.options_file import check_trusted_file, read_trusted_file, text_scalar_loader

DEFAULT_CONFIG_FILE = "/etc/arvados/config.yml"
DEFAULT_DATABASE_YML = "/etc/arvados/api/database.yml"
DEFAULT_CONNECT_TIMEOUT = 10
# How long a run keeps trying an unreachable database (option db_wait of the cleanup and
# the reconciliation): at boot PostgreSQL may still be starting.
DEFAULT_DB_WAIT = 30.0
APPLICATION_NAME = "arvados-fail-jobs"
SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
REDACTED = "********"
# A config.yml with every setting of several clusters is tens of kilobytes; more is no
# settings file (or /dev/zero behind a link).
MAX_CONFIG_FILE_BYTES = 8 * 1024 * 1024
# DNS: a label is 1 to 63 characters, a name at most 253 (RFC 1035, without the final dot).
MAX_HOST_LABEL = 63
MAX_HOST_NAME = 253
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?", re.ASCII)

# One source of truth for the connection options of the modules (argument_spec) and the
# command (flags); `help` is for the command only.
CONNECTION_OPTIONS: Dict[str, Option] = {
    "config_file": Option(
        "path",
        help="Arvados config.yml to read Clusters.<id>.PostgreSQL.Connection from "
        "(default: %s if it exists; '' to skip)" % DEFAULT_CONFIG_FILE,
    ),
    "cluster_id": Option("str", help="cluster in config.yml, needed when it defines several"),
    "database_yml": Option(
        "path",
        help="older clusters' database.yml, section production "
        "(default: %s if config.yml is missing; '' to skip)" % DEFAULT_DATABASE_YML,
    ),
    # The aliases are community.postgresql's names, which Ansible users know; the modules
    # take them, the command's flags and options file only the names.
    "db_host": Option("str", aliases=["login_host"], help="database host or socket directory"),
    "db_port": Option("int", aliases=["login_port", "port"], check=Range(MAX_PORT, minimum=1), help="database port"),
    "db_name": Option("str", aliases=["login_db"], help="database name"),
    "db_user": Option("str", aliases=["login_user"], help="database user"),
    "db_password": Option(
        "str",
        no_log=True,
        aliases=["login_password"],
        help="database password (prefer PGPASSWORD or ~/.pgpass: command lines are visible to all)",
    ),
    "db_sslmode": Option("str", choices=SSLMODES, aliases=["ssl_mode"], help="libpq sslmode"),
    "db_ca_cert": Option(
        "path",
        aliases=["ca_cert", "ssl_rootcert"],
        help="CA certificate(s) the server's must chain to under sslmode verify-ca or verify-full (libpq sslrootcert)",
    ),
    "db_connect_timeout": Option(
        "int",
        DEFAULT_CONNECT_TIMEOUT,
        check=seconds(MAX_SLEEP_SECONDS, minimum=1),
        help="seconds to wait for each connection attempt",
    ),
}

CONNECTION_MUTUALLY_EXCLUSIVE = [["config_file", "database_yml"], ["cluster_id", "database_yml"]]

_OPTION_TO_LIBPQ = {
    "db_host": "host",
    "db_port": "port",
    "db_name": "dbname",
    "db_user": "user",
    "db_password": "password",
    "db_sslmode": "sslmode",
    "db_ca_cert": "sslrootcert",
    "db_connect_timeout": "connect_timeout",
}
_CONFIG_YML_KEYS = {key: key for key in ("host", "port", "user", "password", "dbname", "sslmode", "sslrootcert")}
_DATABASE_YML_KEYS = {
    "host": "host",
    "port": "port",
    "username": "user",
    "password": "password",
    "database": "dbname",
    "sslmode": "sslmode",
    "sslrootcert": "sslrootcert",
}
_LIBPQ_TO_OPTION = {libpq: option for option, libpq in _OPTION_TO_LIBPQ.items()}
_ERB_CODE = re.compile(r"<%(?![=%#])")
_CLUSTER_ID = re.compile(r"[a-z0-9]{5}")
_NO_FILE = "options"


@dataclass(frozen=True)
class DatabaseSettings:
    """Resolved connection settings; ``source`` says where they came from."""

    dbname: str
    source: str
    host: Optional[str] = None
    port: Optional[int] = None
    user: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    sslmode: Optional[str] = None
    sslrootcert: Optional[str] = None
    connect_timeout: int = DEFAULT_CONNECT_TIMEOUT

    def as_psycopg_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments for ``psycopg.connect()``; unset ones are left to libpq."""
        kwargs = {
            "dbname": self.dbname,
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "sslmode": self.sslmode,
            "sslrootcert": self.sslrootcert,
            "connect_timeout": self.connect_timeout,
            "application_name": APPLICATION_NAME,
        }
        return {key: value for key, value in kwargs.items() if value is not None}

    def redacted(self) -> Dict[str, Any]:
        """The settings for reports and logs, password masked."""
        shown = self.as_psycopg_kwargs()
        if "password" in shown:
            shown["password"] = REDACTED
        shown["source"] = self.source
        return shown

    def __repr__(self) -> str:
        return "DatabaseSettings(%s)" % ", ".join("%s=%r" % item for item in self.redacted().items())

    __str__ = __repr__


@dataclass(frozen=True)
class _ErbValue:
    """A file value Rails would compute with ERB; kept as the key it came from, never its text."""

    key_path: str


def resolve_database_settings(
    options: Mapping[str, Any],
    default_config_file: str = DEFAULT_CONFIG_FILE,
    default_database_yml: str = DEFAULT_DATABASE_YML,
) -> DatabaseSettings:
    """Combine the settings file and the explicit ``db_*`` options.

    ``options`` maps the names of :data:`CONNECTION_OPTIONS` to values; missing
    names, ``None`` and ``''`` mean not given (except for the two file paths,
    where ``''`` means skip).
    """
    _check_exclusive_options(options)
    explicit = _explicit_values(options)
    if "host" in explicit:
        check_host("option db_host", explicit["host"])
    file_values, source = _values_from_file(options, default_config_file, default_database_yml)
    if "host" not in explicit and isinstance(file_values.get("host"), str):
        # The file's host, checked only when it is the one used (db_host replaces it).
        check_host("the host of %s" % source, file_values["host"])
    merged = dict(file_values)
    merged.update(explicit)
    if source == _NO_FILE and not merged.get("dbname"):
        raise ConfigError(_no_settings_message(options, default_config_file, default_database_yml))
    overrides = [_LIBPQ_TO_OPTION[key] for key in explicit if key != "connect_timeout"]
    if overrides and source != _NO_FILE:
        source = "%s; %s from options" % (source, ", ".join(overrides))
    return _settings_from_values(merged, source)


def cluster_setting(
    options: Mapping[str, Any], keys: Tuple[str, ...], default_config_file: str = DEFAULT_CONFIG_FILE
) -> Optional[Tuple[str, str]]:
    """(value as written, where) of ``Clusters.<id>.<keys...>`` in the config.yml the
    database settings would read (``config_file``, else the default one if it exists), or
    None when there is no such file, it cannot be read, or it does not set the key: the
    caller then falls back to Arvados' default."""
    path = config_file_read(options, default_config_file)
    if not path:
        return None
    try:
        clusters = _mapping_at(_load_yaml_file(path, "config_file"), "Clusters", path)
        if not clusters:
            return None
        chosen_id = _choose_cluster(clusters, options.get("cluster_id") or None, path)
        value: Any = clusters[chosen_id]
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
    except ConfigError:
        return None
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value), "config_file %s, Clusters.%s.%s" % (cut(path), cut(chosen_id), ".".join(keys))


def config_file_read(options: Mapping[str, Any], default_config_file: str = DEFAULT_CONFIG_FILE) -> Optional[str]:
    """The config.yml cluster_setting reads: ``config_file``, else the default one if it
    exists; None with ``database_yml`` or ``config_file: ''``."""
    config_file = options.get("config_file")
    if options.get("database_yml"):
        return None
    return config_file or _existing_default(config_file, default_config_file)


def _check_exclusive_options(options: Mapping[str, Any]) -> None:
    for group in CONNECTION_MUTUALLY_EXCLUSIVE:
        given = [name for name in group if options.get(name)]
        if len(given) > 1:
            raise ConfigError("options %s cannot be used together" % " and ".join(given))


def _explicit_values(options: Mapping[str, Any]) -> Dict[str, Any]:
    return {
        libpq_key: options[option]
        for option, libpq_key in _OPTION_TO_LIBPQ.items()
        if options.get(option) not in (None, "")
    }


def _values_from_file(
    options: Mapping[str, Any], default_config_file: str, default_database_yml: str
) -> Tuple[Dict[str, Any], str]:
    config_file = options.get("config_file")
    database_yml = options.get("database_yml")
    cluster_id = options.get("cluster_id") or None
    if config_file:
        return _required(_config_file_values(config_file, cluster_id), config_file)
    if database_yml:
        return _database_yml_values(database_yml)
    found_config_file = _existing_default(config_file, default_config_file)
    found_database_yml = _existing_default(database_yml, default_database_yml)
    if found_config_file:
        found = _config_file_values(found_config_file, cluster_id)
        if found is not None or not found_database_yml:
            return _required(found, found_config_file)
        return _database_yml_values(found_database_yml)
    if cluster_id:
        raise ConfigError(
            "cluster_id %s given but no config.yml is read (%s does not exist or config_file is '')"
            % (cut(cluster_id), default_config_file)
        )
    if found_database_yml:
        return _database_yml_values(found_database_yml)
    return {}, _NO_FILE


def _no_settings_message(options: Mapping[str, Any], default_config_file: str, default_database_yml: str) -> str:
    """Why no file gave the settings, when the options give no database name either: the
    default files are missing (a host that is not the API server's), or were skipped."""
    why = []
    for option, default in (("config_file", default_config_file), ("database_yml", default_database_yml)):
        if options.get(option) == "":
            why.append("%s is '' (skipped)" % option)
        else:
            why.append("%s does not exist" % default)
    return (
        "no database settings: %s, and no db_name is given; name the cluster's file with "
        "config_file (or database_yml on older clusters), or give db_name (and db_host, "
        "db_user... as needed)" % " and ".join(why)
    )


def _existing_default(given: Optional[str], default_path: str) -> Optional[str]:
    """The default path when the option was left out and the file exists."""
    return default_path if given is None and os.path.exists(default_path) else None


def _required(found: Optional[Tuple[Dict[str, Any], str]], path: str) -> Tuple[Dict[str, Any], str]:
    if found is None:
        raise ConfigError(
            "config_file %s has no Clusters.<id>.PostgreSQL.Connection settings; "
            "give database_yml or the db_* options" % cut(path)
        )
    return found


def _config_file_values(path: str, cluster_id: Optional[str]) -> Optional[Tuple[Dict[str, Any], str]]:
    """The cluster's connection values and a source, or None when the file has none."""
    document = _load_yaml_file(path, "config_file")
    clusters = _mapping_at(document, "Clusters", path)
    if not clusters:
        return None
    chosen_id = _choose_cluster(clusters, cluster_id, path)
    postgresql = _mapping_at(clusters[chosen_id], "PostgreSQL", path, "Clusters.%s" % cut(chosen_id))
    connection = _mapping_at(postgresql, "Connection", path, "Clusters.%s.PostgreSQL" % cut(chosen_id))
    if not connection:
        return None
    key_prefix = "Clusters.%s.PostgreSQL.Connection" % cut(chosen_id)
    values = _pick_values(connection, _CONFIG_YML_KEYS, path, key_prefix)
    return values, "config_file %s, cluster %s" % (cut(path), cut(chosen_id))


def _choose_cluster(clusters: Dict[str, Any], cluster_id: Optional[str], path: str) -> str:
    known = cluster_ids_text(clusters)
    if cluster_id is not None:
        if cluster_id not in clusters:
            raise ConfigError(
                "cluster_id %s is not in config_file %s, which defines: %s" % (cut(cluster_id), cut(path), known)
            )
        return cluster_id
    if len(clusters) > 1:
        raise ConfigError("config_file %s defines several clusters (%s); set cluster_id" % (cut(path), known))
    return next(iter(clusters))


def cluster_ids_text(clusters: Mapping[Any, Any]) -> str:
    """The cluster ids for a message; other keys only counted, since a slip of
    indentation can turn any text of the file, even the password, into a key."""
    ids = sorted(key for key in clusters if isinstance(key, str) and _CLUSTER_ID.fullmatch(key))
    others = len(clusters) - len(ids)
    if others:
        ids.append("%d other key%s" % (others, "" if others == 1 else "s"))
    return ", ".join(ids)


def _database_yml_values(path: str) -> Tuple[Dict[str, Any], str]:
    text = _read_text(path, "database_yml")
    _refuse_erb_code(text, path)
    document = _parse_yaml(text, path, "database_yml")
    production = _mapping_at(document, "production", path)
    if not production:
        raise ConfigError("database_yml %s has no production section; give the db_* options" % cut(path))
    adapter = production.get("adapter")
    if isinstance(adapter, str) and adapter and "postg" not in adapter.lower():
        raise ConfigError("database_yml %s: production uses adapter %s, not PostgreSQL" % (cut(path), excerpt(adapter)))
    source = "database_yml %s, production" % cut(path)
    return _pick_values(production, _DATABASE_YML_KEYS, path, "production"), source


def _refuse_erb_code(text: str, path: str) -> None:
    lines = [
        str(number)
        for number, line in enumerate(text.splitlines(), 1)
        if not line.lstrip().startswith("#") and _ERB_CODE.search(line)
    ]
    if lines:
        raise ConfigError(
            "database_yml %s holds ERB code (<%% %%>) on line %s, which only Rails can run; "
            "give the db_* options and database_yml: '' instead" % (cut(path), ", ".join(lines))
        )


def _pick_values(section: Mapping[str, Any], key_map: Mapping[str, str], path: str, key_prefix: str) -> Dict[str, Any]:
    values: Dict[str, Any] = {}
    for file_key, libpq_key in key_map.items():
        value = section.get(file_key)
        if value is None or value == "":
            continue
        key_path = "%s.%s" % (key_prefix, file_key)
        if not isinstance(value, str):
            raise ConfigError(
                "%s in %s must be plain text, not a list, mapping or tagged value" % (key_path, cut(path))
            )
        values[libpq_key] = _ErbValue(key_path) if "<%" in value else value
    return values


def check_host(what: str, value: Any) -> None:
    """A ConfigError naming `what` (``option db_host``) and the value unless `value` is a
    host libpq can take: a socket directory, an IP address or a DNS name (see above); a
    comma-separated list of them."""
    if not isinstance(value, str):
        return
    for host in value.split(","):
        problem = _host_problem(host)
        if problem:
            raise ConfigError(
                "%s must be a host name, an IP address or a socket directory (/...): %s, got %s"
                % (what, problem, excerpt(value))
            )


def _host_problem(host: str) -> Optional[str]:
    if host.startswith("/") or host.startswith("@"):
        return None
    if not host:
        return "an empty host in the list"
    if not host.isascii():
        return "it has characters other than ASCII (write an internationalised name in its xn-- form)"
    try:
        # A scope (fe80::1%eth0) is libpq's; Python's ipaddress takes it only from 3.9.
        ipaddress.ip_address(host.split("%", 1)[0] if ":" in host else host)
        return None
    except ValueError:
        pass
    name = host[:-1] if host.endswith(".") else host
    if len(name) > MAX_HOST_NAME:
        return "%d characters, more than the %d of a DNS name" % (len(name), MAX_HOST_NAME)
    for label in name.split("."):
        if not label:
            return "an empty label (two dots in a row, or a dot first)"
        if len(label) > MAX_HOST_LABEL:
            return "a label of %d characters, more than the %d of DNS" % (len(label), MAX_HOST_LABEL)
        if not _HOST_LABEL.fullmatch(label):
            return "the label %s holds what no host name does (letters, digits, - and _ only; no - first or last)" % (
                excerpt(label)
            )
    return None


def _settings_from_values(values: Dict[str, Any], source: str) -> DatabaseSettings:
    _refuse_erb_values(values)
    dbname = values.get("dbname")
    if not dbname:
        raise ConfigError("no database name: none in the settings from %s; set it there or give db_name" % source)
    return DatabaseSettings(
        dbname=str(dbname),
        source=source,
        host=_optional_text(values.get("host")),
        port=_port(values.get("port"), source),
        user=_optional_text(values.get("user")),
        password=_optional_text(values.get("password")),
        sslmode=_sslmode(values.get("sslmode"), source),
        sslrootcert=_optional_text(values.get("sslrootcert")),
        connect_timeout=_connect_timeout(values.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)),
    )


def _refuse_erb_values(values: Mapping[str, Any]) -> None:
    erb_keys = [key for key, value in values.items() if isinstance(value, _ErbValue)]
    if erb_keys:
        raise ConfigError(
            "%s computed with ERB (<%%= %%>), which only Rails can run; give %s instead"
            % (
                ", ".join(values[key].key_path for key in erb_keys),
                ", ".join(_LIBPQ_TO_OPTION[key] for key in erb_keys),
            )
        )


def _optional_text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def _port(value: Any, source: str) -> Optional[int]:
    if value is None:
        return None
    text = str(value).strip()
    if not re.fullmatch(r"\d{1,5}", text, re.ASCII) or not 1 <= int(text) <= MAX_PORT:
        raise ConfigError("database port %s (%s) is not a number from 1 to %d" % (value_text(value), source, MAX_PORT))
    return int(text)


def _sslmode(value: Any, source: str) -> Optional[str]:
    if value is None:
        return None
    if value not in SSLMODES:
        raise ConfigError("sslmode %s (%s) is not one of %s" % (value_text(value), source, ", ".join(SSLMODES)))
    return str(value)


def _connect_timeout(value: Any) -> int:
    """The option's own check; text too, as resolve_database_settings may be given it."""
    return CONNECTION_OPTIONS["db_connect_timeout"].parse_value("db_connect_timeout", value, from_text=True)


def _mapping_at(container: Any, key: str, path: str, parent: str = "") -> Dict[str, Any]:
    """``container[key]`` as a mapping; empty when absent, an error when it is something else."""
    where = "%s.%s" % (parent, key) if parent else key
    if container is None:
        return {}
    if not isinstance(container, dict):
        raise ConfigError("%s is not a YAML mapping where %s should be" % (cut(path), where))
    value = container.get(key)
    if value is None or value == "":
        return {}
    if not isinstance(value, dict):
        raise ConfigError("%s in %s is not a mapping" % (where, cut(path)))
    return value


def _load_yaml_file(path: str, option: str) -> Any:
    return _parse_yaml(_read_text(path, option), path, option)


def _read_text(path: str, option: str) -> str:
    data, status = read_trusted_file(option, path, MAX_CONFIG_FILE_BYTES, ConfigError)
    check_trusted_file(option, path, status, ConfigError)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("%s %s is not UTF-8 text" % (option, cut(path))) from None


def _parse_yaml(text: str, path: str, option: str) -> Any:
    yaml = _import_yaml()
    try:
        return _parsed(yaml, text)
    except yaml.YAMLError as error:
        where = _yaml_error_position(error)
    # Raised outside the handler so that PyYAML's error, which quotes the
    # offending text (perhaps the password), is not kept as __context__.
    raise ConfigError("%s %s is not valid YAML%s" % (option, cut(path), where))


# A cleanup reads config.yml three times (the connection, then AuditLogs' MaxAge and
# MaxDeleteBatch): the same text is parsed once. PyYAML's loader runs in Python here, a
# millisecond or more per parse even of the lab's short file, on a no-op rerun's path
# (issue 40). The callers only read the document, never change it.
@functools.lru_cache(maxsize=4)
def _parsed(yaml: Any, text: str) -> Any:
    return yaml.load(text, Loader=text_scalar_loader(yaml))  # a SafeLoader subclass: builds no arbitrary objects


def _yaml_error_position(error: Exception) -> str:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    return " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""


def _import_yaml() -> Any:
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            "reading Arvados settings files needs PyYAML (Debian: apt install python3-yaml), "
            "or give the db_* options with config_file: '' and database_yml: ''"
        ) from None
    return yaml
