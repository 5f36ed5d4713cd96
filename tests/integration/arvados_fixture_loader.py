"""Arvados' own test fixtures (services/api/test/fixtures/<table>.yml at a tag), loaded into
a lab database as Rails' fixture loader loads them for Arvados' own tests.

The files are Arvados' (AGPL): none is kept in this repository. They are read at test time
from a git directory holding Arvados' tags ($ARVADOS_SOURCE_GIT) or from a plain directory
of <tag>/<table>.yml ($ARVADOS_FIXTURES_DIR, by default ../shared/arvados-fixtures beside
this checkout); `fixture_source()` says which, or why neither is there.

What Rails does, and so this loader (ActiveRecord::FixtureSet, Rails 5.0.7 at 1.4.3 and
7.1.5 at 3.2.1: services/api/Gemfile.lock): render the file's ERB, parse the YAML, drop
`DEFAULTS`, then per row: created_at/updated_at set to the load's now where the row leaves
them out (every Arvados model records timestamps), `$LABEL` replaced by the label, the id
`Zlib.crc32(label) % (2**30 - 1)` (FixtureSet.identify), and a `belongs_to` association
given by label (`user: active`) turned into its foreign key, the label's id. Columns the
table lacks are an error, as Rails raises FixtureError. After the load each id sequence is
set to the largest id (reset_pk_sequence!), so rows inserted later do not collide.

Serialized columns are stored one of two ways (`serialization`), since old clusters hold
both:
- "model": as the tag's models write them: `serialize :col, Hash|Array` with Arvados'
  coder (1.4.3 services/api/lib/serializers.rb: SafeJSON.dump, Oj compat mode, compact),
  and an empty Hash or Array as NULL, because Rails' Serialized type stores nothing for the
  value the coder loads NULL as (activerecord type/serialized.rb `default_value?`);
- "fixture": as Rails' fixture loader writes them: a Hash or an Array that the column's
  own type cannot quote is written as YAML.dump(value) (Rails 5.0 insert_fixture's
  `rescue TypeError`, 7.1 `with_yaml_fallback`), whatever the model declares.
jsonb columns take JSON both ways (their type casts Hash and Array itself).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import subprocess
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from psycopg import sql
from psycopg.types.json import Jsonb

from tests.integration.module_playbook import REPO_ROOT

SOURCE_GIT_ENV = "ARVADOS_SOURCE_GIT"
FIXTURES_DIR_ENV = "ARVADOS_FIXTURES_DIR"
DEFAULT_FIXTURES_DIR = REPO_ROOT.parent / "shared" / "arvados-fixtures"
FIXTURE_PATH = "services/api/test/fixtures/%s.yml"
MAX_ID = 2**30 - 1
SERIALIZATIONS = ("model", "fixture")

# `serialize :column, Hash|Array` of each model, per tag (app/models/<model>.rb at the tag).
# A container and its request serialize the same columns (1.4.3 container.rb:26-30 and
# container_request.rb:27-31; 3.2.1 container.rb:29-34 and container_request.rb:34-39,
# which add output_glob).
_CONTAINER_1_4_3 = {"environment": dict, "mounts": dict, "runtime_constraints": dict, "command": list}
_CONTAINER_1_4_3["scheduling_parameters"] = dict
_CONTAINER_3_2_1 = {**_CONTAINER_1_4_3, "output_glob": list}
SERIALIZED: dict[str, dict[str, dict[str, type]]] = {
    "1.4.3": {
        "users": {"prefs": dict},  # user.rb:14
        "api_client_authorizations": {"scopes": list},  # api_client_authorization.rb:14
        # job.rb:14-17, pipeline_instance.rb:9-11
        "jobs": {"components": dict, "script_parameters": dict, "runtime_constraints": dict, "tasks_summary": dict},
        "job_tasks": {"parameters": dict},  # job_task.rb:9
        "logs": {"properties": dict},  # log.rb:11
        "pipeline_instances": {"components": dict, "properties": dict, "components_summary": dict},
        "containers": _CONTAINER_1_4_3,
        "container_requests": _CONTAINER_1_4_3,
    },
    "3.2.1": {
        "users": {"prefs": dict},  # user.rb:14
        "api_client_authorizations": {"scopes": list},  # api_client_authorization.rb:15
        "logs": {"properties": dict},  # log.rb:11
        "containers": _CONTAINER_3_2_1,
        "container_requests": _CONTAINER_3_2_1,
    },
}

# `belongs_to` associations whose foreign key is not the association's name, per tag: a
# fixture key naming one is a label (1.4.3 api_client_authorization.rb:11-12, container.rb:52,
# container_request.rb:15-16, pipeline_instance.rb:12; 3.2.1 api_client_authorization.rb:13,
# container.rb:73, container_request.rb:16-20).
BELONGS_TO: dict[str, dict[str, dict[str, str]]] = {
    "1.4.3": {
        "api_client_authorizations": {"api_client": "api_client_id", "user": "user_id"},
        "containers": {"auth": "auth_uuid"},
        "container_requests": {"container": "container_uuid", "requesting_container": "requesting_container_uuid"},
        "pipeline_instances": {"pipeline_template": "pipeline_template_uuid"},
    },
    "3.2.1": {
        "api_client_authorizations": {"user": "user_id"},
        "containers": {"auth": "auth_uuid"},
        "container_requests": {"container": "container_uuid", "requesting_container": "requesting_container_uuid"},
    },
}
TIMESTAMP_COLUMNS = ("created_at", "created_on", "updated_at", "updated_on")


class FixtureError(Exception):
    """A fixture file this loader cannot read as Rails would: refused, never guessed."""


# -- where the files come from ----------------------------------------------------------


@dataclass(frozen=True)
class FixtureSource:
    """Arvados' fixture files at its tags: a git directory or a directory of <tag>/."""

    git_dir: Path | None = None
    directory: Path | None = None

    def text(self, tag: str, table: str) -> str:
        if self.git_dir is not None:
            return subprocess.run(
                ["git", "--git-dir", str(self.git_dir), "show", "%s:%s" % (tag, FIXTURE_PATH % table)],
                check=True,
                capture_output=True,
                text=True,
                timeout=60,
            ).stdout
        assert self.directory is not None
        return (self.directory / tag / ("%s.yml" % table)).read_text()

    def where(self, tag: str, table: str) -> str:
        if self.git_dir is not None:
            return "%s:%s in %s" % (tag, FIXTURE_PATH % table, self.git_dir)
        return str(self.directory / tag / ("%s.yml" % table))


