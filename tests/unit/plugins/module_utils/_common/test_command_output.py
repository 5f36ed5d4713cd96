# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the commands print: messages on stderr, the result as text or JSON, a failure."""

from __future__ import annotations

import io
import json

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import command_output
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.command_output import (
    Reporter,
    failure_result,
    json_text,
    write_json,
    write_text,
)

RESULT = {"changed": True, "counts": {"jobs": 2}, "uuids": ["b", "a"], "msg": "caf\u00e9"}


@pytest.mark.parametrize(
    "journald, level, line", [(False, "error", "prog: no\n"), (True, "error", "<3>no\n"), (True, "info", "<6>no\n")]
)
def test_a_message_is_one_line_named_by_the_program_or_by_its_syslog_priority(journald, level, line):
    stream = io.StringIO()
    Reporter("prog", stream, journald=journald).say(level, "no")
    assert stream.getvalue() == line


def test_journald_is_told_by_its_stream_variable(monkeypatch):
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    assert Reporter("prog", io.StringIO()).journald
    monkeypatch.delenv("JOURNAL_STREAM")
    assert not Reporter("prog", io.StringIO()).journald


def test_quiet_leaves_out_only_the_info_messages():
    stream = io.StringIO()
    reporter = Reporter("prog", stream, journald=False, quiet=True)
    for level in ("info", "warning", "error"):
        reporter.say(level, level)
    assert stream.getvalue() == "prog: warning\nprog: error\n"


def test_a_value_in_a_message_cannot_forge_another_line():
    stream = io.StringIO()
    Reporter("prog", stream, journald=True).say("warning", "zz\n<3>forged \x1b[2J")
    assert stream.getvalue() == "<4>zz\\n<3>forged \\x1b[2J\n"


def test_a_failure_is_what_a_module_returns_when_it_fails():
    assert failure_result("why") == {"changed": False, "failed": True, "msg": "why"}


def test_json_indented_for_a_person_or_on_one_line_keys_sorted_then_a_newline():
    indented = "".join(json_text(RESULT, indent=2))
    assert indented == json.dumps(RESULT, indent=2, sort_keys=True) + "\n"
    assert indented.startswith('{\n  "changed": true,\n  "counts": {\n    "jobs": 2\n  },')
    one_line = "".join(json_text(RESULT))
    assert one_line == json.dumps(RESULT, sort_keys=True) + "\n"
    assert one_line.count("\n") == 1


class _Writes:
    """A stream that keeps each write apart."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)


def test_a_large_result_on_one_line_is_written_in_pieces(monkeypatch):
    monkeypatch.setattr(command_output, "json_pieces", lambda value: iter(["{", '"a": 1', "}"]))
    stream = _Writes()
    write_json({"a": 1}, stream)
    assert stream.writes == ["{", '"a": 1', "}", "\n"]


def test_text_lines_have_their_control_characters_escaped():
    stream = io.StringIO()
    write_text(["jobs failed: 2", "odd\nname\x1b"], stream)
    assert stream.getvalue() == "jobs failed: 2\nodd\\nname\\x1b\n"
