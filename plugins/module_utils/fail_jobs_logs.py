# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The `logs` rows a cleanup writes for each job, as Arvados wrote them (SQL_INSERT_LOGS)."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, cast

from .fail_jobs_options import UNRUNNABLE_NOTE
from .fail_jobs_sql import SQL_INSERT_LOGS, BatchJob
from .pg_driver import Connection
from .uuids import LOG_INFIX, new_uuid, system_user_uuid

# The columns of SQL_INSERT_LOGS that differ from row to row, in its parameters' names.
LOG_ROW_FIELDS = ("owners", "objects", "object_owners", "event_ats", "event_types", "summaries", "properties")

# The columns Arvados' models serialize, each with the class it loads: jobs' four as Hash
# (1.4.3 app/models/job.rb:14-17, the same at 1.1.0), a token's scopes as Array (1.4.3
# app/models/api_client_authorization.rb:13). The audit row holds them as objects, not as
# their JSON text, and a NULL as the empty object the serializer loads it as
# (Serializer.load, 1.4.3 services/api/lib/serializers.rb:38-39: `object_class.new()`).
JOB_SERIALIZED: Dict[str, type] = {
    "components": dict,
    "script_parameters": dict,
    "runtime_constraints": dict,
    "tasks_summary": dict,
}
TOKEN_SERIALIZED: Dict[str, type] = {"scopes": list}
# ApiClientAuthorization#logged_attributes (1.4.3 app/models/api_client_authorization.rb:81-83):
# SQL_REVOKE_TOKENS never returns it; dropped here again all the same.
TOKEN_UNLOGGED = ("api_token",)
SERIALIZED_JOB_COLUMNS = tuple(JOB_SERIALIZED)

# One row of SQL_INSERT_LOGS, its columns in LOG_ROW_FIELDS' order.
LogRow = Tuple[str, str, Optional[str], Optional[datetime], str, str, str]


class TokenUpdate(NamedTuple):
    """A token SQL_REVOKE_TOKENS expired: its uuid, its user's (the token's owner_uuid), and
    the row before and after, without api_token."""

    uuid: str
    owner_uuid: Optional[str]
    old_row: Dict[str, Any]
    new_row: Dict[str, Any]


def insert_logs(
    conn: Connection,
    message: str,
    jobs: Sequence[BatchJob],
    unrunnable: Sequence[BatchJob],
    tokens: Sequence[TokenUpdate] = (),
    audit: bool = True,
) -> List[str]:
    """Arvados' rows (SQL_INSERT_LOGS): every `dispatch` row, then, when audit logging is on
    (fail_jobs_audit), every job's `update` row, then every expired token's; the new rows'
    uuids. The `dispatch` row is no audit row (crunch_dispatch.rb fail_job saves it itself)."""
    dispatch = [(job, message) for job in jobs] + [(job, message + UNRUNNABLE_NOTE) for job in unrunnable]
    rows = [dispatch_log_row(job, text) for job, text in dispatch]
    if audit:
        rows += [update_log_row(job) for job, _text in dispatch]
        rows += [token_update_log_row(token) for token in tokens]
    columns = list(zip(*rows))
    params: Dict[str, List[Any]] = dict(zip(LOG_ROW_FIELDS, (list(column) for column in columns)))
    params["system_users"] = [system_user_uuid(object_uuid[:5]) for object_uuid in params["objects"]]
    params["log_uuids"] = [new_uuid(object_uuid[:5], LOG_INFIX) for object_uuid in params["objects"]]
    return [row[0] for row in conn.execute(SQL_INSERT_LOGS, params)]


def dispatch_log_row(job: BatchJob, message: str) -> LogRow:
    """fail_job's row: owned by the job's owner, no object owner (1.4.3 crunch_dispatch.rb)."""
    return (job.owner_uuid, job.uuid, None, None, "dispatch", message, json.dumps({"text": message}))


def update_log_row(job: BatchJob) -> LogRow:
    """The `update` audit row of the job's save (1.4.3 arvados_model.rb log_update)."""
    # Only the rows an update returned are logged, and those hold both.
    old_row, new_row = cast(Dict[str, Any], job.old_row), cast(Dict[str, Any], job.new_row)
    properties = audit_properties(audit_attributes(old_row), audit_attributes(new_row))
    event_at = db_timestamp(new_row["modified_at"])
    owner = system_user_uuid(job.uuid[:5])
    return (owner, job.uuid, job.owner_uuid, event_at, "update", "update of %s" % job.uuid, properties)