def fixture_source(tags: tuple[str, ...]) -> tuple[FixtureSource | None, str]:
    """The source holding every tag of `tags` ($ARVADOS_SOURCE_GIT first, then the
    directory), or None and why not: a skip reason naming both variables."""
    problems = []
    git_dir = os.environ.get(SOURCE_GIT_ENV)
    if git_dir:
        missing = [tag for tag in tags if not _git_has_tag(Path(git_dir), tag)]
        if not missing:
            return FixtureSource(git_dir=Path(git_dir)), ""
        problems.append("%s=%s holds no tag %s" % (SOURCE_GIT_ENV, git_dir, ", ".join(missing)))
    directory = Path(os.environ.get(FIXTURES_DIR_ENV) or DEFAULT_FIXTURES_DIR)
    missing = [tag for tag in tags if not (directory / tag).is_dir()]
    if not missing:
        return FixtureSource(directory=directory), ""
    problems.append("%s has no %s" % (directory, ", ".join(missing)))
    return None, (
        "Arvados' own fixture files are not kept in this repository; set %s to a git directory"
        " of Arvados holding the tags %s, or %s to a directory of <tag>/<table>.yml (%s)"
        % (SOURCE_GIT_ENV, ", ".join(tags), FIXTURES_DIR_ENV, "; ".join(problems))
    )


def _git_has_tag(git_dir: Path, tag: str) -> bool:
    probe = ["git", "--git-dir", str(git_dir), "rev-parse", "--verify", "--quiet", "%s^{commit}" % tag]
    return subprocess.run(probe, capture_output=True, timeout=60, check=False).returncode == 0


# -- ERB, the little of Ruby the fixture files use --------------------------------------

