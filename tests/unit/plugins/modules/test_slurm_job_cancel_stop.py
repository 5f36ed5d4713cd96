# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module's stop and terminate_grace, as Ansible runs it, against the scripted Slurm.

The module arguments go in the way every supported ansible-core reads them
(``basic._ANSIBLE_ARGS``, and the serialization profile where there is one).
"""

from __future__ import annotations

import json

import pytest
import yaml
from ansible.module_utils import basic

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel import run as cancel_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import (
    AFTER_TERM_CHOICES,
    BASE_TIMEOUT,
    STOP_CHOICES,
    request_defaults,
)
from ansible_collections.arvados_ops.recovery.plugins.modules import slurm_job_cancel
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock, FakeSlurm, cancel_jobs_on, fake_client_directory

CONTAINER = "zzzzz-dz642-aaaaaaaaaaaaaaa"
PENDING_CONTAINER = "zzzzz-dz642-bbbbbbbbbbbbbbb"
CRUNCH_JOB = "zzzzz-8i9sb-ccccccccccccccc"


@pytest.fixture
def slurm(monkeypatch, tmp_path):
    fake = FakeSlurm(FakeClock())
    monkeypatch.setattr(cancel_run, "cancel_jobs", cancel_jobs_on(fake, cancel_run.cancel_jobs))
    monkeypatch.setenv("PATH", str(fake_client_directory(tmp_path)))
    return fake


def run_module(args, capsys, monkeypatch):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": args}).encode())
    if hasattr(basic, "_ANSIBLE_PROFILE"):
        monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    with pytest.raises(SystemExit) as exited:
        slurm_job_cancel.main()
    output = json.loads(capsys.readouterr().out)
    assert (exited.value.code != 0) == bool(output.get("failed"))
    return output


def scancels(slurm):
    return [argv[1:] for argv in slurm.argvs("scancel")]


def test_by_default_containers_get_term_and_crunch_v1_jobs_a_cancel(slurm, capsys, monkeypatch):
    slurm.add(11, CONTAINER, "RUNNING", exits_after_signal=0.2)
    slurm.add(12, PENDING_CONTAINER, "PENDING")
    slurm.add(13, CRUNCH_JOB, "RUNNING")
    result = run_module({"name": [CONTAINER, PENDING_CONTAINER, CRUNCH_JOB]}, capsys, monkeypatch)
    assert scancels(slurm) == [["--state=PENDING", "12"], ["13"], ["--signal=TERM", "--batch", "11"]]
    assert [job["job_id"] for job in result["terminated"]] == ["11"]
    assert sorted(job["job_id"] for job in result["cancelled"]) == ["12", "13"]
    assert result["changed"] and result["remaining"] == [] and result["signalled"] == []
    assert result["msg"] == "sent TERM to 1, cancelled 2 Slurm job(s)"


# 3.2.1 services/crunch-dispatch-slurm/slurm.go, Cancel: TERM to the batch step, never a plain
# cancel; crunch-dispatch-slurm.go repeats it once per squeue poll while the job stays.
def test_by_default_term_is_repeated_at_term_interval_and_the_job_is_reported_not_cancelled(slurm, capsys, monkeypatch):
    slurm.add(11, CONTAINER, "RUNNING")
    result = run_module(
        {"name": [CONTAINER], "term_interval": 5, "timeout": 12, "log_interval": 600}, capsys, monkeypatch
    )
    assert scancels(slurm) == [["--signal=TERM", "--batch", "11"]] * 3
    assert result["failed"] and result["cancelled"] == []
    assert [(job["job_id"], job["terms"]) for job in result["left_running"]] == [("11", 3)]
    assert "1 left running, not cancelled" in result["msg"] and "after_term=cancel" in result["msg"]


def test_terminate_grace_reaches_the_engine_and_a_warning_names_the_jobs_cancelled_outright(slurm, capsys, monkeypatch):
    slurm.add(11, CONTAINER, "RUNNING")
    result = run_module(
        {"name": [CONTAINER], "after_term": "cancel", "terminate_grace": 3, "log_interval": 600}, capsys, monkeypatch
    )
    assert scancels(slurm) == [["--signal=TERM", "--batch", "11"], ["11"]]
    term, cancel = slurm.calls("scancel")
    assert cancel.started - term.ends >= 3
    assert [job["job_id"] for job in result["cancelled"]] == ["11"]
    warnings = [w["event"]["msg"] if isinstance(w, dict) else w for w in result["warnings"]]
    assert "1 Slurm job(s) still queued 3 s after their TERM, cancelled outright: 11" in warnings


def test_stop_cancel_cancels_a_container_plainly(slurm, capsys, monkeypatch):
    slurm.add(11, CONTAINER, "RUNNING")
    result = run_module({"name": [CONTAINER], "stop": "cancel", "timeout": 30}, capsys, monkeypatch)
    assert scancels(slurm) == [["11"]]
    assert result["terminated"] == [] and [job["job_id"] for job in result["cancelled"]] == ["11"]


def test_check_mode_predicts_term_and_cancel_and_sends_nothing(slurm, capsys, monkeypatch):
    slurm.add(11, CONTAINER, "RUNNING")
    slurm.add(13, CRUNCH_JOB, "RUNNING")
    result = run_module(
        {"name": [CONTAINER, CRUNCH_JOB], "_ansible_check_mode": True, "_ansible_diff": True}, capsys, monkeypatch
    )
    assert slurm.calls("scancel") == [] and len(slurm.processes) == 1
    assert [job["job_id"] for job in result["terminated"]] == ["11"]
    assert [job["job_id"] for job in result["cancelled"]] == ["13"]
    assert result["changed"] and result["diff"]["after"] == ""


@pytest.mark.parametrize(
    "args, message",
    [
        ({"stop": "terminate", "signal": "USR1"}, "cannot be combined with stop=terminate"),
        ({"stop": "kill"}, "value of stop must be one of: auto, terminate, cancel, got: kill"),
        ({"timeout": 60, "after_term": "cancel"}, "timeout 60 ends the call before terminate_grace 120 is over"),
        ({"after_term": "kill"}, "value of after_term must be one of: term_again, cancel, got: kill"),
        ({"term_interval": 0}, "term_interval must be at least 1, got 0"),
        ({"terminate_grace": -5}, "terminate_grace must be at least 0, got -5"),
    ],
)
def test_conflicting_or_bad_stop_options_fail_before_any_command(slurm, capsys, monkeypatch, args, message):
    result = run_module(dict(args, name=[CONTAINER]), capsys, monkeypatch)
    assert result["failed"] and message in result["msg"], result["msg"]
    assert slurm.processes == []


def test_the_documented_defaults_and_choices_are_the_engines():
    documented = yaml.safe_load(slurm_job_cancel.DOCUMENTATION)["options"]
    engine = request_defaults()
    for option, doc in documented.items():
        if option in engine and "default" in doc:
            assert doc["default"] == engine[option], option
    assert "default" not in documented["timeout"] and engine["timeout"] is None
    assert "Default is %d s, plus O(terminate_grace)" % BASE_TIMEOUT in " ".join(documented["timeout"]["description"])
    assert documented["stop"]["choices"] == list(STOP_CHOICES)
    assert documented["after_term"]["choices"] == list(AFTER_TERM_CHOICES)
    assert "The default, %d s" % engine["term_interval"] in " ".join(documented["term_interval"]["description"])
    assert "The default, %d s" % engine["terminate_grace"] in " ".join(documented["terminate_grace"]["description"])


def test_the_return_documents_terminated_like_cancelled():
    returned = yaml.safe_load(slurm_job_cancel.RETURN)
    assert returned["terminated"]["type"] == returned["cancelled"]["type"] == "list"
    assert set(returned["terminated"]["sample"][0]) == set(returned["cancelled"]["sample"][0])
    assert set(returned["left_running"]["sample"][0]) == set(returned["remaining"]["sample"][0]) | {"terms"}
