# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one error family and what every message echoes: `shown` escapes what a terminal
or a log reader would act on, `cut` bounds a long value, a RecoveryError is one line."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import (
    CUT_CHARACTERS,
    MAX_MESSAGE_CHARACTERS,
    BeforeError,
    ConfigError,
    RecoveryError,
    cut,
    shown,
)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("plain text, é and 漢字", "plain text, é and 漢字"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("one\ntwo\rthree", "one\\ntwo\\rthree"),
        ("tab\there", "tab\\there"),
        ("line\u2028separator", "line\\u2028separator"),
        ("right-to-left\u202eoverride", "right-to-left\\u202eoverride"),
        ("lone \udc80 surrogate", "lone \\udc80 surrogate"),
        (42, "42"),
        (None, "None"),
    ],
)
def test_shown_escapes_control_and_format_characters_only(value, expected):
    assert shown(value) == expected


def test_a_value_shown_cannot_forge_a_line():
    forged = "db_host\n<3>arvados-fail-jobs: all good"
    assert "\n" not in shown(forged)


def test_cut_keeps_a_short_value_whole_and_shown():
    assert cut("/etc/arvados/config.yml") == "/etc/arvados/config.yml"
    assert cut("a\nb") == "a\\nb"
    assert cut("x" * CUT_CHARACTERS) == "x" * CUT_CHARACTERS


def test_cut_bounds_a_long_value_and_says_its_length():
    assert cut("x" * 100000) == "x" * CUT_CHARACTERS + "... (100000 characters)"
    assert cut("abcdef", limit=3) == "abc... (6 characters)"
    # The length is the value's own, before escaping.
    assert cut("\n" * 5, limit=2) == "\\n\\n... (5 characters)"


def test_a_recovery_error_is_one_line_with_its_values_escaped():
    error = RecoveryError("cannot read /etc/x:\npermission denied \x1b[2J")
    assert str(error) == "cannot read /etc/x: permission denied \\x1b[2J"


def test_a_recovery_error_message_is_cut_past_its_bound():
    message = str(RecoveryError("y" * (MAX_MESSAGE_CHARACTERS + 10)))
    assert message == "y" * MAX_MESSAGE_CHARACTERS + "... (%d characters)" % (MAX_MESSAGE_CHARACTERS + 10)


def test_the_family():
    # The modules and the commands catch RecoveryError alone: every operator error is one.
    assert issubclass(ConfigError, RecoveryError)
    assert issubclass(BeforeError, RecoveryError)
    assert str(ConfigError("a\nb")) == "a b"
