# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One cleanup run from its options: what the module and the command both call.

The options are named once, in :data:`FAIL_JOBS_OPTIONS` (plus the connection options of
:mod:`arvados_db_config`); the module builds its argument spec from them and the command
its flags. Every option is checked before the database is opened or Slurm is asked.
"""

from __future__ import annotations

import math
import shutil
from typing import NamedTuple, Optional

from .arvados_db_config import CONNECTION_OPTIONS, DatabaseSettings, resolve_database_settings
from .errors import ConfigError, RecoveryError
from .fail_jobs import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_LIVE,
    DEFAULT_LOCK_WAIT,
    DEFAULT_ROW_LOCK_WAIT,
    LIVE_BATCH_PAUSE,
    LIVE_BATCH_SIZE,
    CleanupOptions,
    JobCleaner,
    check_positive_int,
    check_seconds,
)
from .fail_jobs_threshold import parse_before
from .option_bounds import (
    MAX_BATCH_SIZE,
    MAX_CONCURRENT_SCANCEL,
    MAX_PG_TIMEOUT_SECONDS,
    MAX_SCANCEL_PER_SECOND,
    MAX_SLEEP_SECONDS,
    check_max,
    check_text,
    excerpt,
)
from .pg_connect import connect, redact
from .pg_driver import error_text, load_driver, sqlstate_of
from .slurm_cancel import cancel_jobs
from .slurm_cancel_request import CancelRequest
from .slurm_runner import require_program
from .uuids import JOB_INFIX, uuid_pattern

_TRUE_WORDS = ("true", "yes", "on", "1")
_FALSE_WORDS = ("false", "no", "off", "0")

# `help` is for the command's flags; the module documents the same options in DOCUMENTATION.
FAIL_JOBS_OPTIONS = {
    "before": {
        "type": "str",
        "default": None,
        "help": "only jobs started before this: 'reboot' (this host's boot time), "
        "'@<epoch seconds>', ISO 8601, or what date(1) prints",
    },
    "uuids": {
        "type": "list",
        "elements": "str",
        "default": None,
        "help": "only these job UUIDs (repeat the flag for several)",
    },
    "retry": {"type": "bool", "default": False, "help": "put the jobs back in the queue instead of failing them"},
    "revoke_tokens": {"type": "bool", "default": True, "help": "expire the jobs' API tokens (default: yes)"},
    # Not `message`: Ansible reserves that option name for itself.
    "log_message": {"type": "str", "default": None, "help": "the text of the log row written for each job"},
    "batch_size": {
        "type": "int",
        "default": None,
        "max": MAX_BATCH_SIZE,
        "help": "jobs per transaction (default: %d at boot, %d when live)" % (DEFAULT_BATCH_SIZE, LIVE_BATCH_SIZE),
    },
    "lock_wait": {
        "type": "float",
        "default": DEFAULT_LOCK_WAIT,
        "max": MAX_SLEEP_SECONDS,
        "help": "seconds to wait for another cleanup run to finish",
    },
    "row_lock_wait": {
        "type": "float",
        "default": DEFAULT_ROW_LOCK_WAIT,
        # Also the batches' lock_timeout.
        "max": MAX_PG_TIMEOUT_SECONDS,
        "help": "seconds to keep trying jobs another transaction holds locked "
        "(never waiting on them while holding other rows); those still "
        "locked then are reported and left for a rerun",
    },
    "full_scan": {
        "type": "bool",
        "default": False,
        "help": "read the whole jobs table, to also find Running jobs whose "
        "finished_at is set (inconsistent rows the fast path, the index "
        "on finished_at, cannot see)",
    },
    "live": {
        "type": "raw",
        "default": DEFAULT_LIVE,
        "help": "whether the API server uses the database during the run: true (keep its "
        "writes fast), false (at boot: full speed), auto (true when other sessions "
        "are connected to the database)",
    },
    "batch_pause": {
        "type": "float",
        "default": None,
        "max": MAX_SLEEP_SECONDS,
        "help": "seconds to pause between batches, to leave the database to "
        "other clients (default: %g when live, 0 at boot)" % LIVE_BATCH_PAUSE,
    },
    "db_wait": {
        "type": "float",
        "default": 30.0,
        "max": MAX_SLEEP_SECONDS,
        "help": "seconds to keep trying an unreachable database (at boot it may be starting)",
    },
    "cancel_slurm_jobs": {
        "type": "raw",
        "default": "auto",
        "help": "make the jobs' Slurm jobs absent first: auto (when squeue is on this host), true, false",
    },
    "slurm_errors": {
        "type": "str",
        "default": "fail",
        "choices": ["fail", "ignore"],
        "help": "what to do when Slurm cannot be reached: fail (before any database change) or ignore",
    },
    "slurm_timeout": {
        "type": "float",
        "default": 120.0,
        "max": MAX_SLEEP_SECONDS,
        "help": "seconds to wait for one batch's Slurm jobs to leave the queue",
    },
    "slurm_user": {"type": "str", "default": None, "help": "only Slurm jobs of this user (the dispatcher's)"},
    "slurm_max_scancel_per_second": {
        "type": "float",
        "default": 10.0,
        "max": MAX_SCANCEL_PER_SECOND,
        "help": "rate limit of scancel calls",
    },
    "slurm_max_concurrent_scancel": {
        "type": "int",
        "default": 3,
        "max": MAX_CONCURRENT_SCANCEL,
        "help": "scancel processes alive at once",
    },
    "squeue_path": {"type": "path", "default": None, "help": "squeue to run (default: from PATH)"},
    "scancel_path": {"type": "path", "default": None, "help": "scancel to run (default: from PATH)"},
}

ALL_OPTIONS = dict(CONNECTION_OPTIONS)
ALL_OPTIONS.update(FAIL_JOBS_OPTIONS)

# The numbers' ranges, checked here for the module and the command alike, with the
# engine's messages (the Slurm engine's own checks would name its field, not the option);
# the upper bounds are the table's `max` (option_bounds).
SECONDS_OPTIONS = ("lock_wait", "row_lock_wait", "batch_pause", "db_wait")
POSITIVE_OPTIONS = ("slurm_timeout", "slurm_max_scancel_per_second")
COUNT_OPTIONS = ("batch_size", "slurm_max_concurrent_scancel")

JOB_NAME_PATTERN = uuid_pattern(JOB_INFIX)


def with_defaults(params):
    """`params` checked against the option table, typed, and completed with defaults.

    The module's values arrive typed by Ansible; the command's may come from an options
    file, where `retry: "no"` must mean false and `lock_wait: ten` must be refused.
    """
    unknown = sorted(set(params) - set(ALL_OPTIONS))
    if unknown:
        raise ConfigError("unknown option(s): %s" % ", ".join(unknown))
    full = {name: spec.get("default") for name, spec in ALL_OPTIONS.items()}
    for name, value in params.items():
        if value is not None:
            full[name] = typed_option(name, value)
    return full


def typed_option(name, value):
    """`value` as the type the option table gives `name`, or a ConfigError naming both."""
    spec = ALL_OPTIONS[name]
    kind = spec["type"]
    if kind == "bool":
        typed = _as_bool(value)
    elif kind in ("int", "float"):
        typed = _as_number(value, int if kind == "int" else float)
    elif kind == "list":
        typed = [value] if isinstance(value, str) else value
        if not isinstance(typed, (list, tuple)) or not all(isinstance(v, str) for v in typed):
            typed = None
    elif kind in ("str", "path"):
        typed = value if isinstance(value, str) else None
    else:
        typed = value
    if typed is None:
        # The password itself is left out.
        shown_value = "" if spec.get("no_log") else ", got %s" % excerpt(str(value))
        raise ConfigError("option %s must be of type %s%s" % (name, kind, shown_value))
    check_text(name, typed, secret=bool(spec.get("no_log")))
    if spec.get("choices") and typed not in spec["choices"]:
        raise ConfigError("option %s must be one of %s, got %r" % (name, ", ".join(spec["choices"]), typed))
    return _in_range(name, typed)


def _in_range(name, value):
    try:
        if name in SECONDS_OPTIONS or name in POSITIVE_OPTIONS:
            value = check_seconds(name, value, positive=name in POSITIVE_OPTIONS)
        elif name in COUNT_OPTIONS:
            value = check_positive_int(name, value)
    except RecoveryError as error:
        raise ConfigError("option %s" % error) from None
    check_max(name, value, ALL_OPTIONS[name])
    return value


def _as_bool(value):
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in _TRUE_WORDS:
        return True
    if word in _FALSE_WORDS:
        return False
    return None


def _as_number(value, kind):
    if isinstance(value, bool) or (kind is int and isinstance(value, float) and not value.is_integer()):
        return None
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        pass
    # YAML reads 1e23 (no dot) as text: a whole number written so is still a whole number.
    whole = _as_number(value, float) if kind is int and isinstance(value, str) else None
    return int(whole) if whole is not None and math.isfinite(whole) and whole.is_integer() else None


def cancel_slurm_mode(value):
    """'auto', True or False from what a user may write for `cancel_slurm_jobs`."""
    return auto_or_bool("cancel_slurm_jobs", value)


def auto_or_bool(name, value):
    """'auto', True or False from what a user may write for option `name`."""
    if str(value).strip().lower() == "auto":
        return "auto"
    mode = _as_bool(value)
    if mode is None:
        raise ConfigError("%s must be auto, true or false, got %r" % (name, value))
    return mode


class SlurmStep:
    """Makes a batch's Slurm jobs absent through the cancel engine, or refuses the batch."""

    def __init__(self, params, cancel=cancel_jobs):
        self.ignore_errors = params["slurm_errors"] == "ignore"
        self.cancel = cancel
        self.warnings = []
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

    def __call__(self, uuids, check_mode):
        request = CancelRequest(names=tuple(uuids), check_mode=check_mode, **self.request_settings)
        outcome = self.cancel(request).to_dict()
        outcome.pop("diff", None)
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


