# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurm_job_cancel module's engine entry: its option table and one call from options
to result, shaped like fail_jobs_run and reconcile_run so that module_support runs all three.

The defaults come from CancelRequest's fields (request_defaults): the table only adds what
Ansible needs to know of each option, its type, choices and aliases.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Callable, Dict, Mapping, Optional

from .option_bounds import (
    MAX_CONCURRENT_SCANCEL,
    MAX_JOB_IDS_PER_SCANCEL,
    MAX_SCANCEL_PER_SECOND,
    MAX_SLEEP_SECONDS,
    check_maxima,
)
from .slurm_cancel import cancel_jobs
from .slurm_cancel_request import (
    AFTER_TERM_CHOICES,
    STOP_CHOICES,
    TERM_INTERVAL_BOUNDS,
    CancelRequest,
    request_defaults,
)
from .slurm_runner import require_program

_DEFAULTS = request_defaults()


def _option(option_type: str, request_field: Optional[str] = None, **extra: Any) -> Dict[str, Any]:
    spec = {"type": option_type, "default": _DEFAULTS.get(request_field) if request_field else None}
    spec.update(extra)
    return spec


CANCEL_OPTIONS: Dict[str, Dict[str, Any]] = {
    "name": _option("list", elements="str", aliases=["uuid"]),
    "job_id": _option("list", elements="str"),
    "user": _option("str"),
    "wait": _option("bool", "wait"),
    "grace_period": _option("float", "grace_period", max=MAX_SLEEP_SECONDS),
    "retry_delay": _option("float", "retry_delay", max=MAX_SLEEP_SECONDS),
    "error_retry_delay": _option("float", "error_retry_delay", max=MAX_SLEEP_SECONDS),
    # None: the request works the deadline out from stop and terminate_grace.
    "timeout": _option("float", max=MAX_SLEEP_SECONDS),
    "command_timeout": _option("float", "command_timeout", max=MAX_SLEEP_SECONDS),
    "max_scancel_per_second": _option("float", "max_scancel_per_second", max=MAX_SCANCEL_PER_SECOND),
    "max_concurrent_scancel": _option("int", "max_concurrent_scancel", max=MAX_CONCURRENT_SCANCEL),
    "max_job_ids_per_scancel": _option("int", "max_job_ids_per_scancel", max=MAX_JOB_IDS_PER_SCANCEL),
    "log_interval": _option("float", "log_interval", max=MAX_SLEEP_SECONDS),
    "stop": _option("str", "stop", choices=list(STOP_CHOICES)),
    "after_term": _option("str", "after_term", choices=list(AFTER_TERM_CHOICES)),
    "term_interval": _option("float", "term_interval", max=TERM_INTERVAL_BOUNDS[1]),
    "terminate_grace": _option("float", "terminate_grace", max=MAX_SLEEP_SECONDS),
    "signal": _option("str"),
    "batch": _option("bool", "batch"),
    "clusters": _option("str"),
    "name_pattern": _option("str", "name_pattern"),
    # None: the client found on PATH (find_program).
    "squeue_path": _option("path"),
    "scancel_path": _option("path"),
}

# The options that reach CancelRequest under another name, or not at all.
_REQUEST_FIELD = {"name": "names", "job_id": "job_ids"}
_CLIENT_PATHS = {"squeue_path": "squeue", "scancel_path": "scancel"}


def build_request(params: Mapping[str, Any], check_mode: bool = False) -> CancelRequest:
    """The request the options describe; CancelRequestError names a bad value. The clients'
    paths are left to client_paths, so a bad option is refused before any client is looked for."""
    check_maxima(params, CANCEL_OPTIONS)
    fields = {
        _REQUEST_FIELD.get(name, name): value
        for name, value in params.items()
        if name not in _CLIENT_PATHS and value is not None
    }
    return CancelRequest(check_mode=check_mode, **fields)


def client_paths(params: Mapping[str, Any], find_program: Callable[[str], str]) -> Dict[str, str]:
    """squeue_path and scancel_path: the one given, checked, or the program `find_program` finds."""
    return {
        option: require_program(params[option]) if params.get(option) else find_program(program)
        for option, program in _CLIENT_PATHS.items()
    }


def run_slurm_job_cancel(
    params: Mapping[str, Any],
    check_mode: bool = False,
    diff: bool = False,
    find_program: Callable[[str], str] = require_program,
    environ: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Make the jobs the options name absent; the result as the module returns it.

    `find_program` looks a client up when its path is not given (the module passes Ansible's
    get_bin_path, which also searches the sbin directories). Its `messages` are also its
    `warnings`, and a call that left jobs queued or could not reach Slurm has `failed` set.
    """
    request = build_request(params, check_mode)
    request = replace(request, **client_paths(params, find_program))
    outcome = cancel_jobs(request, environ=os.environ if environ is None else environ)
    result = outcome.to_dict()
    predicted_diff = result.pop("diff")
    if diff:
        result["diff"] = predicted_diff
    result["warnings"] = list(result["messages"])
    return result
