# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_cancel/run.py: slurm_job_cancel's option table and its one call, options to result."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel import run as cancel_run
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.request import (
    CancelRequest,
    CancelRequestError,
    request_defaults,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.run import (
    CANCEL_OPTIONS,
    build_request,
    client_paths,
    run_slurm_job_cancel,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.runner import CommandNotFoundError
from tests.unit.plugins.module_utils.slurm_fakes import FakeClock, FakeSlurm, cancel_jobs_on, fake_client_directory

JOB = "zzzzz-8i9sb-0123456789abcde"


@pytest.fixture
def slurm(monkeypatch):
    fake = FakeSlurm(FakeClock())
    monkeypatch.setattr(cancel_run, "cancel_jobs", cancel_jobs_on(fake, cancel_run.cancel_jobs))
    return fake


def module_params(**given):
    """The options as AnsibleModule hands them over: every option, defaults filled in."""
    params = {name: spec["default"] for name, spec in CANCEL_OPTIONS.items()}
    params.update(given)
    return params


def test_every_default_is_the_request_field_s_own():
    defaults = request_defaults()
    for option, spec in CANCEL_OPTIONS.items():
        if spec["default"] is not None:
            assert spec["default"] == defaults[option], option
    # The request's own default deadline depends on stop: the option leaves it to the request.
    assert CANCEL_OPTIONS["timeout"]["default"] is None


def test_options_without_a_request_field_of_the_same_name_are_mapped_or_left_to_client_paths():
    request_fields = set(request_defaults())
    unmapped = {option for option in CANCEL_OPTIONS if option not in request_fields}
    assert unmapped == {"name", "job_id"}


def test_the_module_s_options_make_the_request_they_name():
    request = build_request(module_params(name=[JOB], job_id=["42"], stop="cancel"), check_mode=True)
    assert request == CancelRequest(names=(JOB,), job_ids=("42",), stop="cancel", check_mode=True)


def test_a_bad_value_is_refused_before_any_client_is_looked_for(monkeypatch):
    def never(program):
        raise AssertionError("looked for %s" % program)

    monkeypatch.setattr(cancel_run, "require_program", never)
    with pytest.raises(CancelRequestError, match="'nope'"):
        run_slurm_job_cancel(module_params(name=["nope"]))


def test_clients_are_the_paths_given_or_the_programs_found(tmp_path, monkeypatch):
    given, on_path = tmp_path / "given", tmp_path / "bin"
    for directory in (given, on_path):
        directory.mkdir()
        fake_client_directory(directory)
    monkeypatch.setenv("PATH", str(on_path))
    found = client_paths(module_params(squeue_path=str(given / "squeue")))
    assert found == {"squeue_path": str(given / "squeue"), "scancel_path": str(on_path / "scancel")}
    with pytest.raises(CommandNotFoundError, match="missing-scancel"):
        client_paths(module_params(scancel_path=str(tmp_path / "missing-scancel")))


def test_the_result_is_the_module_s_with_warnings_and_the_diff_only_when_asked(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fake_client_directory(tmp_path)))
    slurm.add(7, JOB)
    plain = run_slurm_job_cancel(module_params(name=[JOB]), check_mode=True)
    assert plain["changed"] and "diff" not in plain
    assert [entry["job_id"] for entry in plain["cancelled"]] == ["7"]
    assert plain["warnings"] == plain["messages"]

    with_diff = run_slurm_job_cancel(module_params(name=[JOB]), check_mode=True, diff=True)
    assert JOB in with_diff["diff"]["before"] and JOB not in with_diff["diff"]["after"]
    assert slurm.jobs["7"].state == "RUNNING"  # check mode cancelled nothing
