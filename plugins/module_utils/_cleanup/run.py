# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One cleanup run from its options: what the module and the command both call.

The options are named once, in :data:`FAIL_JOBS_OPTIONS` (plus the connection options of
:mod:`_database.settings`); the module builds its argument spec from them and the command
its flags. Every option is checked before the database is opened or Slurm is asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

from .._cancel.request import (
    CANCEL_OPTIONS,
    DEFAULT_MAX_CONCURRENT_SCANCEL,
    DEFAULT_MAX_SCANCEL_PER_SECOND,
    CancelRequest,
)
from .._common.errors import ConfigError, RecoveryError
from .._common.option_bounds import MAX_SLEEP_SECONDS
from .._common.options import Option, auto_or_bool, option_fields, parse, seconds
from .._common.uuids import JOB_INFIX, uuid_pattern
from .._database.connect import connect, describe_user, redact
from .._database.driver import error_text, load_driver, sqlstate_of
from .._database.settings import CONNECTION_OPTIONS, DEFAULT_DB_WAIT, DatabaseSettings, resolve_database_settings
from .._slurm.runner import SEARCHED, find_program, require_program
from .audit import AuditLogs, audit_logs_setting
from .before import parse_before
from .engine import JobCleaner
from .options import CLEANUP_OPTIONS, CleanupOptions
from .result import CleanupResult

if TYPE_CHECKING:
    from .._cancel.engine import CancelResult

# `help` is for the command's flags; the module documents the same options in DOCUMENTATION.
FAIL_JOBS_OPTIONS = {
    "before": Option(
        "str",
        help="only jobs started before this: 'reboot' (this host's boot time), "
        "'@<epoch seconds>', ISO 8601, or what date(1) prints; not empty, not later than the "
        "database's now() (leave --before out for no threshold)",
    ),
    "uuids": Option("list", elements="str", help="only these job UUIDs (repeat the flag for several)"),
    "retry": Option("bool", False, help="put the jobs back in the queue instead of failing them"),
    "revoke_tokens": Option("bool", True, help="expire the jobs' API tokens (default: yes)"),
    # Not `message`: Ansible reserves that option name for itself.
    "log_message": Option("str", help="the text of the log row written for each job"),
    "batch_size": CLEANUP_OPTIONS["batch_size"],
    "lock_wait": CLEANUP_OPTIONS["lock_wait"],
    "row_lock_wait": CLEANUP_OPTIONS["row_lock_wait"],
    "full_scan": Option(
        "bool",
        True,
        help="read every Running job, as Arvados' own fail_jobs does (default: yes); "
        "--no-full-scan reads only those without finished_at, through its index: faster "
        "on a large cluster, blind to Running jobs whose finished_at is set",
    ),
    "audit_logs": Option(
        "raw",
        "auto",
        check=auto_or_bool,
        help="write the `update` audit rows of the jobs and tokens changed: auto (as the "
        "cluster's AuditLogs in the config.yml read says, Arvados' default, yes, without one), "
        "true, false (as a cluster with AuditLogs.MaxAge 0s and MaxDeleteBatch above 0); "
        "the `dispatch` rows are always written",
    ),
    "live": CLEANUP_OPTIONS["live"],
    "batch_pause": CLEANUP_OPTIONS["batch_pause"],
    "db_wait": Option(
        "float",
        DEFAULT_DB_WAIT,
        check=seconds(MAX_SLEEP_SECONDS),
        help="seconds to keep trying an unreachable database (at boot it may be starting)",
    ),
    "cancel_slurm_jobs": Option(
        "raw",
        "auto",
        check=auto_or_bool,
        help="make the jobs' Slurm jobs absent first: auto (the default: as true, but a host without "
        "squeue is refused with what to set), true, false (this site runs no Slurm, or another step "
        "cancels them)",
    ),
    "slurm_errors": Option(
        "str",
        "fail",
        choices=["fail", "ignore"],
        help="what to do when Slurm cannot be reached: fail (before any database change) or ignore",
    ),
    # The Slurm settings are checked here, by their names in this table: CancelRequest's
    # checks would name its fields (timeout), not the options (slurm_timeout).
    "slurm_timeout": Option(
        "float",
        120.0,
        check=seconds(MAX_SLEEP_SECONDS, above=True),
        help="seconds to wait for one batch's Slurm jobs to leave the queue",
    ),
    "slurm_user": Option("str", help="only Slurm jobs of this user (the dispatcher's)"),
    # CancelRequest's defaults and checks: the cleanup's Slurm step is one request.
    "slurm_max_scancel_per_second": Option(
        "float",
        DEFAULT_MAX_SCANCEL_PER_SECOND,
        check=CANCEL_OPTIONS["max_scancel_per_second"].check,
        help="rate limit of scancel calls",
    ),
    "slurm_max_concurrent_scancel": Option(
        "int",
        DEFAULT_MAX_CONCURRENT_SCANCEL,
        check=CANCEL_OPTIONS["max_concurrent_scancel"].check,
        help="scancel processes alive at once",
    ),
    "squeue_path": Option("path", help="squeue to run (default: found in PATH and the sbin directories)"),
    "scancel_path": Option("path", help="scancel to run (default: found in PATH and the sbin directories)"),
}