_ERB_TAG = re.compile(r"<%(=?)(.*?)%>", re.S)
_FOR = re.compile(r"\s*for\s+([a-z_]\w*)\s+in\s+(\d+)\.\.(\d+)\s+do\s*\Z")
_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?)|(?P<string>'[^'\\]*'|\"(?:[^\"\\]|\\.)*\")|(?P<symbol>:[a-z_]\w*)"
    r"|(?P<name>[A-Za-z_]\w*)|(?P<punct>::|=>|[().,{}+\-*/]))"
)
_UNITS = {"minute": "minutes", "minutes": "minutes", "hour": "hours", "hours": "hours"}
_UNITS.update({"day": "days", "days": "days", "month": "months", "months": "months"})
_UNITS.update({"year": "years", "years": "years"})


def render_erb(text: str, now: datetime.datetime) -> str:
    """The text with its ERB evaluated at `now` (UTC, naive): output tags, and `for`
    loops over integer ranges; any other Ruby is refused."""
    parts = _ERB_TAG.split(text)
    output, _end = _render(parts, 0, {}, now)
    return output


def _render(parts: list[str], at: int, env: dict[str, Any], now: datetime.datetime) -> tuple[str, int]:
    """Renders from parts[at] (text, flag, code, text, ...) to an `end` or the end."""
    out: list[str] = []
    while at < len(parts):
        out.append(parts[at])
        if at + 1 >= len(parts):
            return "".join(out), at + 1
        is_output, code = parts[at + 1] == "=", parts[at + 2]
        at += 3
        if is_output:
            out.append(_output(code, _Expression(code, env, now).value()))
            continue
        if code.strip() == "end":
            return "".join(out), at
        loop = _FOR.match(code)
        if loop is None:
            raise FixtureError("ERB this loader does not evaluate: <%%%s%%>" % code)
        body_end = at
        for number in range(int(loop.group(2)), int(loop.group(3)) + 1):
            body, body_end = _render(parts, at, {**env, loop.group(1): number}, now)
            out.append(body)
        at = body_end
    return "".join(out), at


def _output(code: str, value: Any) -> str:
    # Text and integers print alike in Ruby and Python; a Time or a Duration would not.
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise FixtureError("ERB this loader does not print (a %s): <%%=%s%%>" % (type(value).__name__, code))
    return str(value)


@dataclass
class _Duration:
    unit: str
    amount: int | float

    def before(self, moment: datetime.datetime) -> datetime.datetime:
        """ActiveSupport's Duration#ago: months and years by the calendar (Time#advance,
        the day clamped to the month's last), the rest as a fixed length."""
        if self.unit in ("months", "years"):
            if not isinstance(self.amount, int):
                raise FixtureError("a fractional %s: %r" % (self.unit, self.amount))
            months = self.amount * (12 if self.unit == "years" else 1)
            year, month = divmod(moment.year * 12 + moment.month - 1 - months, 12)
            day = min(moment.day, _month_days(year, month + 1))
            return moment.replace(year=year, month=month + 1, day=day)
        return moment - datetime.timedelta(**{self.unit: self.amount})


