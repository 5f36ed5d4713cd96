# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import signal
import time
import unicodedata

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import (
    DEFAULT_NAME_PATTERN,
    CancelRequest,
    CancelRequestError,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError

JOB = "zzzzz-8i9sb-0123456789abcde"
CONTAINER = "zzzzz-dz642-0123456789abcde"


def test_defaults_are_the_documented_ones():
    request = CancelRequest(names=[JOB])
    assert request.names == (JOB,)
    assert request.name_pattern == DEFAULT_NAME_PATTERN == r"^[0-9a-z]{5}-[0-9a-z]{5}-[0-9a-z]{15}$"
    assert (request.wait, request.grace_period, request.retry_delay, request.error_retry_delay) == (
        True,
        0.0,
        2.0,
        10.0,
    )
    assert (request.timeout, request.max_scancel_per_second, request.max_concurrent_scancel) == (120.0, 10.0, 3)
    assert (request.log_interval, request.signal, request.user, request.clusters) == (30.0, None, None, None)


def test_repeated_names_and_ids_are_kept_once_in_order():
    request = CancelRequest(names=[CONTAINER, JOB, CONTAINER], job_ids=["7", 5, "7"])
    assert request.names == (CONTAINER, JOB)
    assert request.job_ids == ("7", "5")


def test_an_invalid_request_is_a_config_error_so_callers_report_it_like_other_settings():
    with pytest.raises(ConfigError):
        CancelRequest(names=["nope"])


@pytest.mark.parametrize(
    "name",
    [
        "x; rm -rf /",
        "zzzzz-8i9sb-0123456789abcde,zzzzz-8i9sb-0123456789abcdf",
        "zzzzz-8i9sb-0123456789abcde\n",
        "zzzzz-8i9sb-0123456789abcdE",
        "zzzzz-8i9sb-0123456789abcd",
        " zzzzz-8i9sb-0123456789abcde",
        "",
    ],
)
def test_names_off_the_default_pattern_are_refused_and_named(name):
    with pytest.raises(CancelRequestError) as raised:
        CancelRequest(names=[JOB, name])
    assert repr(name) in str(raised.value)


@pytest.mark.parametrize("name", ["a,b", "a b", "a\tb", "a\x00b", "a\x1fb", "a\u00a0b", "a\u2028b", "a\u200bb"])
def test_commas_whitespace_and_control_characters_are_refused_whatever_the_pattern(name):
    with pytest.raises(CancelRequestError) as raised:
        CancelRequest(names=[name], name_pattern=r".+")
    assert "comma, whitespace or a control character" in str(raised.value)
    assert repr(name) in str(raised.value)


def test_every_ascii_character_is_refused_exactly_when_the_unicode_rule_refuses_it():
    # Names in ASCII take a faster check; it must refuse what the per-character rule does.
    for code in range(128):
        char = chr(code)
        refused = char == "," or char.isspace() or unicodedata.category(char) in ("Cc", "Cf")
        name = "a%sb" % char
        if refused:
            with pytest.raises(CancelRequestError, match="comma, whitespace or a control character"):
                CancelRequest(names=[name], name_pattern=r".+")
        else:
            assert CancelRequest(names=[name], name_pattern=r".+").names == (name,)


def test_a_narrower_pattern_selects_one_kind_of_object():
    containers_only = r"^[0-9a-z]{5}-dz642-[0-9a-z]{15}$"
    assert CancelRequest(names=[CONTAINER], name_pattern=containers_only).names == (CONTAINER,)
    with pytest.raises(CancelRequestError, match="does not match name_pattern"):
        CancelRequest(names=[JOB], name_pattern=containers_only)


def test_a_broken_pattern_is_reported_as_such():
    with pytest.raises(CancelRequestError, match="not a valid regular expression"):
        CancelRequest(names=[JOB], name_pattern="([a-z]")


def test_names_must_be_a_list_not_one_string():
    with pytest.raises(CancelRequestError, match="list of strings"):
        CancelRequest(names=JOB)


@pytest.mark.parametrize("job_id", ["1", "123456", "12_3", 42])
def test_job_ids_are_digits_with_an_optional_array_index(job_id):
    assert CancelRequest(job_ids=[job_id]).job_ids == (str(job_id),)


@pytest.mark.parametrize("job_id", ["12a", "-1", "1_", "_1", "1_2_3", "1 2", "\u0661\u0662", "", True, 1.5, "12\n"])
def test_other_job_ids_are_refused_and_named(job_id):
    with pytest.raises(CancelRequestError) as raised:
        CancelRequest(job_ids=[job_id])
    assert repr(job_id) in str(raised.value)


@pytest.mark.parametrize("signal", ["TERM", "SIGTERM", "USR1", "SIGXCPU", "9", "1", "64"])
def test_signals_by_name_or_number(signal):
    assert CancelRequest(names=[JOB], signal=signal).signal == signal


# Slurm 22.05's scancel answers "Unknown job signal: NOTASIG" (and RTMIN+3, 0) only once it
# runs, after the jobs were listed; the request refuses them before any command.
@pytest.mark.parametrize(
    "signal", ["NOTASIG", "SIGNOTASIG", "RTMIN+3", "SIGRTMIN", "WINCH", "term", "TERM KILL", "--batch", "0", "65", "123",
               "\u0661", "", 15]
)  # fmt: skip
def test_signals_slurm_does_not_know_are_refused_by_name(signal):
    with pytest.raises(CancelRequestError) as raised:
        CancelRequest(names=[JOB], signal=signal)
    assert str(raised.value).startswith("signal %r is not a signal Slurm knows: give one of HUP, INT," % (signal,))
    assert "XCPU (with or without SIG), or a number from 1 to 64" in str(raised.value)


def test_batch_needs_a_signal():
    with pytest.raises(CancelRequestError, match="batch needs signal"):
        CancelRequest(names=[JOB], batch=True)
    assert CancelRequest(names=[JOB], batch=True, signal="TERM").batch


@pytest.mark.parametrize(
    "option, value",
    [
        ("timeout", 0),
        ("timeout", -1),
        ("timeout", float("nan")),
        ("timeout", float("inf")),
        ("timeout", True),
        ("timeout", "10"),
        ("grace_period", -0.5),
        ("retry_delay", -1),
        ("max_scancel_per_second", 0),
        ("command_timeout", 0),
        ("max_concurrent_scancel", 0),
        ("max_concurrent_scancel", 2.5),
        ("max_job_ids_per_scancel", 0),
        ("wait", "yes"),
        ("user", "a b"),
        ("user", ""),
        ("clusters", "a;b"),
        ("squeue_path", ""),
        ("scancel_path", "/bin/scancel\n"),
    ],
)
def test_bad_option_values_are_refused_and_named(option, value):
    with pytest.raises(CancelRequestError) as raised:
        CancelRequest(names=[JOB], **{option: value})
    assert option in str(raised.value)


def test_zero_waits_are_allowed_and_numbers_become_floats():
    request = CancelRequest(names=[JOB], grace_period=0, retry_delay=0, log_interval=0, timeout=5)
    assert (request.grace_period, request.retry_delay, request.log_interval, request.timeout) == (0.0, 0.0, 0.0, 5.0)
    assert isinstance(request.timeout, float)


def test_paths_may_hold_spaces_and_clusters_a_list():
    request = CancelRequest(names=[JOB], squeue_path="/opt/slurm 22/bin/squeue", clusters="east,west")
    assert request.squeue_path == "/opt/slurm 22/bin/squeue"
    assert request.clusters == "east,west"


# -- a pattern cannot run past timeout (issue 34, Low 9) --------------------------------


def test_a_pattern_that_backtracks_without_end_is_refused_at_timeout():
    def mine(_signum, _frame):
        raise AssertionError("the caller's handler must not fire")

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        began = time.monotonic()
        with pytest.raises(CancelRequestError) as raised:
            CancelRequest(names=("a" * 40 + "b",), name_pattern="(a+)+$", timeout=0.3)
        assert 0.3 <= time.monotonic() - began < 5
        assert str(raised.value).startswith(
            "name_pattern '(a+)+$' took longer than timeout 0.3 s to match the job name 'aaaa"
        )
        # The caller's handler is back, and no timer is left running.
        assert signal.getsignal(signal.SIGALRM) is mine
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_names_are_still_matched_in_full_within_the_bound():
    with pytest.raises(CancelRequestError, match="does not match name_pattern"):
        CancelRequest(names=("zzzzz-dz642-0123456789abcde", "zzzzz-dz642-x"), timeout=1)
    assert CancelRequest(names=("a" * 40,), name_pattern="(a+)+$", timeout=1).names == ("a" * 40,)
