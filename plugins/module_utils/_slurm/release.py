# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which Slurm release a client is, and whether its scancel sends one request per call.

Pure Python (3.8+), standard library only.

From Slurm 24.05 on, ``scancel --ctld`` given job ids but no step ids, ``--sibling`` or
``--interactive`` sends slurmctld one REQUEST_KILL_JOBS for all of them
(``_ctld_signal_jobs`` in src/scancel/scancel.c at slurm-24-05-1-1; the PERFORMANCE section
of doc/man/man1/scancel.1 at 24.05, 24.11, 25.05 and 25.11). Every other form, and
``--ctld`` before 24.05 (22.05 takes the flag but only routes each job's signal through
slurmctld), reads the whole queue and sends one REQUEST_KILL_JOB per job, ten at a time.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

# ``scancel --version`` prints PACKAGE_NAME and the version: "slurm 24.05.1" from SchedMD's
# tarball, "slurm-wlm 22.05.8" from Debian's packages (checked on Debian 12's 22.05.8).
_VERSION_LINE = re.compile(r"^\s*slurm(?:-[a-z]+)*\s+([0-9]+)\.([0-9]+)(?:\.[0-9]+)?\b", re.ASCII | re.MULTILINE)

# The first release whose scancel --ctld sends one request for all the jobs it names.
ONE_REQUEST_SINCE = (24, 5)

# How a stop reaches slurmctld (option ``ctld``):
#   auto    scancel --ctld where the client is 24.05 or later (from ``scancel --version``,
#           asked once per run), today's per-job requests otherwise;
#   always  scancel --ctld whatever the release (on 23.11 and older it still sends one
#           request per job, through slurmctld);
#   never   never --ctld: one request per job, as before 24.05.
CTLD_AUTO = "auto"
CTLD_ALWAYS = "always"
CTLD_NEVER = "never"
CTLD_CHOICES = (CTLD_AUTO, CTLD_ALWAYS, CTLD_NEVER)


def parse_slurm_version(text: str) -> Optional[Tuple[int, int]]:
    """(major, minor) of what ``scancel --version`` printed, or None if it is not a version."""
    match = _VERSION_LINE.search(text)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def sends_one_request(version: Optional[Tuple[int, int]]) -> bool:
    """Whether scancel --ctld of this release sends one request for all its job ids."""
    return version is not None and version >= ONE_REQUEST_SINCE


def scancel_version_command(scancel: str) -> List[str]:
    return [scancel, "--version"]
