# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module as Ansible runs it, against the scripted Slurm of the engine's tests."""

from __future__ import annotations

import os

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel import run as cancel_run
from ansible_collections.arvados_ops.recovery.plugins.modules import slurm_job_cancel
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock, FakeSlurm, cancel_jobs_on, fake_client_directory
from tests.unit.plugins.modules.module_args import run_main

# Crunch v1 jobs: cancelled outright under the default stop=auto (containers' jobs get a TERM
# first, see test_slurm_job_cancel_stop.py).
A = "zzzzz-8i9sb-aaaaaaaaaaaaaaa"
B = "zzzzz-8i9sb-bbbbbbbbbbbbbbb"


@pytest.fixture
def slurm(monkeypatch):
    fake = FakeSlurm(FakeClock())
    monkeypatch.setattr(cancel_run, "cancel_jobs", cancel_jobs_on(fake, cancel_run.cancel_jobs))
    return fake


@pytest.fixture
def slurm_bin(tmp_path, monkeypatch):
    """A PATH holding executables named squeue and scancel (the fake answers for them)."""
    monkeypatch.setenv("PATH", str(fake_client_directory(tmp_path)))
    return tmp_path


def warning_text(warning):
    # ansible-core 2.19 reports warnings as structured events, older ones as strings.
    return warning["event"]["msg"] if isinstance(warning, dict) else warning


def run_module(args, capsys):
    return run_main(slurm_job_cancel, args, capsys)


def test_cancels_and_reports_with_the_clients_found_on_path(slurm, slurm_bin, capsys):
    slurm.add(11, A, "RUNNING")
    slurm.add(12, A, "PENDING", user="alice")
    result = run_module({"name": [A, B], "user": "crunch"}, capsys)
    assert slurm.argvs("scancel") == [[str(slurm_bin / "scancel"), "11"]]
    assert slurm.argvs("squeue")[0][0] == str(slurm_bin / "squeue")
    assert result["changed"] is True
    assert result["cancelled"] == [{"name": A, "job_id": "11", "state_before": "RUNNING", "user": "crunch"}]
    assert result["already_absent"] == [B]
    assert [job["job_id"] for job in result["skipped_other_user"]] == ["12"]
    assert result["remaining"] == [] and result["scancel_calls"] == 1
    assert "diff" not in result and "warnings" not in result


def _executable(path):
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def test_uuid_is_an_alias_of_name_and_explicit_paths_skip_the_path_search(slurm, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "/nonexistent")
    squeue, scancel = _executable(tmp_path / "squeue"), _executable(tmp_path / "scancel")
    slurm.add(11, A, "PENDING")
    result = run_module({"uuid": [A], "squeue_path": squeue, "scancel_path": scancel}, capsys)
    assert slurm.argvs("scancel") == [[scancel, "11"]]
    assert result["changed"]


def test_an_explicit_path_that_cannot_run_fails_before_any_command(slurm, capsys, tmp_path):
    squeue = _executable(tmp_path / "squeue")
    result = run_module({"name": [A], "squeue_path": squeue, "scancel_path": str(tmp_path / "missing-scancel")}, capsys)
    assert result["failed"] and "missing-scancel: cannot be run: No such file or directory" in result["msg"]
    assert slurm.processes == []


def test_check_mode_lists_once_and_shows_the_predicted_diff(slurm, slurm_bin, capsys):
    slurm.add(11, A, "RUNNING")
    result = run_module({"name": [A], "_ansible_check_mode": True, "_ansible_diff": True}, capsys)
    assert len(slurm.processes) == 1 and slurm.calls("scancel") == []
    assert result["changed"] is True
    assert result["diff"] == {"before": "11 %s RUNNING crunch\n" % A, "after": ""}


