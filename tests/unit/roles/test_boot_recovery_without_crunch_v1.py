# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""boot_recovery fails crunch v1 jobs, which no release from 3.0 on runs (the jobs API is
gone) nor a 2.x whose config.yml turns the jobs API off: there it says it has nothing to
do and installs nothing (the API server is not held back at boot), unless
boot_recovery_without_crunch_v1 asks for it. Run as the role runs, on paths of this test
(no squeue in the unit's PATH: on such a release no Slurm is asked either)."""

from __future__ import annotations

import pytest
import yaml

from tests.unit.roles.playbook_runs import collections_in, run

ROLE_PLAY = {"hosts": "localhost", "gather_facts": False, "roles": ["arvados_ops.recovery.boot_recovery"]}
NOTHING_TO_DO = "runs no crunch v1 job"


def role_variables(tmp_path, release, **extra):
    empty = tmp_path / "no-slurm"
    empty.mkdir(exist_ok=True)
    values = {
        "boot_recovery_arvados_version": release,
        "boot_recovery_options_file": str(tmp_path / "etc" / "fail-jobs.yml"),
        "boot_recovery_command": str(tmp_path / "bin" / "arvados-fail-jobs"),
        "boot_recovery_lib_dir": str(tmp_path / "lib"),
        "boot_recovery_install_packages": False,
        "__boot_recovery_unit_path": [str(empty)],
    }
    values.update(extra)
    return values


def config_yml(tmp_path, enable):
    path = tmp_path / "config.yml"
    jobs_api = {} if enable is None else {"Containers": {"JobsAPI": {"Enable": enable}}}
    path.write_text(
        yaml.safe_dump({"Clusters": {"zzzzz": {"PostgreSQL": {"Connection": {"password": "s3"}}, **jobs_api}}})
    )
    return str(path)


@pytest.mark.parametrize("release", ["3.0", "3.2.1"])
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_a_release_without_the_jobs_api_installs_nothing_and_says_why(tmp_path, release, check):
    stdout, changed = run(
        collections_in(tmp_path),
        tmp_path,
        ROLE_PLAY,
        role_variables(tmp_path, release),
        *(["--check"] if check else []),
    )

    text = " ".join(stdout.split())
    assert "boot_recovery: Arvados %s %s (the jobs API is gone from 3.0 on)" % (release, NOTHING_TO_DO) in text
    assert "boot_recovery_without_crunch_v1=true" in text
    assert changed == 0
    assert not (tmp_path / "etc").exists() and not (tmp_path / "bin").exists() and not (tmp_path / "lib").exists()


@pytest.mark.parametrize(("enable", "nothing"), [("false", True), (False, True), ("auto", False), (None, False)])
def test_a_2x_release_installs_unless_its_config_turns_the_jobs_api_off(tmp_path, enable, nothing):
    options = {"config_file": config_yml(tmp_path, enable), "cancel_slurm_jobs": False}
    variables = role_variables(tmp_path, "2.7.4", boot_recovery_options=options)

    stdout, changed = run(collections_in(tmp_path), tmp_path, ROLE_PLAY, variables, "--check")

    text = " ".join(stdout.split())
    assert (NOTHING_TO_DO in text) is nothing
    assert ("sets Containers.JobsAPI.Enable to false" in text) is nothing
    assert (changed == 0) is nothing
    assert "s3" not in stdout


def test_asked_it_installs_on_3x_as_before(tmp_path):
    variables = role_variables(
        tmp_path, "3.2", boot_recovery_without_crunch_v1=True, boot_recovery_options={"cancel_slurm_jobs": False}
    )

    stdout, changed = run(collections_in(tmp_path), tmp_path, ROLE_PLAY, variables, "--check")

    assert NOTHING_TO_DO not in stdout
    assert changed > 0


def test_on_3x_no_squeue_is_asked_for(tmp_path):
    """The refusal of a cleanup that would find no squeue at boot does not apply where no
    cleanup is installed."""
    stdout, _changed = run(collections_in(tmp_path), tmp_path, ROLE_PLAY, role_variables(tmp_path, "3.2"))
    assert "squeue is not on this host" not in stdout
