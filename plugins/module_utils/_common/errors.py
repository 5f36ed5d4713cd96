# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Exceptions raised by the collection's pure code.

Modules turn them into ``module.fail_json(msg=str(error))``; the boot-time
command prints ``str(error)`` as its one-line reason and exits non-zero.
Anything else escaping the pure code is a bug, not an operator error.

Every value a message, a progress line or a warning echoes goes through `shown` (and
every RecoveryError's message through it again): a control character in a value (an
escape sequence, a newline, a carriage return) is written as its escape, never raw, so
a value cannot forge a line of stderr, of the journal or of Ansible's output. A value
that may be long (a path, a name, a setting) is echoed through `cut`: its first
CUT_CHARACTERS characters and its length, never 100,000 characters of it.
"""

from __future__ import annotations

import unicodedata

# Control and format characters, the line and paragraph separators (what a terminal or a
# log reader acts on instead of showing) and lone surrogates (which no output can encode).
_UNSHOWN_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")
# How much of a path or another long value a message echoes; real paths and names fit.
CUT_CHARACTERS = 200
# The longest message a RecoveryError keeps: a net under every echo `cut` missed.
MAX_MESSAGE_CHARACTERS = 4000


def shown(value: object) -> str:
    """`value` as text to echo: each control character as its escape (ESC as \\x1b, a
    newline as \\n), everything else as it is."""
    text = value if isinstance(value, str) else str(value)
    return "".join(_escaped(char) for char in text)


def cut(value: object, limit: int = CUT_CHARACTERS) -> str:
    """`value` as `shown` writes it, cut after `limit` characters with its length said:
    ``/tmp/aaaa... (100000 characters)``."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return shown(text)
    return "%s... (%d characters)" % (shown(text[:limit]), len(text))


def _escaped(char: str) -> str:
    if unicodedata.category(char) in _UNSHOWN_CATEGORIES:
        return char.encode("unicode_escape").decode("ascii")
    return char


class RecoveryError(Exception):
    """A failure an operator can act on, told in one line.

    The message names what is wrong and, where it helps, how to fix it. It
    is kept on one line because journald and Ansible's ``msg`` show the first
    line prominently and bury the rest. The lines of the message's own text are
    joined with spaces; a control character left over (a value's) is escaped; past
    MAX_MESSAGE_CHARACTERS it is cut, its length said.
    """

    def __init__(self, message: str) -> None:
        super().__init__(cut(" ".join(message.splitlines()), MAX_MESSAGE_CHARACTERS))


class ConfigError(RecoveryError):
    """Settings are missing, contradictory or unreadable."""


class BeforeError(RecoveryError):
    """A ``before`` value cannot be turned into an instant."""