def _month_days(year: int, month: int) -> int:
    following = datetime.date(year + month // 12, month % 12 + 1, 1)
    return (following - datetime.timedelta(days=1)).day


class _Expression:
    """One Ruby expression of an output tag, parsed and evaluated as it is read."""

    def __init__(self, code: str, env: Mapping[str, Any], now: datetime.datetime):
        self.code, self.env, self.now = code, env, now
        self.tokens = self._tokens(code)

    def _tokens(self, code: str) -> list[tuple[str, str]]:
        tokens, position = [], 0
        while code[position:].strip():
            found = _TOKEN.match(code, position)
            if found is None:
                raise FixtureError("ERB this loader does not read: <%%=%s%%>" % code)
            tokens.append((found.lastgroup or "", found.group(found.lastgroup or 0)))
            position = found.end()
        return tokens

    def refuse(self, what: str) -> FixtureError:
        return FixtureError("ERB this loader does not evaluate (%s): <%%=%s%%>" % (what, self.code))

    def value(self) -> Any:
        result = self.sum()
        if self.tokens:
            raise self.refuse("left over: %s" % " ".join(text for _kind, text in self.tokens))
        return result

    def peek(self) -> str:
        return self.tokens[0][1] if self.tokens else ""

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if not self.tokens or (expected is not None and self.tokens[0][1] != expected):
            raise self.refuse("expected %s" % (expected or "more"))
        return self.tokens.pop(0)

    def sum(self) -> Any:
        result = self.product()
        while self.peek() in ("+", "-"):
            operator = self.take()[1]
            right = self.product()
            result = result + right if operator == "+" else result - right
        return result

    def product(self) -> Any:
        result = self.call_chain()
        while self.peek() in ("*", "/"):
            operator = self.take()[1]
            right = self.call_chain()
            # Ruby's Integer#/ floors; the fixtures divide only integers.
            result = result * right if operator == "*" else result // right
        return result

    def call_chain(self) -> Any:
        result = self.primary()
        while self.peek() == ".":
            self.take(".")
            method = self.take()[1]
            arguments = self.arguments() if self.peek() == "(" else []
            result = self.call(result, method, arguments)
        return result

    def arguments(self) -> list[Any]:
        self.take("(")
        values = [self.sum()]
        while self.peek() == ",":
            self.take(",")
            values.append(self.sum())
        self.take(")")
        return values

    def primary(self) -> Any:
        kind, text = self.take()
        if kind == "number":
            return float(text) if "." in text else int(text)
        if kind == "string":
            return json.loads('"%s"' % text[1:-1]) if text[0] == '"' else text[1:-1]
        if kind == "symbol":
            return text
        if text == "(":
            inner = self.sum()
            self.take(")")
            return inner
        if text == "{":
            return self.hash_literal()
        if kind == "name" and text in self.env:
            return self.env[text]
        if kind == "name" and text in ("Digest", "SafeJSON"):
            while self.peek() == "::":
                text += self.take()[1] + self.take()[1]
            return text
        raise self.refuse("unknown %s" % text)

    def hash_literal(self) -> dict[Any, Any]:
        result: dict[Any, Any] = {}
        while self.peek() != "}":
            key = self.sum()
            self.take("=>")
            result[key] = self.sum()
            if self.peek() == ",":
                self.take(",")
        self.take("}")
        return result

    def call(self, receiver: Any, method: str, arguments: list[Any]) -> Any:
        if isinstance(receiver, (int, float)) and method in _UNITS and not arguments:
            return _Duration(_UNITS[method], receiver)
        if isinstance(receiver, _Duration) and method == "ago" and not arguments:
            return receiver.before(self.now)
        if isinstance(receiver, datetime.datetime) and method in ("to_s", "to_fs") and arguments == [":db"]:
            return receiver.strftime("%Y-%m-%d %H:%M:%S")  # Time::DATE_FORMATS[:db], in UTC
        if isinstance(receiver, int) and method == "to_s" and not arguments:
            return str(receiver)
        if isinstance(receiver, str) and method == "rjust" and len(arguments) == 2:
            return receiver.rjust(arguments[0], arguments[1])
        if receiver == "SafeJSON" and method == "dump" and len(arguments) == 1:
            return oj_compat_dump(arguments[0])
        if receiver == "Digest::MD5" and method == "hexdigest" and len(arguments) == 1:
            return hashlib.md5(arguments[0].encode("utf-8")).hexdigest()
        raise self.refuse("%s.%s" % (type(receiver).__name__, method))


def oj_compat_dump(value: Any) -> str:
    """SafeJSON.dump (1.4.3 and 3.2.1 services/api/lib/safe_json.rb: Oj.dump mode :compat):
    compact JSON, non-ASCII text as it is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_ruby_to_s)


def _ruby_to_s(value: Any) -> str:
    # A YAML timestamp inside a Hash: Oj's compat mode writes Time#to_s.
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError("cannot write %r as JSON" % (value,))


# -- rows as Rails' fixture loader makes them -------------------------------------------


def identify(label: str) -> int:
    """ActiveRecord::FixtureSet.identify for an integer key: Zlib.crc32(label) % MAX_ID."""
    return zlib.crc32(label.encode("utf-8")) % MAX_ID


@dataclass
class FixtureTable:
    """One fixture file's rows: label -> the columns it gives, before Rails' fill-ins."""

    tag: str
    table: str
    rows: dict[str, dict[str, Any]]

    def uuid(self, label: str) -> str:
        return self.rows[label]["uuid"]


def read_table(source: FixtureSource, tag: str, table: str, now: datetime.datetime) -> FixtureTable:
    try:
        document = yaml.safe_load(render_erb(source.text(tag, table), now))
    except (FixtureError, yaml.YAMLError) as error:
        raise FixtureError("%s: %s" % (source.where(tag, table), error)) from error
    document = {label: row for label, row in (document or {}).items() if label not in ("DEFAULTS", "_fixture")}
    return FixtureTable(tag, table, {str(label): dict(row or {}) for label, row in document.items()})


def rails_row(fixtures: FixtureTable, label: str, now: datetime.datetime, columns: Mapping[str, str]) -> dict[str, Any]:
    """The row FixtureSet#table_rows makes of a fixture (Rails 5.0 fixtures.rb): timestamps
    (those of the table's columns), $LABEL, the id and belongs_to labels resolved."""
    given = fixtures.rows[label].items()
    row = {key: value.replace("$LABEL", label) if isinstance(value, str) else value for key, value in given}
    for column in TIMESTAMP_COLUMNS:
        if column in columns:
            row.setdefault(column, now)
    row.setdefault("id", identify(label))
    for association, foreign_key in BELONGS_TO.get(fixtures.tag, {}).get(fixtures.table, {}).items():
        if association in row:
            row[foreign_key] = identify(str(row.pop(association)))
    return row


def stored_value(value: Any, column_type: str, kind: type | None, serialization: str) -> Any:
    """A value as it lands in its column (see the module docstring)."""
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        # A time with its zone (containers.yml's modified_at at 3.2.1): Rails writes UTC
        # (default_timezone :utc) into `timestamp without time zone`.
        return value.astimezone(datetime.UTC).replace(tzinfo=None)
    if not isinstance(value, (dict, list)):
        return value
    if column_type == "jsonb":
        return Jsonb(value)
    if serialization == "model" and kind is not None:
        if not isinstance(value, kind):
            raise FixtureError("a %s for a column serialized as %s" % (type(value).__name__, kind.__name__))
        return None if value == kind() else oj_compat_dump(value)
    return psych_dump(value)


def psych_dump(value: Any) -> str:
    """YAML.dump as Psych writes a Hash or an Array: a `---` document, block style."""
    return yaml.safe_dump(value, explicit_start=True, default_flow_style=False, sort_keys=False, allow_unicode=True)


def column_types(conn, table: str) -> dict[str, str]:
    query = "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = %s"
    return dict(conn.execute(query, (table,)).fetchall())


def insert_table(conn, fixtures: FixtureTable, now: datetime.datetime, serialization: str) -> int:
    """Inserts every row of `fixtures`; returns how many."""
    if serialization not in SERIALIZATIONS:
        raise ValueError("serialization is one of %s" % ", ".join(SERIALIZATIONS))
    types = column_types(conn, fixtures.table)
    serialized = SERIALIZED[fixtures.tag].get(fixtures.table, {})
    for label in fixtures.rows:
        row = rails_row(fixtures, label, now, types)
        unknown = sorted(set(row) - set(types))
        if unknown:
            raise FixtureError("%s %s: no column %s" % (fixtures.table, label, ", ".join(unknown)))
        values = [stored_value(row[c], types[c], serialized.get(c), serialization) for c in row]
        statement = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(fixtures.table),
            sql.SQL(", ").join(map(sql.Identifier, row)),
            sql.SQL(", ").join(sql.Placeholder() * len(row)),
        )
        conn.execute(statement, values)
    conn.execute(
        sql.SQL("SELECT setval(pg_get_serial_sequence({}, 'id'), GREATEST(max(id), 1)) FROM {}").format(
            sql.Literal(fixtures.table), sql.Identifier(fixtures.table)
        )
    )
    return len(fixtures.rows)


def load_fixtures(
    conn, source: FixtureSource, tag: str, tables: tuple[str, ...], serialization: str
) -> dict[str, FixtureTable]:
    """Every table of `tables` at `tag` into `conn`'s database, at the database's now (as
    Arvados' tests render and load them together, at one moment); committed."""
    now = conn.execute("SELECT date_trunc('second', now() AT TIME ZONE 'UTC')").fetchone()[0]
    loaded = {table: read_table(source, tag, table, now) for table in tables}
    for fixtures in loaded.values():
        insert_table(conn, fixtures, now, serialization)
    conn.commit()
    return loaded