ALL_OPTIONS = dict(CONNECTION_OPTIONS)
ALL_OPTIONS.update(FAIL_JOBS_OPTIONS)

JOB_NAME_PATTERN = uuid_pattern(JOB_INFIX)
# The options CleanupOptions takes as parsed, each a field of the same name (log_message
# its message: Ansible reserves `message`); before and audit_logs reach it resolved.
CLEANUP_FIELDS = ("uuids", "retry", "revoke_tokens", "log_message", "full_scan") + tuple(CLEANUP_OPTIONS)


def with_defaults(params: Mapping[str, Any]) -> Dict[str, Any]:
    """`params` checked against the option table, typed, and completed with defaults.

    The module's values arrive typed by Ansible; the command's may come from an options
    file, where `retry: "no"` must mean false and `lock_wait: ten` must be refused.
    """
    return parse(ALL_OPTIONS, params, from_text=True)


def cancel_slurm_mode(value: Any) -> Any:
    """'auto', True or False from what a user may write for `cancel_slurm_jobs`."""
    return auto_or_bool("cancel_slurm_jobs", value)


def cancel_jobs(request: CancelRequest) -> CancelResult:
    """_cancel.engine.cancel_jobs, imported when a batch first asks Slurm: the cancel engine
    is the largest source the command carries, compiled at each start
    (roles/boot_recovery), and a no-op rerun never needs it (issue 40)."""
    from .._cancel.engine import cancel_jobs as cancel  # pylint: disable=import-outside-toplevel

    return cancel(request)


class SlurmStep:
    """Makes a batch's Slurm jobs absent through the cancel engine, or refuses the batch."""

    def __init__(
        self, params: Mapping[str, Any], cancel: Callable[[CancelRequest], CancelResult] = cancel_jobs
    ) -> None:
        self.ignore_errors = params["slurm_errors"] == "ignore"
        self.cancel = cancel
        self.warnings: List[str] = []
        self.request_settings = dict(
            name_pattern=JOB_NAME_PATTERN,
            user=params["slurm_user"],
            timeout=params["slurm_timeout"],
            max_scancel_per_second=params["slurm_max_scancel_per_second"],
            max_concurrent_scancel=params["slurm_max_concurrent_scancel"],
            squeue_path=require_program(params["squeue_path"] or "squeue"),
            scancel_path=require_program(params["scancel_path"] or "scancel"),
        )
        # A request without names checks every Slurm option now, before any work.
        CancelRequest(**self.request_settings)

    def __call__(self, uuids: List[str], check_mode: bool) -> Dict[str, Any]:
        request = CancelRequest(names=tuple(uuids), check_mode=check_mode, **self.request_settings)
        outcome = self.cancel(request).to_dict()
        outcome.pop("diff", None)
        if outcome.get("ctld") is not None:
            # The release scancel named holds for the whole run: later batches do not ask again.
            self.request_settings["scancel_release"] = outcome.get("scancel_version", "")
        if outcome.get("failed"):
            reason = "Slurm jobs of %d job(s) could not be made absent: %s" % (
                len(uuids),
                outcome.get("msg") or outcome.get("slurm_error"),
            )
            if not self.ignore_errors:
                raise RecoveryError(
                    reason + " (nothing of this batch was changed in the "
                    "database; slurm_errors=ignore goes on regardless)"
                )
            self.warnings.append(reason + " (ignored: slurm_errors=ignore)")
            outcome["failed"] = False
        return outcome


# Issue 34: auto without squeue used to skip Slurm and fail the jobs anyway, their Slurm
# jobs running on. Only the operator can say that nothing here needs cancelling.
NO_SQUEUE_MESSAGE = (
    "cancel_slurm_jobs is auto but squeue is not on this host (%s) and squeue_path is not set: "
    "the jobs' Slurm jobs cannot be made absent, so no job is failed or requeued (nothing was read "
    "from the database or changed). Set cancel_slurm_jobs to false when this site runs no Slurm or "
    "another step cancels the jobs' Slurm jobs (as recover_after_reboot.yml does on its "
    "slurm_controllers hosts); or install the Slurm clients here, or set squeue_path and scancel_path" % SEARCHED
)


def slurm_step(
    params: Mapping[str, Any], which: Callable[[str], Optional[str]] = find_program
) -> Tuple[Optional[SlurmStep], Optional[str]]:
    """(the Slurm step of this run, or None with the reason Slurm is not asked); a
    ConfigError when auto finds no squeue to ask."""
    mode = cancel_slurm_mode(params["cancel_slurm_jobs"])
    if not mode:
        return None, "cancel_slurm_jobs is false"
    if mode == "auto" and not (params["squeue_path"] or which("squeue")):
        raise ConfigError(NO_SQUEUE_MESSAGE)
    return SlurmStep(params), None


