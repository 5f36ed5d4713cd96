# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a cleanup does: CleanupOptions, its option table and checks, and its defaults."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Dict, Iterable, List, Optional

from .._common.errors import RecoveryError
from .._common.option_bounds import MAX_BATCH_SIZE, MAX_PG_TIMEOUT_SECONDS, MAX_SLEEP_SECONDS
from .._common.options import Option, auto_or_bool, check_text, count, seconds, value_text
from .._common.uuids import JOB_UUID_RE
from .before import Before
from .pace import START_SIZE, TARGET_RATE
from .sql import DISPATCH_ATTEMPT_SUMMARY

JOB_STATE_RUNNING = "Running"
JOB_STATE_FAILED = "Failed"
JOB_STATE_QUEUED = "Queued"

# The engine's defaults: CleanupOptions' own, and, through _cleanup.run's option table,
# the module's, the command's and (by a test) the documentation's.
DEFAULT_BATCH_SIZE = 1000
DEFAULT_LOCK_WAIT = 60.0
DEFAULT_ROW_LOCK_WAIT = 10.0
DEFAULT_LIVE = "auto"

# The longest `dispatch` row summary a run writes, in bytes of UTF-8. logs.summary has a
# btree index (index_logs_on_summary, 2017 to today), whose rows PostgreSQL caps at 2704
# bytes (a third of a page, less overhead): a longer summary fails the batch's INSERT, after
# its Slurm jobs were cancelled. 2500 leaves room for the index row's own header.
MAX_SUMMARY_BYTES = 2500

DEFAULT_FAIL_MESSAGE = (
    "This job was left Running when its server went down (reboot or crash); "
    "nothing was watching it any more, so arvados_ops.recovery marked it Failed."
)
DEFAULT_RETRY_MESSAGE = (
    "This job was left Running when its server went down (reboot or crash); "
    "nothing was watching it any more, so arvados_ops.recovery put it back in the queue."
)

# The `dispatch` row's message for a job `retry` failed instead (SQL_RUN_AS).
UNRUNNABLE_NOTE = (
    " It was not put back in the queue: its row names no user to run it as "
    "(modified_by_user_uuid and is_locked_by_uuid are empty or the system user), and a "
    "requeued job runs as that user."
)

# The cleanup's own options, declared once: CleanupOptions checks its values with them and
# _cleanup.run's table, which the module and the command are made from, holds them.
CLEANUP_OPTIONS: Dict[str, Option] = {
    "batch_size": Option(
        "int",
        check=count(MAX_BATCH_SIZE),
        help="jobs per transaction; given, every batch's (default: %d at boot; live, from %d, steered by "
        "the batches' commit and own times)" % (DEFAULT_BATCH_SIZE, START_SIZE),
    ),
    "lock_wait": Option(
        "float",
        DEFAULT_LOCK_WAIT,
        check=seconds(MAX_SLEEP_SECONDS),
        help="seconds to wait for another cleanup run to finish (the advisory lock only: "
        "other locks are --row-lock-wait's)",
    ),
    "row_lock_wait": Option(
        "float",
        DEFAULT_ROW_LOCK_WAIT,
        # Also the batches' lock_timeout.
        check=seconds(MAX_PG_TIMEOUT_SECONDS),
        help="seconds the run may wait in all for locks other sessions hold: jobs another "
        "transaction holds locked are tried again (never waited on while holding other rows) "
        "and those still locked then are reported and left for a rerun; a table held past it "
        "(the listing's ACCESS SHARE behind a migration's ACCESS EXCLUSIVE) stops the run "
        "before any change",
    ),
    "live": Option(
        "raw",
        DEFAULT_LIVE,
        check=auto_or_bool,
        help="whether the API server uses the database during the run: true (keep its "
        "writes fast), false (at boot: full speed), auto (true when other sessions "
        "are connected to the database)",
    ),
    "batch_pause": Option(
        "float",
        check=seconds(MAX_SLEEP_SECONDS),
        help="seconds to pause between batches, to leave the database to other clients; given, "
        "every pause (default: 0 at boot; live, what keeps %g jobs a second, less when other "
        "sessions wait behind the run)" % TARGET_RATE,
    ),
}


