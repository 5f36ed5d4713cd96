# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real process runner, with the Python interpreter standing in for Slurm's clients."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import runner as slurm_runner
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.runner import (
    CommandNotFoundError,
    SubprocessRunner,
    SystemClock,
)


def python(code: str):
    return [sys.executable, "-c", code]


@pytest.fixture(params=["pidfd", "polled"], autouse=True)
def wait_path(request, monkeypatch):
    """Each test on both ways of waiting: a pidfd where Python and Linux have it, polling else."""
    if request.param == "polled":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no os.pidfd_open (Python 3.9 or later on Linux)")
    return request.param


def test_a_timed_out_wait_does_not_wait_again_by_polling(wait_path, monkeypatch):
    polled = []
    original = slurm_runner._PopenHandle._polled_wait
    monkeypatch.setattr(
        slurm_runner._PopenHandle,
        "_polled_wait",
        lambda self, timeout: polled.append(timeout) or original(self, timeout),
    )
    handle = SubprocessRunner().start(python("import time; time.sleep(60)"), {})
    assert handle.wait(0.05) is None
    handle.kill()
    assert polled == ([] if wait_path == "pidfd" else [0.05])


def test_output_exit_code_and_exact_environment():
    handle = SubprocessRunner().start(
        python("import os, sys; print(sorted(os.environ.items())); sys.stderr.write('oops'); sys.exit(3)"),
        {"LC_ALL": "C", "ONLY": "this"},
    )
    assert handle.wait(10) == 3
    stdout, stderr = handle.output()
    assert stdout.strip().endswith("('LC_ALL', 'C'), ('ONLY', 'this')]")
    assert stderr == "oops"


def test_stdin_is_empty_so_a_prompt_cannot_block():
    handle = SubprocessRunner().start(python("import sys; print(repr(sys.stdin.read()))"), {})
    assert handle.wait(10) == 0
    assert handle.output()[0].strip() == "''"


def test_more_output_than_a_pipe_holds_does_not_block_a_polled_command():
    handle = SubprocessRunner().start(python("import sys; sys.stderr.write('e' * 1000000)"), {})
    assert handle.wait(10) == 0
    assert len(handle.output()[1]) == 1000000


def test_a_command_still_running_after_the_wait_can_be_killed():
    handle = SubprocessRunner().start(python("import time; time.sleep(60)"), {})
    assert handle.wait(0.05) is None
    assert handle.poll() is None
    handle.kill()
    assert handle.poll() is not None
    assert handle.output() == ("", "")


def test_output_that_is_not_utf8_is_read_anyway():
    handle = SubprocessRunner().start(python("import sys; sys.stdout.buffer.write(b'12|RUNNING|u|\\xff\\n')"), {})
    assert handle.wait(10) == 0
    assert handle.output()[0] == "12|RUNNING|u|\ufffd\n"


@pytest.mark.parametrize("program", ["/nonexistent/squeue", "/dev/null"])
def test_a_program_that_cannot_run_is_a_clear_error(program):
    with pytest.raises(CommandNotFoundError, match="cannot run %s: " % program):
        SubprocessRunner().start([program, "--noheader"], {})


def test_system_clock_is_monotonic():
    clock = SystemClock()
    first = clock.now()
    clock.sleep(0)
    assert clock.now() >= first


def test_a_program_named_alone_is_found_in_path_then_in_the_sbin_directories(tmp_path, monkeypatch):
    """As Ansible's get_bin_path finds the Slurm modules' programs: one host, one answer."""
    in_path, in_sbin = tmp_path / "bin", tmp_path / "sbin"
    for directory in (in_path, in_sbin):
        directory.mkdir()
    for directory, name in ((in_path, "squeue"), (in_sbin, "squeue"), (in_sbin, "scontrol")):
        (directory / name).write_text("#!/bin/sh\n")
        (directory / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(in_path))
    monkeypatch.setattr(slurm_runner, "SBIN_DIRECTORIES", (str(in_sbin),))

    assert slurm_runner.find_program("squeue") == str(in_path / "squeue")
    assert slurm_runner.require_program("scontrol") == str(in_sbin / "scontrol")
    assert slurm_runner.find_program("scancel") is None
    with pytest.raises(slurm_runner.CommandNotFoundError, match="scancel: not found in PATH, "):
        slurm_runner.require_program("scancel")


@pytest.mark.parametrize("value", ["east", "east,west", "a_b.c-d", None])
def test_a_cluster_list_is_names_separated_by_commas(value):
    assert slurm_runner.cluster_list("clusters", value) == value


class _RequestError(ConfigError):
    """A caller's own kind of ConfigError (as CancelRequestError is)."""


@pytest.mark.parametrize("value", ["a;b", "east,", ",east", "east west", "", 5])
def test_every_option_naming_clusters_gets_the_one_message_and_its_own_error(value):
    with pytest.raises(_RequestError) as raised:
        slurm_runner.cluster_list("clusters", value, _RequestError)
    assert str(raised.value).startswith(
        "option clusters must be Slurm cluster names ([A-Za-z0-9_.-]) separated by commas, got "
    )
    with pytest.raises(ConfigError, match="^option slurm_clusters must be Slurm cluster names "):
        slurm_runner.cluster_list("slurm_clusters", value)