class RunPlan(NamedTuple):
    """A cleanup checked and resolved, before anything connects."""

    settings: DatabaseSettings
    options: CleanupOptions
    slurm: Optional[SlurmStep]
    # Why Slurm is not asked, when it is not.
    slurm_skipped: Optional[str]
    db_wait: float
    audit_logs: AuditLogs


def prepare(
    params: Mapping[str, Any],
    check_mode: bool = False,
    diff: bool = False,
    keep_uuids: bool = True,
    proc_stat_path: Optional[str] = None,
) -> RunPlan:
    """Every option checked and resolved into a RunPlan, or a ConfigError naming the bad one."""
    params = with_defaults(params)
    settings = resolve_database_settings(params)
    audit_logs = audit_logs_setting(params)
    before = None
    # Only an omitted (None) before means none: '' is refused by parse_before.
    if params["before"] is not None:
        before = (
            parse_before(params["before"]) if proc_stat_path is None else parse_before(params["before"], proc_stat_path)
        )
    options = CleanupOptions(
        before=before,
        audit_logs=audit_logs.written,
        check_mode=check_mode,
        diff=diff,
        keep_uuids=keep_uuids,
        **option_fields(params, CLEANUP_FIELDS, {"log_message": "message"}),
    )
    slurm, slurm_skipped = slurm_step(params)
    return RunPlan(settings, options, slurm, slurm_skipped, params["db_wait"], audit_logs)


# SQLSTATE 42501: insufficient_privilege.
SQLSTATE_NO_PRIVILEGE = "42501"


def database_error_message(
    error: BaseException, cleaner: Optional[JobCleaner], user: str, password: Optional[str]
) -> str:
    """One line: what failed, what the run had done by then, and PostgreSQL's reason."""
    reason = redact(error_text(error), password)
    context = cleaner.failure_context() if cleaner is not None else "nothing was changed"
    if sqlstate_of(error) == SQLSTATE_NO_PRIVILEGE:
        return "the database user %s lacks a privilege the cleanup needs, %s: %s" % (user, context, reason)
    # Every batch committed so far is complete; one under way was rolled back.
    return "database error, %s: %s" % (context, reason)


def run_fail_jobs(
    params: Mapping[str, Any],
    check_mode: bool = False,
    diff: bool = False,
    keep_uuids: bool = True,
    progress: Optional[Callable[[CleanupResult], None]] = None,
    connect_db: Callable[..., Any] = connect,
) -> Dict[str, Any]:
    """Run one cleanup; returns the result dict (with `warnings` and `database`).

    Without `keep_uuids` the result lists stay empty and only `counts` tell how many.
    """
    plan = prepare(params, check_mode, diff, keep_uuids)
    conn_kwargs = plan.settings.as_psycopg_kwargs()
    driver = load_driver()
    conn = connect_db(conn_kwargs, wait=plan.db_wait, driver=driver)
    cleaner = None
    try:
        # A second connection only for a list longer than a page (JobCleaner._running_jobs):
        # a connection is most of a no-op's time (bench/README.md, issue 40).
        cleaner = JobCleaner(
            conn,
            None,
            plan.options,
            cancel_slurm=plan.slurm,
            progress=progress,
            open_listing=lambda: connect_db(conn_kwargs, wait=plan.db_wait, driver=driver),
        )
        try:
            result = cleaner.run().to_dict()
        finally:
            if cleaner.listing_conn is not None:
                cleaner.listing_conn.close()
    except driver.Error as error:
        raise RecoveryError(
            database_error_message(
                error, cleaner, conn_kwargs.get("user") or describe_user(conn_kwargs), conn_kwargs.get("password")
            )
        ) from None
    finally:
        conn.close()
    result["database"] = plan.settings.source
    result["audit_logs"] = plan.audit_logs.to_dict()
    result["warnings"] = list(plan.slurm.warnings) if plan.slurm else []
    if plan.slurm_skipped:
        result["slurm"] = {"skipped": plan.slurm_skipped}
    if result.get("held_by_other_users"):
        result["failed"] = True
        result["msg"] = held_message(result["held_by_other_users"], params.get("slurm_user"), check_mode)
    return result


def held_message(held: List[Mapping[str, str]], slurm_user: Optional[str], check_mode: bool = False) -> str:
    """Why jobs were left Running: Slurm jobs of their name belong to another user than
    slurm_user, which the Slurm step leaves alone."""
    jobs = sorted({job["uuid"] for job in held})
    shown = ", ".join(
        "%s (Slurm job %s of user %s, %s)" % (job["uuid"], job["job_id"], job["user"], job["state"])
        for job in held[:10]
    )
    if len(held) > 10:
        shown += " and %d more" % (len(held) - 10)
    users = ", ".join(sorted({job["user"] for job in held}))
    return (
        "%d job(s) %sleft Running, not failed or requeued: Slurm jobs of their name are queued under "
        "user(s) %s, not slurm_user=%s, and this run cancels only that user's: %s. Set slurm_user to "
        "the user that owns them (or leave it unset, as root), or cancel them, and run again"
        % (len(jobs), "would be " if check_mode else "", users, slurm_user, shown)
    )
