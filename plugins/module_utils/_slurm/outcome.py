# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one run of a Slurm client (``squeue``, ``scancel``) came to, read as the engines
report it: its exit, what it said on one line, and whether trying again can help.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .runner import ProcessHandle

# Lines of a client's stderr kept in a message.
MAX_STDERR_LINES = 3
# What squeue and scancel print when they refuse their own command line and exit 1 before
# asking slurmctld anything (src/scancel/opt.c and src/squeue/opts.c, 22.05 to 25.11): an
# option getopt does not know, a bad --signal, a malformed job id ("Invalid job id abc",
# not the "Kill job error on job id N: Invalid job id specified" of a job that left), or
# a --clusters entry slurmdbd does not name (_opt_clusters). Asking again cannot change
# the answer, so the call ends at once instead of retrying until its timeout.
_REFUSED_COMMAND_LINE = re.compile(
    r"unrecognized option|invalid option|option requires an argument|Try \"s(?:cancel|queue) --help\"|"
    r"Unknown job signal|^\S+: error: Invalid job id |invalid entry for --cluster",
    re.MULTILINE,
)


@dataclass
class ClientOutcome:
    program: str
    returncode: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def permanent_reason(self) -> str:
        """Why no retry of this failed command can succeed, or "" when one may.

        Slurm's clients print a reason whenever they exit 1 (slurm_perror, error());
        exiting 1 in silence (/bin/false) is not Slurm's client. Timeouts, "Unable to
        contact slurm controller" and the like pass, and are retried."""
        if self.ok or self.timed_out:
            return ""
        if self.returncode == 1 and not self.stdout.strip() and not self.stderr.strip():
            return "%s exited with status 1 and printed nothing, which Slurm's %s never does" % (
                self.program,
                self.program,
            )
        if _REFUSED_COMMAND_LINE.search(self.stderr):
            return "%s refused its command line: %s" % (self.program, slurm_words(self.stderr))
        return ""

    def error_text(self, time_limit: float) -> str:
        said = slurm_words(self.stderr)
        if self.timed_out:
            reason = "%s did not finish within %g s and was killed" % (self.program, round(time_limit, 1))
            return "%s: %s" % (reason, said) if said else reason
        return said or "%s exited with status %s" % (self.program, self.returncode)


def slurm_words(stderr: str) -> str:
    """A client's stderr on one line, without scancel's notes on its own backoff
    ("_add_delay: adding delay in RPC send"), and only its first few lines: an
    scancel of 500 ids under load prints a line per failed id."""
    lines = [" ".join(line.split()) for line in stderr.splitlines() if line.strip() and "_add_delay:" not in line]
    said = " ".join(lines[:MAX_STDERR_LINES])
    if len(lines) > MAX_STDERR_LINES:
        said += " (and %d more lines)" % (len(lines) - MAX_STDERR_LINES)
    return said


def collect(program: str, handle: ProcessHandle, returncode: Optional[int]) -> ClientOutcome:
    """The outcome of a client whose wait or poll gave ``returncode``: one still running
    (None) has outlived its time and is killed first."""
    timed_out = returncode is None
    if timed_out:
        handle.kill()
    stdout, stderr = handle.output()
    return ClientOutcome(program, returncode, stdout, stderr, timed_out)


def run_to_end(program: str, handle: ProcessHandle, timeout: float) -> ClientOutcome:
    """The outcome of a started client, killed if it outlives ``timeout``."""
    return collect(program, handle, handle.wait(timeout))
