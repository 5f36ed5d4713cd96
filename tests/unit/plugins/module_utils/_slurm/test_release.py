# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which Slurm release `scancel --version` names, and whether its `--ctld` sends one
request for all the jobs of a call (24.05 and later)."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.release import (
    CTLD_ALWAYS,
    CTLD_AUTO,
    CTLD_CHOICES,
    CTLD_NEVER,
    ONE_REQUEST_SINCE,
    parse_slurm_version,
    scancel_version_command,
    sends_one_request,
)


@pytest.mark.parametrize(
    "printed, version",
    [
        ("slurm 24.05.1\n", (24, 5)),
        ("slurm-wlm 22.05.8\n", (22, 5)),
        ("slurm 24.11.0-0rc1\n", (24, 11)),
        ("slurm 25.05\n", (25, 5)),
        ("  slurm 23.11.10\n", (23, 11)),
        ("some warning first\nslurm 24.05.4\n", (24, 5)),
        ("slurm-wlm-basic 21.08.5\n", (21, 8)),
    ],
)
def test_the_version_lines_scancel_prints(printed, version):
    assert parse_slurm_version(printed) == version


@pytest.mark.parametrize(
    "printed",
    [
        "",
        "scancel: error: unrecognized option '--version'\n",
        "slurm\n",
        "slurmctld 24.05.1\n",
        "slurm 24\n",
        "slurm v24.05\n",
    ],
)
def test_what_is_not_a_version_is_none(printed):
    assert parse_slurm_version(printed) is None


@pytest.mark.parametrize(
    "version, one",
    [
        ((24, 5), True),
        ((24, 11), True),
        ((25, 5), True),
        ((24, 4), False),
        ((23, 11), False),
        ((22, 5), False),
        (None, False),
    ],
)
def test_one_request_from_24_05_on(version, one):
    assert sends_one_request(version) is one


def test_the_threshold_is_24_05():
    assert ONE_REQUEST_SINCE == (24, 5)


def test_the_version_command_and_the_ctld_choices():
    assert scancel_version_command("/usr/bin/scancel") == ["/usr/bin/scancel", "--version"]
    assert CTLD_CHOICES == (CTLD_AUTO, CTLD_ALWAYS, CTLD_NEVER) == ("auto", "always", "never")
