# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The SQL that builds an `update` audit row's properties, read without a server: the etag's
arithmetic done in Python with the numbers the SQL holds, and what the attributes and the
properties take from the rows. PostgreSQL runs it in tests/integration/
test_fail_jobs_audit_rows.py, against rows Arvados' own code wrote."""

from __future__ import annotations

import hashlib
import re

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.audit_rows import (
    EMPTY,
    JOBS,
    TOKENS,
    attributes_sql,
    etag_sql,
    properties_sql,
)

BASE_36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def base_36(number):
    """Arvados' etag of a digest: its number in base 36 (1.4.3 lib/kind_and_etag.rb)."""
    digits = ""
    while True:
        number, digit = divmod(number, 36)
        digits = BASE_36[digit] + digits
        if not number:
            return digits


def etag_as_the_sql_computes_it(sql, hex_digest):
    """The etag `sql` (from etag_sql) computes for an md5 of `hex_digest`, step by step with
    the numbers it holds: the digest's words and their weights, then each chunk's divisor and
    modulus, then each digit's divisor (bigint division, as PostgreSQL's / on bigint)."""
    words = re.findall(r"substr\(h\.h, (\d+), 8\)\)::bit\(32\)::bigint \* (\d+)::numeric", sql)
    number = sum(int(hex_digest[int(start) - 1 : int(start) + 7], 16) * int(weight) for start, weight in words)
    chunks = re.findall(r"mod\(div\(d\.n, (\d+)\), (\d+)\)", sql)
    divisors = re.findall(r"mod\(c\.c / (\d+), 36\)", sql)
    (alphabet,) = set(re.findall(r"substr\('(\w+)', mod\(c\.c", sql))
    assert len(divisors) == 5 * len(chunks)
    text = ""
    for index, (divisor, modulus) in enumerate(chunks):
        chunk = number // int(divisor) % int(modulus)
        text += "".join(alphabet[chunk // int(d) % 36] for d in divisors[5 * index : 5 * index + 5])
    return text.lstrip("0") or "0"


@pytest.mark.parametrize(
    "hex_digest",
    [
        hashlib.md5(b'{"uuid": "zzzzz-8i9sb-aaaaaaaaaaaaaaa"}').hexdigest(),
        hashlib.md5(b"").hexdigest(),
        "0" * 32,
        "0" * 31 + "1",
        # The largest digest: 25 digits, every chunk of five full.
        "f" * 32,
        "80000000" + "0" * 24,
    ],
)
def test_an_etag_is_its_md5_in_base_36_as_arvados_writes_it(hex_digest):
    sql = etag_sql("a.old")
    assert etag_as_the_sql_computes_it(sql, hex_digest) == base_36(int(hex_digest, 16))


def test_an_etag_digests_its_attributes_once_as_their_jsonb_text():
    assert etag_sql("a.old").count("a.old") == 1
    assert "md5((a.old)::text)" in etag_sql("a.old")


@pytest.mark.parametrize("table", [JOBS, TOKENS], ids=["jobs", "tokens"])
def test_the_attributes_reformat_every_timestamp_and_load_every_serialized_column(table):
    sql = attributes_sql("to_jsonb(o)", "o.uuid", table)
    # The row is evaluated once; the changed values are merged over it.
    assert sql.count("to_jsonb(o)") == 1 and "r.r || jsonb_strip_nulls(jsonb_build_object(" in sql
    for column in table.timestamps:
        # In the API's form: nanoseconds and a Z.
        assert "'%s', to_jsonb(split_part((r.r -> '%s' #>> '{}'), '.', 1)" % (column, column) in sql
        assert "rpad(split_part((r.r -> '%s' #>> '{}'), '.', 2), 9, '0') || 'Z')" % column in sql
    for column, first in table.serialized.items():
        # Loaded by Python when the statement's parameters say so, else as Serializer.load.
        assert "'%s', CASE WHEN o.uuid || ' %s' = ANY(%%(loaded_keys)s::text[])" % (column, column) in sql
        assert "WHEN r.r -> '%s' = 'null'::jsonb THEN %s" % (column, EMPTY[first]) in sql
        assert "WHEN left((r.r -> '%s' #>> '{}'), 1) = '%s'" % (column, first) in sql
    assert set(re.findall(r"%\((\w+)\)s", sql)) == {"loaded_keys", "loaded_values"}
    assert "%%" not in sql


def test_the_properties_are_in_the_order_fill_properties_writes_them():
    sql = properties_sql("to_jsonb(o)", "to_jsonb(j)", "o.uuid", TOKENS)
    keys = re.findall(r"'((?:old|new)_(?:etag|attributes))'", sql)
    assert keys == ["old_etag", "old_attributes", "new_etag", "new_attributes"]
    assert sql.count("to_jsonb(o)") == sql.count("to_jsonb(j)") == 1
    # The old row's attributes are the old ones, and each etag digests its own.
    assert (
        "'old_etag', %s, 'old_attributes', a.old, 'new_etag', %s, 'new_attributes', a.new)"
        % (
            etag_sql("a.old"),
            etag_sql("a.new"),
        )
        in sql
    )
    assert sql.index("to_jsonb(o)") < sql.index(" AS old,") < sql.index("to_jsonb(j)") < sql.index(" AS new ")
