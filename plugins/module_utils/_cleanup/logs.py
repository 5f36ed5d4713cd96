# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The `logs` rows a cleanup writes for each job, as Arvados wrote them (SQL_INSERT_LOGS)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple, cast

from .._common.uuids import LOG_INFIX, new_uuid, system_user_uuid
from .._database.driver import Connection
from .options import UNRUNNABLE_NOTE
from .sql import SQL_INSERT_LOGS, BatchJob

# The columns of SQL_INSERT_LOGS that differ from row to row, in its parameters' names.
LOG_ROW_FIELDS = ("owners", "objects", "object_owners", "event_ats", "event_types", "summaries", "properties")

# One row of SQL_INSERT_LOGS, its columns in LOG_ROW_FIELDS' order.
LogRow = Tuple[str, str, Optional[str], Optional[datetime], str, str, str]


class TokenUpdate(NamedTuple):
    """A token SQL_REVOKE_TOKENS expired: its uuid, its user's (the token's owner_uuid), and
    its `update` audit row's properties (_cleanup.audit_rows; None without audit rows)."""

    uuid: str
    owner_uuid: Optional[str]
    audit_properties: Optional[str]


def insert_logs(
    conn: Connection,
    message: str,
    jobs: Sequence[BatchJob],
    unrunnable: Sequence[BatchJob],
    tokens: Sequence[TokenUpdate] = (),
    audit: bool = True,
) -> List[str]:
    """Arvados' rows (SQL_INSERT_LOGS): every `dispatch` row, then, when audit logging is on
    (_cleanup.audit), every job's `update` row, then every expired token's; the new rows'
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
    """The `update` audit row of the job's save (1.4.3 arvados_model.rb log_update): Log#fill_object
    and #update_to (1.4.3 app/models/log.rb) make its owner the acting (system) user, its
    object owner the job's owner, event_at the job's new modified_at; its properties were
    built by the statement that changed the job (_cleanup.audit_rows)."""
    owner = system_user_uuid(job.uuid[:5])
    return (
        owner,
        job.uuid,
        job.owner_uuid,
        job.modified_at,
        "update",
        "update of %s" % job.uuid,
        cast(str, job.audit_properties),
    )


def token_update_log_row(token: TokenUpdate) -> LogRow:
    """The `update` audit row of crunch-dispatch.rb's `update_attributes expires_at:
    Time.now` (1.4.3 crunch_dispatch.rb:730, as the system user, :804): Log#fill_object
    and #update_to (1.4.3 app/models/log.rb:33-42, :49-60) make object_owner_uuid the
    token's owner_uuid (its user's uuid), the summary "update of <uuid>" and event_at the
    token's modified_at, which is always nil (api_client_authorization.rb:58-61), so
    set_default_event_at's database time (log.rb:90-92; NULL here, SQL_INSERT_LOGS's now).
    The attributes are logged_attributes: every column but api_token (:81-83)."""
    owner = system_user_uuid(token.uuid[:5])
    return (
        owner,
        token.uuid,
        token.owner_uuid,
        None,
        "update",
        "update of %s" % token.uuid,
        cast(str, token.audit_properties),
    )