def slurm_step(params, which=shutil.which):
    """(the Slurm step of this run, or None with the reason Slurm is not asked)."""
    mode = cancel_slurm_mode(params["cancel_slurm_jobs"])
    if mode == "auto" and not (params["squeue_path"] or which("squeue")):
        return None, "cancel_slurm_jobs is auto and squeue is not on this host"
    if not mode:
        return None, "cancel_slurm_jobs is false"
    return SlurmStep(params), None


class RunPlan(NamedTuple):
    """A cleanup checked and resolved, before anything connects."""

    settings: DatabaseSettings
    options: CleanupOptions
    slurm: Optional[SlurmStep]
    # Why Slurm is not asked, when it is not.
    slurm_skipped: Optional[str]
    db_wait: float


def prepare(params, check_mode=False, diff=False, keep_uuids=True, proc_stat_path=None):
    """Every option checked and resolved into a RunPlan, or a ConfigError naming the bad one."""
    params = with_defaults(params)
    settings = resolve_database_settings(params)
    threshold = None
    if params["before"] not in (None, ""):
        threshold = (
            parse_before(params["before"]) if proc_stat_path is None else parse_before(params["before"], proc_stat_path)
        )
    options = CleanupOptions(
        threshold=threshold,
        uuids=params["uuids"],
        retry=params["retry"],
        revoke_tokens=params["revoke_tokens"],
        message=params["log_message"],
        batch_size=params["batch_size"],
        lock_wait=params["lock_wait"],
        row_lock_wait=params["row_lock_wait"],
        full_scan=params["full_scan"],
        live=auto_or_bool("live", params["live"]),
        batch_pause=params["batch_pause"],
        check_mode=check_mode,
        diff=diff,
        keep_uuids=keep_uuids,
    )
    slurm, slurm_skipped = slurm_step(params)
    return RunPlan(settings, options, slurm, slurm_skipped, params["db_wait"])


