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
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

from .fail_jobs_options import UNRUNNABLE_NOTE
from .fail_jobs_sql import SQL_INSERT_LOGS, BatchJob
from .pg_driver import Connection
from .uuids import LOG_INFIX, new_uuid, system_user_uuid

# The columns of SQL_INSERT_LOGS that differ from row to row, in its parameters' names.
LOG_ROW_FIELDS = ("owners", "objects", "object_owners", "event_ats", "event_types", "summaries", "properties")

# The job columns Arvados' model serializes (1.4.3 app/models/job.rb `serialize ..., Hash`):
# the audit row holds them as objects, not as their JSON text.
SERIALIZED_JOB_COLUMNS = ("components", "script_parameters", "runtime_constraints", "tasks_summary")

# One row of SQL_INSERT_LOGS, its columns in LOG_ROW_FIELDS' order.
LogRow = Tuple[str, str, Optional[str], Optional[datetime], str, str, str]


def insert_logs(conn: Connection, message: str, jobs: Sequence[BatchJob], unrunnable: Sequence[BatchJob]) -> List[str]:
    """Arvados' two rows per job (SQL_INSERT_LOGS): every `dispatch` row, then every
    `update` row; the new rows' uuids."""
    dispatch = [(job, message) for job in jobs] + [(job, message + UNRUNNABLE_NOTE) for job in unrunnable]
    rows = [dispatch_log_row(job, text) for job, text in dispatch]
    rows += [update_log_row(job) for job, _text in dispatch]
    columns = list(zip(*rows))
    params: Dict[str, List[Any]] = dict(zip(LOG_ROW_FIELDS, (list(column) for column in columns)))
    params["system_users"] = [system_user_uuid(job_uuid[:5]) for job_uuid in params["objects"]]
    params["log_uuids"] = [new_uuid(job_uuid[:5], LOG_INFIX) for job_uuid in params["objects"]]
    return [row[0] for row in conn.execute(SQL_INSERT_LOGS, params)]


def dispatch_log_row(job: BatchJob, message: str) -> LogRow:
    """fail_job's row: owned by the job's owner, no object owner (1.4.3 crunch_dispatch.rb)."""
    return (job.owner_uuid, job.uuid, None, None, "dispatch", message, json.dumps({"text": message}))


def update_log_row(job: BatchJob) -> LogRow:
    """The `update` audit row of the job's save (1.4.3 arvados_model.rb log_update)."""
    # Only the rows an update returned are logged, and those hold both.
    old_row, new_row = cast(Dict[str, Any], job.old_row), cast(Dict[str, Any], job.new_row)
    old, new = audit_attributes(old_row), audit_attributes(new_row)
    properties = {
        "old_etag": audit_etag(old),
        "old_attributes": old,
        "new_etag": audit_etag(new),
        "new_attributes": new,
    }
    event_at = db_timestamp(new_row["modified_at"])
    owner = system_user_uuid(job.uuid[:5])
    return (owner, job.uuid, job.owner_uuid, event_at, "update", "update of %s" % job.uuid, json.dumps(properties))


def audit_attributes(row: Dict[str, Any]) -> Dict[str, Any]:
    """A job row (jsonb, as PostgreSQL writes it) as Arvados' audit rows hold attributes:
    timestamps as its API writes them (1.4.3 config/initializers/time_format.rb:
    %Y-%m-%dT%H:%M:%S.%NZ) and serialized columns as objects. A serialized column still
    in the YAML Arvados wrote before 2017 stays text: this collection reads no YAML."""
    attributes: Dict[str, Any] = {}
    for column, value in sorted(row.items()):
        if column in SERIALIZED_JOB_COLUMNS and isinstance(value, str) and value[:1] in ("{", "["):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        elif isinstance(value, str) and TIMESTAMP_TEXT_RE.match(value):
            value = api_timestamp(value)
        attributes[column] = value
    return attributes


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
    Arvados digests Ruby's inspect of the attributes, which Python cannot write; this
    digests their JSON, so it changes exactly when the attributes do."""
    digest = int(hashlib.md5(json.dumps(attributes, sort_keys=True).encode("utf-8")).hexdigest(), 16)
    text = ""
    while digest:
        digest, digit = divmod(digest, 36)
        text = "0123456789abcdefghijklmnopqrstuvwxyz"[digit] + text
    return text or "0"