class CleanupOptions:
    """What a cleanup does. Validated on creation, before anything is read or written."""

    def __init__(
        self,
        before: Optional[Before] = None,
        uuids: Optional[Iterable[str]] = None,
        retry: bool = False,
        revoke_tokens: bool = True,
        message: Optional[str] = None,
        batch_size: Optional[int] = None,
        lock_wait: float = DEFAULT_LOCK_WAIT,
        check_mode: bool = False,
        diff: bool = False,
        keep_uuids: bool = True,
        row_lock_wait: float = DEFAULT_ROW_LOCK_WAIT,
        full_scan: bool = True,
        live: Any = DEFAULT_LIVE,
        batch_pause: Optional[float] = None,
        audit_logs: bool = True,
    ) -> None:
        self.before = before
        self.uuids: Optional[List[str]] = None if uuids is None else sorted(set(uuids))
        self.retry = bool(retry)
        self.revoke_tokens = bool(revoke_tokens)
        self.message: str = message or (DEFAULT_RETRY_MESSAGE if retry else DEFAULT_FAIL_MESSAGE)
        self.batch_size = batch_size
        self.lock_wait = lock_wait
        self.row_lock_wait = row_lock_wait
        self.full_scan = bool(full_scan)
        # "auto", True or False (auto_or_bool).
        self.live = live
        self.batch_pause = batch_pause
        # Whether the `update` audit rows are written (_cleanup.audit): Arvados' default.
        self.audit_logs = bool(audit_logs)
        self.check_mode = bool(check_mode)
        self.diff = bool(diff)
        self.keep_uuids = bool(keep_uuids or diff)
        self._validate()

    def _validate(self) -> None:
        for name, option in CLEANUP_OPTIONS.items():
            setattr(self, name, option.parse_value(name, getattr(self, name)))
        if not self.message.strip():
            raise RecoveryError("message must not be empty")
        check_summary(self.message, self.retry)
        if self.uuids is not None:
            check_job_uuids(self.uuids)

    @property
    def target_state(self) -> str:
        return JOB_STATE_QUEUED if self.retry else JOB_STATE_FAILED

    @property
    def db_before(self) -> Optional[datetime]:
        """`before` as the statements' `before` parameter (NULL: no `before`)."""
        return None if self.before is None else self.before.to_db_timestamp()


def check_summary(message: str, retry: bool) -> None:
    """Refuse a log message whose longest summary (with `retry`, the note for a job failed
    instead is added to it) is longer than MAX_SUMMARY_BYTES, or that PostgreSQL cannot store."""
    check_text("log_message", message)
    if message.startswith(DISPATCH_ATTEMPT_SUMMARY):
        # The token rule tells crunch-dispatch.rb's rows of a dispatch attempt from a
        # cleanup's by this start (_cleanup.sql.SQL_TOKEN_OTHER_OWNERS).
        raise RecoveryError(
            "option log_message must not start with %r: crunch-dispatch.rb's rows of a dispatch attempt do"
            % DISPATCH_ATTEMPT_SUMMARY
        )
    note = len(UNRUNNABLE_NOTE.encode("utf-8")) if retry else 0
    size = len(message.encode("utf-8"))
    if size + note > MAX_SUMMARY_BYTES:
        raise RecoveryError(
            "option log_message is %d bytes of UTF-8, more than the %d the logs' summary index takes%s"
            % (
                size,
                MAX_SUMMARY_BYTES - note,
                " with retry (which adds a %d-byte note for a job failed instead)" % note if note else "",
            )
        )


def check_job_uuids(uuids: Iterable[Any]) -> None:
    bad = [u for u in uuids if not isinstance(u, str) or not JOB_UUID_RE.match(u)]
    if bad:
        raise RecoveryError(
            "not Arvados job UUIDs (<prefix>-8i9sb-<15 chars>): %s" % ", ".join(value_text(u) for u in bad[:10])
        )
