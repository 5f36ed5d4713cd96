# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurm_job_cancel module's engine entry: one call from options to result, shaped like
_cleanup.run and _reconcile.run so that _modules.support runs all three.

Its option table, CANCEL_OPTIONS, is CancelRequest's (_cancel.request), whose checks
are the table's: the module and any other maker of a request get the same ones.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any, Dict, Mapping, Optional

from .._common.options import option_fields, parse
from .._slurm.runner import require_program
from .engine import cancel_jobs
from .request import CANCEL_OPTIONS, CancelRequest

# The options that reach CancelRequest under another name, or not at all.
_REQUEST_FIELD = {"name": "names", "job_id": "job_ids"}
_CLIENT_PATHS = {"squeue_path": "squeue", "scancel_path": "scancel"}


def build_request(params: Mapping[str, Any], check_mode: bool = False) -> CancelRequest:
    """The request the options describe; CancelRequestError names a bad value. The clients'
    paths are left to client_paths, so a bad option is refused before any client is looked for."""
    values = parse(CANCEL_OPTIONS, params)
    # An option left unset leaves its field at the request's default.
    names = [name for name in CANCEL_OPTIONS if name not in _CLIENT_PATHS and values[name] is not None]
    return CancelRequest(check_mode=check_mode, **option_fields(values, names, _REQUEST_FIELD))


def client_paths(params: Mapping[str, Any]) -> Dict[str, str]:
    """squeue_path and scancel_path: the one given, checked, else the program found where
    every module and command finds Slurm's programs (require_program)."""
    return {option: require_program(params.get(option) or program) for option, program in _CLIENT_PATHS.items()}


def run_slurm_job_cancel(
    params: Mapping[str, Any],
    check_mode: bool = False,
    diff: bool = False,
    environ: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """Make the jobs the options name absent; the result as the module returns it.

    Its `messages` are also its `warnings`, and a call that left jobs queued or could not
    reach Slurm has `failed` set.
    """
    request = build_request(params, check_mode)
    paths = client_paths(params)
    request = replace(request, squeue_path=paths["squeue_path"], scancel_path=paths["scancel_path"])
    outcome = cancel_jobs(request, environ=os.environ if environ is None else environ)
    result = outcome.to_dict()
    predicted_diff = result.pop("diff")
    if diff:
        result["diff"] = predicted_diff
    result["warnings"] = list(result["messages"])
    return result