def test_a_rerun_is_not_changed(slurm, slurm_bin, capsys):
    slurm.add(11, A, "RUNNING")
    assert run_module({"name": [A]}, capsys)["changed"]
    again = run_module({"name": [A]}, capsys)
    assert again["changed"] is False and again["scancel_calls"] == 0


def test_jobs_left_at_the_deadline_fail_the_task_with_remaining_and_warnings(slurm, slurm_bin, capsys):
    slurm.add(11, A, "RUNNING")
    slurm.unkillable.add("11")
    result = run_module({"name": [A], "timeout": 5, "retry_delay": 1, "log_interval": 2}, capsys)
    assert result["failed"]
    assert result["remaining"] == [{"name": A, "job_id": "11", "state": "RUNNING", "user": "crunch"}]
    assert "1 still queued after 5 s" in result["msg"]
    assert any("still in queue" in warning_text(warning) for warning in result["warnings"])


def test_slurm_down_fails_with_slurms_own_words(slurm, slurm_bin, capsys):
    slurm.down_since = slurm.clock.start
    result = run_module({"name": [A], "timeout": 20}, capsys)
    assert result["failed"]
    assert "Unable to contact slurm controller" in result["msg"]
    assert result["remaining"][0]["state"] == "UNKNOWN"


@pytest.mark.parametrize("bad", ["x; rm -rf /", "%s,%s" % (A, B)])
def test_a_bad_name_fails_before_any_command(slurm, slurm_bin, capsys, bad):
    result = run_module({"name": [A, bad]}, capsys)
    assert result["failed"] and repr(bad) in result["msg"]
    assert slurm.processes == []


def test_missing_clients_fail_at_once_naming_where_they_were_looked_for(slurm, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_module({"name": [A]}, capsys)
    # As every module and command of the collection finds Slurm's programs (require_program).
    assert result["failed"] and result["msg"] == "squeue: not found in PATH, /sbin, /usr/sbin, /usr/local/sbin"
    assert slurm.processes == []


def test_a_bad_name_is_reported_even_before_missing_clients(slurm, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = run_module({"name": ["a b"]}, capsys)
    assert result["failed"] and "'a b'" in result["msg"]


def test_name_or_job_id_is_required(slurm, slurm_bin, capsys):
    result = run_module({"user": "crunch"}, capsys)
    assert result["failed"] and "name, job_id" in result["msg"]


def test_batch_requires_signal(slurm, slurm_bin, capsys):
    result = run_module({"name": [A], "batch": True}, capsys)
    assert result["failed"] and "signal" in result["msg"]


def test_signal_options_reach_scancel(slurm, slurm_bin, capsys):
    slurm.add(11, A, "RUNNING")
    result = run_module({"name": [A], "signal": "TERM", "batch": True, "wait": False}, capsys)
    assert slurm.argvs("scancel") == [[str(slurm_bin / "scancel"), "--signal=TERM", "--batch", "11"]]
    assert [job["job_id"] for job in result["signalled"]] == ["11"] and result["cancelled"] == []


def test_the_module_runs_its_clients_in_the_c_locale(slurm, slurm_bin, capsys, monkeypatch):
    monkeypatch.setenv("SCANCEL_INTERACTIVE", "1")
    slurm.add(11, A, "RUNNING")
    run_module({"name": [A]}, capsys)
    for process in slurm.processes:
        assert process.env["LC_ALL"] == "C" and "SCANCEL_INTERACTIVE" not in process.env
        assert process.env["PATH"] == os.environ["PATH"]


def test_every_option_is_documented_with_its_default():
    import yaml

    documented = yaml.safe_load(slurm_job_cancel.DOCUMENTATION)["options"]
    assert set(documented) == set(slurm_job_cancel.ARGUMENT_SPEC)
    for option, spec in slurm_job_cancel.ARGUMENT_SPEC.items():
        assert documented[option]["type"] == spec["type"], option
        assert documented[option].get("default") == spec.get("default"), option
        assert "for example" in " ".join(documented[option]["description"]), option
