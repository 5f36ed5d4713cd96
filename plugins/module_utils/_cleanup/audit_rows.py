# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The properties of an `update` audit row, built by PostgreSQL inside the statement that
changes the row, from the row as it was and as it is (log_update, 1.4.3
services/api/app/models/arvados_model.rb:846-853; log.rb fill_properties).

Built on the server, the rows are never read by Python: building the properties in Python
meant reading both rows as JSON, rebuilding and dumping them, then binding them back as a
text array, about half of a cleanup's time (bench/README.md, issue 40). Only the finished
text comes back, to be bound in binary into the log rows' insert.

The attributes are the row's columns as Arvados' audit rows hold them: timestamps as its API
writes them (1.4.3 config/initializers/time_format.rb: %Y-%m-%dT%H:%M:%S.%NZ), serialized
columns as the objects the model loads (Serializer.load, 1.4.3 services/api/lib/
serializers.rb:34-46: NULL as the empty Hash or Array, JSON text as what it holds). A
serialized column in the YAML Rails wrote before 2017, or in JSON PostgreSQL cannot parse,
is loaded in Python instead (_cleanup.serialized): the statement's `loaded_keys` ("<uuid>
<column>") and `loaded_values` (the JSON of each) give them.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

# The columns Arvados' models serialize, each with the first character of its JSON and the
# empty value NULL loads as: jobs' four as Hash (1.4.3 app/models/job.rb:14-17, the same at
# 1.1.0), a token's scopes as Array (1.4.3 app/models/api_client_authorization.rb:13).
JOB_SERIALIZED: Mapping[str, str] = {
    "components": "{",
    "script_parameters": "{",
    "runtime_constraints": "{",
    "tasks_summary": "{",
}
TOKEN_SERIALIZED: Mapping[str, str] = {"scopes": "["}
EMPTY = {"{": "'{}'::jsonb", "[": "'[]'::jsonb"}


class AuditedTable(NamedTuple):
    """What a table's audit attributes load and reformat: its serialized columns (name ->
    the first character of their JSON) and its timestamp columns, as every schema from
    2017 on has them (a column a row lacks is left out, never added). Arvados writes
    timestamps in its API's form because of their type; to_jsonb writes them as
    '2026-11-30T10:00:00.12'."""

    serialized: Mapping[str, str]
    timestamps: Sequence[str]


JOBS = AuditedTable(
    JOB_SERIALIZED, ("cancelled_at", "created_at", "finished_at", "modified_at", "started_at", "updated_at")
)
TOKENS = AuditedTable(TOKEN_SERIALIZED, ("created_at", "expires_at", "last_used_at", "refreshes_at", "updated_at"))

# The etag in Arvados' form, an MD5 digest in base 36 (1.4.3 lib/kind_and_etag.rb). Arvados
# digests Ruby's inspect of all the attributes (a token's api_token too), which PostgreSQL
# cannot write; this digests the logged attributes' jsonb text, one text for one value, so it
# changes exactly when they do and never depends on a secret. The digest's 128 bits are four
# 32-bit words read as one numeric, cut into five chunks of five base-36 digits each;
# OFFSET 0 keeps each step computed once per row instead of inlined into every digit.
ALPHABET = "'0123456789abcdefghijklmnopqrstuvwxyz'"
CHUNK = 36**5
WORD_WEIGHTS = (2**96, 2**64, 2**32, 1)


def _digest_number(hex_digest: str) -> str:
    words = [
        "('x' || substr(%s, %d, 8))::bit(32)::bigint * %d::numeric" % (hex_digest, 1 + 8 * i, weight)
        for i, weight in enumerate(WORD_WEIGHTS)
    ]
    return " + ".join(words)


def _chunk_digits(chunk: str) -> str:
    return " || ".join(
        "substr(%s, mod(%s / %d, 36)::int + 1, 1)" % (ALPHABET, chunk, 36**power) for power in range(4, -1, -1)
    )


def etag_sql(attributes: str) -> str:
    """SQL of the etag of the jsonb expression `attributes` (evaluated once)."""
    chunks = " || ".join(
        "(SELECT %s FROM (SELECT mod(div(d.n, %d), %d)::bigint AS c OFFSET 0) c)"
        % (_chunk_digits("c.c"), CHUNK**k, CHUNK)
        for k in range(4, -1, -1)
    )
    return (
        "(SELECT COALESCE(NULLIF(ltrim(%s, '0'), ''), '0')"
        " FROM (SELECT %s AS n FROM (SELECT md5((%s)::text) AS h OFFSET 0) h OFFSET 0) d)"
        % (chunks, _digest_number("h.h"), attributes)
    )


def _api_timestamp(value: str) -> str:
    """A timestamp as the API writes it; NULL for a JSON null or a column the row lacks."""
    text = "(%s #>> '{}')" % value
    return "to_jsonb(split_part(%s, '.', 1) || '.' || rpad(split_part(%s, '.', 2), 9, '0') || 'Z')" % (text, text)


def _loaded(value: str, key: str, column: str, first: str) -> str:
    """A serialized column as Serializer.load loads it, or as Python loaded it; NULL for a
    column the row lacks."""
    text = "(%s #>> '{}')" % value
    loaded_key = "%s || ' %s'" % (key, column)
    return (
        "CASE WHEN %s = ANY(%%(loaded_keys)s::text[])"
        " THEN (%%(loaded_values)s::text[])[array_position(%%(loaded_keys)s::text[], %s)]::jsonb"
        " WHEN %s = 'null'::jsonb THEN %s WHEN left(%s, 1) = '%s' THEN %s::jsonb ELSE %s END"
        % (loaded_key, loaded_key, value, EMPTY[first], text, first, text, value)
    )


def attributes_sql(row: str, key: str, table: AuditedTable) -> str:
    """SQL of the jsonb attributes of the row `row` (a jsonb expression, evaluated once) of
    `table` whose uuid is the text expression `key`: its timestamps in the API's form, its
    serialized columns loaded. The changed values are merged over the row in one step; a
    column the row lacks, or a NULL timestamp, has no value to merge (jsonb_strip_nulls),
    so the row keeps it as it is, absent or null."""
    changed = ["'%s', %s" % (column, _api_timestamp("r.r -> '%s'" % column)) for column in table.timestamps]
    changed += [
        "'%s', %s" % (column, _loaded("r.r -> '%s'" % column, key, column, first))
        for column, first in sorted(table.serialized.items())
    ]
    return "(SELECT r.r || jsonb_strip_nulls(jsonb_build_object(%s)) FROM (SELECT %s AS r OFFSET 0) r)" % (
        ", ".join(changed),
        row,
    )


def properties_sql(old_row: str, new_row: str, key: str, table: AuditedTable) -> str:
    """SQL of an `update` row's properties text: the old and new attributes and their etags,
    in the order Arvados' fill_properties writes them (1.4.3 app/models/log.rb)."""
    return (
        "(SELECT json_build_object('old_etag', %s, 'old_attributes', a.old, 'new_etag', %s, 'new_attributes', a.new)::text"
        " FROM (SELECT %s AS old, %s AS new OFFSET 0) a)"
        % (
            etag_sql("a.old"),
            etag_sql("a.new"),
            attributes_sql(old_row, key, table),
            attributes_sql(new_row, key, table),
        )
    )
