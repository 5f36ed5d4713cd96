# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Exceptions raised by the collection's pure code.

Modules turn them into ``module.fail_json(msg=str(error))``; the boot-time
command prints ``str(error)`` as its one-line reason and exits non-zero.
Anything else escaping the pure code is a bug, not an operator error.
"""

from __future__ import annotations


class RecoveryError(Exception):
    """A failure an operator can act on, told in one line.

    The message names what is wrong and, where it helps, how to fix it. It
    is kept on one line because journald and Ansible's ``msg`` show the first
    line prominently and bury the rest.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.splitlines()))


class ConfigError(RecoveryError):
    """Settings are missing, contradictory or unreadable."""


class ThresholdError(RecoveryError):
    """A ``before`` value cannot be turned into an instant."""
