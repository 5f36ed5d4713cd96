# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one run of a Slurm client came to: its exit, its words on one line, and whether
trying again can help."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.outcome import (
    ClientOutcome,
    collect,
    run_to_end,
    slurm_words,
)
from tests.unit.plugins.module_utils.slurm_fakes import EndedCommand


def outcome(returncode=0, stdout="", stderr="", timed_out=False, program="scancel"):
    return ClientOutcome(program, returncode, stdout, stderr, timed_out)


def test_only_an_exit_0_in_time_is_ok():
    assert outcome().ok
    assert not outcome(returncode=1).ok
    assert not outcome(returncode=None, timed_out=True).ok


@pytest.mark.parametrize(
    "stderr",
    [
        "scancel: unrecognized option '--ctld'\nTry \"scancel --help\" for more information\n",
        "scancel: error: Unknown job signal: FOO\n",
        "scancel: error: Invalid job id abc\n",
        "squeue: error: invalid entry for --clusters\n",
    ],
)
def test_a_refused_command_line_is_never_tried_again(stderr):
    reason = outcome(returncode=1, stderr=stderr).permanent_reason()
    assert reason.startswith("scancel refused its command line: ")


def test_a_silent_exit_1_is_not_slurms_client():
    assert outcome(returncode=1, program="squeue").permanent_reason() == (
        "squeue exited with status 1 and printed nothing, which Slurm's squeue never does"
    )


@pytest.mark.parametrize(
    "failed",
    [
        outcome(returncode=1, stderr="squeue: error: Unable to contact slurm controller (connect failure)\n"),
        outcome(returncode=None, timed_out=True),
        outcome(returncode=8, stderr="scancel: error: Kill job error on job id 1: Invalid job id specified\n"),
        outcome(),
    ],
)
def test_what_a_retry_may_mend_has_no_permanent_reason(failed):
    assert failed.permanent_reason() == ""


def test_the_error_says_what_slurm_said_or_how_the_client_ended():
    assert outcome(returncode=8, stderr="scancel: error:  down\n").error_text(10.0) == "scancel: error: down"
    assert outcome(returncode=8).error_text(10.0) == "scancel exited with status 8"
    killed = outcome(returncode=None, timed_out=True)
    assert killed.error_text(12.34) == "scancel did not finish within 12.3 s and was killed"
    killed.stderr = "_add_delay: adding delay in RPC send\nscancel: error: slow\n"
    assert killed.error_text(10.0) == "scancel did not finish within 10 s and was killed: scancel: error: slow"


def test_slurm_words_keep_the_first_three_lines_without_backoff_notes():
    stderr = "".join("scancel: error: job %d\n_add_delay: adding delay in RPC send\n" % n for n in range(5))
    assert slurm_words(stderr) == (
        "scancel: error: job 0 scancel: error: job 1 scancel: error: job 2 (and 2 more lines)"
    )
    assert slurm_words("\n  \n") == ""


def test_a_client_that_outlived_its_time_is_killed_before_its_output_is_read():
    never_ends = EndedCommand(None, stderr="slow\n")
    ended = collect("squeue", never_ends, None)
    assert never_ends.killed and ended.timed_out and ended.returncode is None and ended.stderr == "slow\n"
    done = EndedCommand(0, stdout="JOBID|STATE|USER|NAME\n")
    assert run_to_end("squeue", done, 10.0) == outcome(0, "JOBID|STATE|USER|NAME\n", program="squeue")
    assert not done.killed