def token_update_log_row(token: TokenUpdate) -> LogRow:
    """The `update` audit row of crunch-dispatch.rb's `update_attributes expires_at:
    Time.now` (1.4.3 crunch_dispatch.rb:730, as the system user, :804): Log#fill_object
    and #update_to (1.4.3 app/models/log.rb:33-42, :49-60) make object_owner_uuid the
    token's owner_uuid (its user's uuid), the summary "update of <uuid>" and event_at the
    token's modified_at, which is always nil (api_client_authorization.rb:58-61), so
    set_default_event_at's database time (log.rb:90-92; NULL here, SQL_INSERT_LOGS's now).
    The attributes are logged_attributes: every column but api_token (:81-83)."""
    old, new = (
        dict((k, v) for k, v in row.items() if k not in TOKEN_UNLOGGED) for row in (token.old_row, token.new_row)
    )
    properties = audit_properties(audit_attributes(old, TOKEN_SERIALIZED), audit_attributes(new, TOKEN_SERIALIZED))
    owner = system_user_uuid(token.uuid[:5])
    return (owner, token.uuid, token.owner_uuid, None, "update", "update of %s" % token.uuid, properties)


def audit_properties(old: Dict[str, Any], new: Dict[str, Any]) -> str:
    """log_update's properties (1.4.3 arvados_model.rb:846-853, log.rb fill_properties)."""
    return json.dumps(
        {"old_etag": audit_etag(old), "old_attributes": old, "new_etag": audit_etag(new), "new_attributes": new}
    )


def audit_attributes(row: Dict[str, Any], serialized: Optional[Dict[str, type]] = None) -> Dict[str, Any]:
    """A row (jsonb, as PostgreSQL writes it) as Arvados' audit rows hold attributes:
    timestamps as its API writes them (1.4.3 config/initializers/time_format.rb:
    %Y-%m-%dT%H:%M:%S.%NZ) and serialized columns (`serialized`, a job's by default) as
    objects, NULL as the empty one. A serialized column still in the YAML Arvados wrote
    before 2017 stays text: this collection reads no YAML."""
    serialized = JOB_SERIALIZED if serialized is None else serialized
    attributes: Dict[str, Any] = {}
    for column, value in sorted(row.items()):
        if column in serialized:
            value = serialized_value(value, serialized[column])
        elif isinstance(value, str) and TIMESTAMP_TEXT_RE.match(value):
            value = api_timestamp(value)
        attributes[column] = value
    return attributes


def serialized_value(value: Any, kind: type) -> Any:
    """Serializer.load (1.4.3 services/api/lib/serializers.rb:34-46): NULL as an empty
    Hash or Array, JSON text as what it holds."""
    if value is None:
        return kind()
    if isinstance(value, str) and value[:1] == ("{" if kind is dict else "["):
        try:
            return json.loads(value)
        except ValueError:
            pass
    return value


# A `timestamp without time zone` as to_jsonb writes it.
TIMESTAMP_TEXT_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?\Z")


def api_timestamp(text: str) -> str:
    """'2026-11-30T10:00:00.12' -> '2026-11-30T10:00:00.120000000Z'."""
    seconds, _dot, fraction = text.partition(".")
    return "%s.%sZ" % (seconds, (fraction + "000000000")[:9])


def db_timestamp(text: str) -> datetime:
    return datetime.strptime(text.partition(".")[0], "%Y-%m-%dT%H:%M:%S").replace(
        microsecond=int((text.partition(".")[2] + "000000")[:6])
    )


def audit_etag(attributes: Dict[str, Any]) -> str:
    """An etag in Arvados' form: an MD5 digest in base 36 (1.4.3 lib/kind_and_etag.rb).
    Arvados digests Ruby's inspect of all the attributes (a token's api_token too), which
    Python cannot write; this digests the logged attributes' JSON, so it changes exactly
    when they do, and never depends on a secret."""
    digest = int(hashlib.md5(json.dumps(attributes, sort_keys=True).encode("utf-8")).hexdigest(), 16)
    text = ""
    while digest:
        digest, digit = divmod(digest, 36)
        text = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + text
    return text or "0"
