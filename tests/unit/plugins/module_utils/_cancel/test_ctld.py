# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether a cancel call's scancels carry --ctld and are one request: the option, the
release `scancel --version` names (asked once, beside the first squeue) and the caller."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.ctld import CtldChoice
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.log import CallLog
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import CancelRequest
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.option_bounds import (
    MAX_JOB_IDS_PER_SCANCEL,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.queue import QueueEntry
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.runner import CommandNotFoundError
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock, FakeSlurm

JOB = "zzzzz-8i9sb-000000000000001"
CRUNCH = (1000, "crunch")
ROOT = (0, "root")
OURS = [QueueEntry("1", "RUNNING", "crunch", JOB)]
THEIRS = OURS + [QueueEntry("2", "RUNNING", "alice", JOB)]


def choice(release="24.11.5", caller=CRUNCH, **options):
    slurm = FakeSlurm(FakeClock())
    slurm.release = release
    request = CancelRequest(names=[JOB], **options)
    log = CallLog(request, slurm.clock)
    return CtldChoice(request, slurm, {"LC_ALL": "C"}, caller, log), slurm, log


@pytest.mark.parametrize("release, one_request, version", [("24.11.5", True, "24.11"), ("22.05.8", False, "22.05")])
def test_auto_follows_the_release_scancel_names(release, one_request, version):
    ctld, slurm, log = choice(release)
    ctld.start_probe()
    assert [probe.argv for probe in slurm.version_probes] == [["scancel", "--version"]]
    assert ctld.enabled is None
    ctld.decide()
    assert ctld.enabled is one_request and ctld.one_request is one_request and ctld.version == version
    assert len(slurm.version_probes) == 1 and log.messages == []


def test_never_asks_no_version():
    ctld, slurm, _log = choice(ctld="never")
    ctld.start_probe()
    ctld.decide()
    assert slurm.version_probes == [] and ctld.enabled is False and ctld.version == ""


def test_a_known_release_is_not_asked_again():
    ctld, slurm, _log = choice(scancel_release="24.11")
    ctld.start_probe()
    ctld.decide()
    assert slurm.version_probes == [] and ctld.one_request and ctld.version == "24.11"


def test_always_without_a_release_gets_ctld_bounded_as_one_request_per_job():
    ctld, slurm, log = choice(ctld="always")
    slurm.version_output = "scancel: error: something else\n"
    ctld.start_probe()
    ctld.decide()
    assert ctld.enabled is True and ctld.one_request is False and ctld.version == ""
    assert log.messages == [
        "scancel --version named no Slurm release (scancel: error: something else): "
        "--ctld given as ctld=always asks, bounded as one request per job"
    ]


def test_a_version_asked_without_a_probe_runs_it_then():
    ctld, slurm, _log = choice()
    ctld.decide()
    assert len(slurm.version_probes) == 1 and ctld.one_request


def test_one_request_names_up_to_an_argvs_bound_only_jobs_the_caller_may_name():
    ctld, _slurm, _log = choice()
    assert ctld.ids_per_scancel(OURS) == 500
    ctld.decide()
    assert ctld.ids_per_scancel(OURS) == MAX_JOB_IDS_PER_SCANCEL
    assert ctld.ids_per_scancel(THEIRS) == 500
    as_root, _slurm, _log = choice(caller=ROOT)
    as_root.decide()
    assert as_root.ids_per_scancel(THEIRS) == MAX_JOB_IDS_PER_SCANCEL


def test_another_users_jobs_get_no_ctld_from_a_user_not_root_said_once():
    ctld, _slurm, log = choice()
    ctld.decide()
    assert ctld.for_batch(OURS)
    assert not ctld.for_batch(THEIRS) and not ctld.for_batch(THEIRS)
    assert len(log.messages) == 1 and log.messages[0].startswith("jobs of another user named without --ctld")
    as_root, _slurm, _log = choice(caller=ROOT)
    as_root.decide()
    assert as_root.for_batch(THEIRS)


def test_no_ctld_before_it_is_decided_or_when_it_is_off():
    ctld, _slurm, _log = choice("22.05.8")
    assert not ctld.for_batch(OURS)
    ctld.decide()
    assert not ctld.for_batch(OURS)


def test_a_probe_nobody_asked_is_killed_at_the_end():
    ctld, slurm, _log = choice()
    slurm.version_duration = 5.0
    ctld.start_probe()
    ctld.end_probe()
    assert slurm.version_probes[0].killed
    ctld.end_probe()


def test_a_missing_scancel_fails_only_when_an_scancel_is_due():
    ctld, slurm, _log = choice()
    slurm.missing = {"scancel"}
    ctld.start_probe()
    with pytest.raises(CommandNotFoundError):
        ctld.decide()