# SQLSTATE 42501: insufficient_privilege.
SQLSTATE_NO_PRIVILEGE = "42501"


def database_error_message(error, cleaner, user, password):
    """One line: what failed, what the run had done by then, and PostgreSQL's reason."""
    reason = redact(error_text(error), password)
    context = cleaner.failure_context() if cleaner is not None else "nothing was changed"
    if sqlstate_of(error) == SQLSTATE_NO_PRIVILEGE:
        return "the database user %s lacks a privilege the cleanup needs, %s: %s" % (user, context, reason)
    # Every batch committed so far is complete; one under way was rolled back.
    return "database error, %s: %s" % (context, reason)


def run_fail_jobs(params, check_mode=False, diff=False, keep_uuids=True, progress=None, connect_db=connect):
    """Run one cleanup; returns the result dict (with `warnings` and `database`).

    Without `keep_uuids` the result lists stay empty and only `counts` tell how many.
    """
    plan = prepare(params, check_mode, diff, keep_uuids)
    conn_kwargs = plan.settings.as_psycopg_kwargs()
    driver = load_driver()
    conn = connect_db(conn_kwargs, wait=plan.db_wait, driver=driver)
    cleaner = None
    try:
        listing_conn = connect_db(conn_kwargs, wait=plan.db_wait, driver=driver)
        try:
            cleaner = JobCleaner(conn, listing_conn, plan.options, cancel_slurm=plan.slurm, progress=progress)
            result = cleaner.run().to_dict()
        finally:
            listing_conn.close()
    except driver.Error as error:
        raise RecoveryError(
            database_error_message(
                error, cleaner, conn_kwargs.get("user") or "the default user", conn_kwargs.get("password")
            )
        ) from None
    finally:
        conn.close()
    result["database"] = plan.settings.source
    result["warnings"] = list(plan.slurm.warnings) if plan.slurm else []
    if plan.slurm_skipped:
        result["slurm"] = {"skipped": plan.slurm_skipped}
    return result
