# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The serialized texts a batch's audit rows cannot load in SQL, loaded here
(_cleanup.audit_rows takes them as the statements' `loaded_keys`/`loaded_values`).

Arvados' Serializer.load (1.4.3 services/api/lib/serializers.rb:34-46) reads a column as
JSON when it starts with the JSON's first character, and as YAML when it starts with
"---": the form Rails wrote before 2017, and the one Rails' fixture loader writes still.
PostgreSQL reads the JSON; the YAML is read here, as legacy_load does (:18-32): a safe load,
then a text it gives decoded again as JSON. A text neither reads (JSON PostgreSQL rejects,
YAML with a Ruby tag or a time, which Psych.safe_load refuses) stays the text it is, where
Arvados' own model would have raised.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence, Set, Tuple

from .._database.driver import Connection, sqlstate_of
from .sql import SQL_PARSE_JSON, SQL_SERIALIZED_TEXTS

# A value a statement cannot take (22P02: JSON PostgreSQL does not parse).
SQLSTATE_DATA_EXCEPTION_CLASS = "22"
YAML_PATTERNS = ["---%"]
JSON_PATTERNS = ["{%", "[%"]


def legacy_load(text: str) -> str:
    """The JSON of what Serializer.legacy_load makes of a YAML text; the text itself, as a
    JSON string, when it would not load (or PyYAML is not installed)."""
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return json.dumps(text)
    try:
        value: Any = yaml.safe_load(text)
        if isinstance(value, str):
            value = json.loads(value)
        return json.dumps(value, allow_nan=False)
    except (yaml.YAMLError, ValueError, TypeError):
        return json.dumps(text)


def is_data_exception(error: BaseException) -> bool:
    return (sqlstate_of(error) or "").startswith(SQLSTATE_DATA_EXCEPTION_CLASS)


class LoadedTexts:
    """The serialized texts loaded here, each key "<uuid> <column>" with the JSON the audit
    row holds for it."""

    def __init__(self) -> None:
        self.values: Dict[str, str] = {}

    def params(self) -> Dict[str, List[str]]:
        keys = sorted(self.values)
        return {"loaded_keys": keys, "loaded_values": [self.values[key] for key in keys]}

    def load_yaml(self, conn: Connection, uuids: Sequence[str] = (), token_ids: Sequence[int] = ()) -> None:
        """Load the YAML texts of the jobs `uuids` and the tokens `token_ids`."""
        for uuid, column, text in _texts(conn, uuids, token_ids, YAML_PATTERNS):
            self.values.setdefault("%s %s" % (uuid, column), legacy_load(text))

    def keep_unparsable(self, conn: Connection, uuids: Sequence[str], token_ids: Sequence[int]) -> bool:
        """After a statement failed on a value: keep as text each JSON-looking text of
        `uuids` and `token_ids` PostgreSQL does not parse, tried alone under a savepoint;
        the transaction then rolled back. Whether there was one not kept already."""
        found: Set[str] = set()
        for uuid, column, text in _texts(conn, uuids, token_ids, JSON_PATTERNS):
            key = "%s %s" % (uuid, column)
            if key not in self.values and not _parses(conn, text):
                self.values[key] = json.dumps(text)
                found.add(key)
        conn.rollback()
        return bool(found)


def _texts(
    conn: Connection, uuids: Sequence[str], token_ids: Sequence[int], patterns: List[str]
) -> List[Tuple[str, str, str]]:
    if not uuids and not token_ids:
        return []
    params = {"uuids": list(uuids), "token_ids": list(token_ids), "patterns": patterns}
    return conn.execute(SQL_SERIALIZED_TEXTS, params).fetchall()


def _parses(conn: Connection, text: str) -> bool:
    conn.execute("SAVEPOINT serialized_text")
    try:
        conn.execute(SQL_PARSE_JSON, {"text": text})
        parses = True
    except Exception as error:  # pylint: disable=broad-except
        if not is_data_exception(error):
            raise
        parses = False
    conn.execute("ROLLBACK TO SAVEPOINT serialized_text")
    return parses
