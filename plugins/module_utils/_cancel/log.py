# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a cancel call tells as it goes: its messages, each Slurm client's latest error,
and the failure no retry can mend that ends it.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

from typing import Dict, List

from .._slurm.runner import Clock
from .request import CancelRequest

# The clients whose latest error the result reports, in the order it names them.
_CLIENTS = ("squeue", "scancel")


class CallLog:
    def __init__(self, request: CancelRequest, clock: Clock) -> None:
        self._request = request
        self._clock = clock
        self.messages: List[str] = []
        self._errors: Dict[str, str] = {program: "" for program in _CLIENTS}
        # Per client, when its next error may be written: a Slurm down for minutes would
        # otherwise write one message per try.
        self._next_error_at: Dict[str, float] = {}
        # A failure no retry can mend (a bad option, a program that is not Slurm's client):
        # the call ends at once with it.
        self.permanent = ""

    def note(self, message: str) -> None:
        self.messages.append(message)

    def failed(self, program: str, error: str, message: str = "") -> None:
        """``program``'s latest run failed with ``error``; ``message``, if any, is written
        unless one of its errors was written less than ``log_interval`` ago."""
        self._errors[program] = error
        if not message:
            return
        now = self._clock.now()
        if now < self._next_error_at.get(program, now):
            return
        self.messages.append(message)
        self._next_error_at[program] = now + self._request.log_interval

    def succeeded(self, program: str) -> None:
        self._errors[program] = ""

    def last_error(self, program: str) -> str:
        return self._errors[program]

    def slurm_error(self) -> str:
        return "; ".join(error for error in self._errors.values() if error)

    def note_permanent(self, reason: str) -> None:
        """End the call at once: a failure no retry can mend, with the settings behind it."""
        if not reason or self.permanent:
            return
        request = self._request
        program = reason.split(" ", 1)[0]
        settings = ["%s_path=%s" % (program, getattr(request, program + "_path", program))]
        if request.clusters:
            settings.append("clusters=%s" % request.clusters)
        self.permanent = "%s (%s); not tried again" % (reason, ", ".join(settings))
