# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the commands print, one way for ``arvados-fail-jobs`` and ``arvados-recovery-watch``.

- their messages on stderr (`Reporter`): under journald with syslog priority prefixes, so
  that ``journalctl -p err`` finds the failures, else after the command's name;
- their result on stdout as text lines (`write_text`) or as JSON (`json_text`,
  `write_json`), indented for a person or on one line;
- a failure in JSON as the module reports one (`failure_result`), so that one parser
  reads the module's and the command's.

Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any, Dict, Iterable, Iterator, Optional

from .errors import shown
from .json_stream import json_pieces

# syslog's priorities, which journald reads from a line's "<N>" prefix.
PRIORITY = {"info": 6, "warning": 4, "error": 3}


class Reporter:
    """A command's messages on stderr, one line each; `quiet` leaves out the info ones."""

    def __init__(
        self, program: str, stream: Optional[IO[str]] = None, journald: Optional[bool] = None, quiet: bool = False
    ) -> None:
        self.program = program
        self.stream = stream or sys.stderr
        self.journald = bool(os.environ.get("JOURNAL_STREAM")) if journald is None else journald
        self.quiet = quiet

    def say(self, level: str, text: str) -> None:
        if self.quiet and level == "info":
            return
        prefix = "<%d>" % PRIORITY[level] if self.journald else "%s: " % self.program
        # A value in the text (a Slurm message, a path) must not forge another line.
        self.stream.write("%s%s\n" % (prefix, shown(text)))
        self.stream.flush()


def failure_result(message: str) -> Dict[str, Any]:
    """What a module returns when it fails, for a command's JSON output."""
    return {"changed": False, "failed": True, "msg": message}


def json_text(result: Any, indent: Optional[int] = None) -> Iterator[str]:
    """`result` as JSON with its keys sorted, then a newline, in pieces: indented by `indent`
    for a person to read, or on one line, in pieces encoded by C (json_pieces: a large
    result is never whole in memory, and json's indenting encoder is pure Python)."""
    if indent is None:
        yield from json_pieces(result)
    else:
        yield json.dumps(result, indent=indent, sort_keys=True)
    yield "\n"


def write_json(result: Any, stream: IO[str], indent: Optional[int] = None) -> None:
    for piece in json_text(result, indent):
        stream.write(piece)


def write_text(lines: Iterable[str], stream: IO[str]) -> None:
    """Each line, its control characters escaped (shown): a value in it must not forge another."""
    stream.write("".join(shown(line) + "\n" for line in lines))
