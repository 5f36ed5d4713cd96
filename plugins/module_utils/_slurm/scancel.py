# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``scancel``: the command line of each kind of request, how long one may take, and
what its output says of each job.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

# What one scancel asks of Slurm; one kind per call.
CANCEL = "cancel"  # scancel ID...
REMOVE_PENDING = "remove_pending"  # scancel --state=PENDING ID...
TERMINATE = "terminate"  # scancel --signal=TERM --batch ID...
SIGNAL = "signal"  # scancel --signal=SIGNAL [--batch] ID...
# The order scancels of different kinds due at once start in.
KIND_ORDER = (REMOVE_PENDING, CANCEL, TERMINATE, SIGNAL)

# scancel sends one REQUEST_KILL_JOB per job id, at most this many at once
# (MAX_THREADS in src/scancel/scancel.c, 10 from Slurm 22.05 to 25.11; only
# --ctld from 24.05 on sends one request for all). Under load each
# request may take up to MessageTimeout, and scancel adds up to 1 s before
# each once slurmctld answers slowly.
SCANCEL_REQUESTS_AT_ONCE = 10

# What scancel prints for each id Slurm refuses to this user (ESLURM_ACCESS_DENIED, whose
# number 2002 is also its exit status modulo 256, 210): sending the same request again
# would only be refused again.
ACCESS_DENIED = "Access/permission denied"
_DENIED_JOB = re.compile(r"job id ([0-9]+(?:_[0-9]+)?): " + re.escape(ACCESS_DENIED))
# What scancel --ctld prints for each job Slurm did not signal (_ctld_signal_jobs in
# src/scancel/scancel.c, 24.05 to 25.11; it exits 0 all the same). Unknown and finished
# jobs are not printed.
_KILL_JOB_ERROR = re.compile(r"Kill job error on job id ([0-9]+(?:_[0-9]+)?): (.*)$", re.MULTILINE)
# slurmctld's word for a job --state=PENDING left alone because it is no longer pending
# (_signal_job_matches_filter in src/slurmctld/job_mgr.c, 24.05 to 25.11): what the
# per-job path does silently, no error.
_STATE_FILTER_MISMATCH = "!= filter state"


def scancel_command(
    scancel: str,
    job_ids: Sequence[str],
    clusters: Optional[str],
    signal: Optional[str],
    batch: bool,
    only_pending: bool = False,
    ctld: bool = False,
) -> List[str]:
    """``only_pending``: a job that started since it was listed is left alone (scancel
    exits 0 for it), as crunch-dispatch-slurm's ``--state=pending`` does. ``ctld``: one
    request to slurmctld for all the ids, from Slurm 24.05 on (_slurm.release)."""
    argv = [scancel]
    if ctld:
        argv.append("--ctld")
    if clusters:
        argv.append("--clusters=" + clusters)
    if only_pending:
        argv.append("--state=PENDING")
    if signal:
        argv.append("--signal=" + signal)
    if batch:
        argv.append("--batch")
    argv.extend(job_ids)
    return argv


def scancel_argv(
    scancel: str,
    kind: str,
    job_ids: Sequence[str],
    clusters: Optional[str],
    ctld: bool,
    signal: Optional[str] = None,
    batch: bool = False,
) -> List[str]:
    """The scancel of one kind for these ids; ``signal`` and ``batch`` are SIGNAL's."""
    if kind == SIGNAL:
        return scancel_command(scancel, job_ids, clusters, signal, batch, ctld=ctld)
    if kind == TERMINATE:
        return scancel_command(scancel, job_ids, clusters, "TERM", True, ctld=ctld)
    return scancel_command(scancel, job_ids, clusters, None, False, only_pending=kind == REMOVE_PENDING, ctld=ctld)


def scancel_time_limit(job_count: int, command_timeout: float, time_left: float, one_request: bool) -> float:
    """Seconds an scancel of this many ids may run before it is killed: one
    ``command_timeout`` per SCANCEL_REQUESTS_AT_ONCE ids, but not beyond ``time_left``
    (the call's), nor less than one; one request (--ctld from 24.05 on) is one."""
    if one_request:
        return command_timeout
    rounds_of_requests = math.ceil(job_count / SCANCEL_REQUESTS_AT_ONCE)
    return max(command_timeout, min(command_timeout * rounds_of_requests, time_left))


def read_scancel(ok: bool, stderr: str, job_ids: Sequence[str], one_request: bool) -> Tuple[Dict[str, str], Set[str]]:
    """(job id -> what Slurm said, for the ids an scancel --ctld that exited 0 says Slurm did
    not take; the ids Slurm refused to this user) of an scancel that ended."""
    refused = _refused_by_ctld(stderr, job_ids) if ok and one_request else {}
    denied = set() if ok else _denied_job_ids(stderr, job_ids)
    denied.update(job_id for job_id, said in refused.items() if ACCESS_DENIED in said)
    return refused, denied


def _denied_job_ids(stderr: str, job_ids: Sequence[str]) -> Set[str]:
    """The ids of an scancel's that Slurm refused to this user; all of them if it says so
    without naming any."""
    named = set(_DENIED_JOB.findall(stderr)).intersection(job_ids)
    if not named and ACCESS_DENIED in stderr:
        return set(job_ids)
    return named


def _refused_by_ctld(stderr: str, job_ids: Sequence[str]) -> Dict[str, str]:
    """job id -> what Slurm said, for the ids of an scancel --ctld that Slurm did not take."""
    wanted = set(job_ids)
    return {
        job_id: said.strip()
        for job_id, said in _KILL_JOB_ERROR.findall(stderr)
        if job_id in wanted and _STATE_FILTER_MISMATCH not in said
    }
