# SPDX-License-Identifier: GPL-3.0-or-later
"""boot_recovery refuses, before it writes anything, a boot-time cleanup that would ask
Slurm (cancel_slurm_jobs unset, auto or true) on a host where the unit would find no
squeue: the command refuses such a run (issue 34), and a unit doing so at every boot would
say it only in the journal. The unit's PATH is pointed at a directory of this test (with or
without an squeue in it), as this machine has Slurm's clients in /usr/bin."""

from __future__ import annotations

import pytest

from tests.unit.roles.playbook_runs import collections_in, role_tasks_play, run

ROLE_PLAY = {"hosts": "localhost", "gather_facts": False, "roles": ["arvados_ops.recovery.boot_recovery"]}
CHECKS_PLAY = role_tasks_play("checks.yml", "Check the settings as the role does under every tag")


def role_variables(tmp_path, options, unit_path):
    return {
        "boot_recovery_arvados_version": "3.2",
        # 3.x runs no crunch v1 job: the role installs nothing there unless told to.
        "boot_recovery_without_crunch_v1": True,
        "boot_recovery_options": options,
        "boot_recovery_options_file": str(tmp_path / "etc" / "fail-jobs.yml"),
        "boot_recovery_command": str(tmp_path / "bin" / "arvados-fail-jobs"),
        "boot_recovery_lib_dir": str(tmp_path / "lib"),
        "__boot_recovery_unit_path": [str(unit_path)],
    }


def fake_squeue(directory):
    directory.mkdir(exist_ok=True)
    squeue = directory / "squeue"
    squeue.write_text("#!/bin/sh\nexit 0\n")
    squeue.chmod(0o755)
    return squeue


@pytest.mark.parametrize(
    "options, said",
    [
        ({}, "is auto (unset)"),
        ({"cancel_slurm_jobs": None}, "is auto (unset)"),
        ({"cancel_slurm_jobs": "auto"}, "is auto"),
        ({"cancel_slurm_jobs": True}, "is True"),
    ],
    ids=["unset", "null", "auto", "true"],
)
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_a_cleanup_asking_slurm_without_squeue_is_refused_before_anything_is_written(tmp_path, options, said, check):
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    variables = role_variables(tmp_path, options, empty)

    stdout, changed = run(
        collections_in(tmp_path), tmp_path, ROLE_PLAY, variables, *(["--check"] if check else []), succeeds=False
    )

    text = " ".join(stdout.split())
    assert (
        "boot_recovery: boot_recovery_options.cancel_slurm_jobs %s but squeue is not on this host (%s/squeue)"
        % (
            said,
            empty,
        )
        in text
    ), stdout
    assert "Set boot_recovery_options.cancel_slurm_jobs to false if this site runs no Slurm" in text
    assert "nothing was written" in text
    assert changed == 0
    assert not (tmp_path / "etc").exists() and not (tmp_path / "bin").exists() and not (tmp_path / "lib").exists()


@pytest.mark.parametrize("options", [{"cancel_slurm_jobs": False}, {"cancel_slurm_jobs": "no"}], ids=["false", "no"])
def test_false_needs_no_squeue(tmp_path, options):
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    run(collections_in(tmp_path), tmp_path, CHECKS_PLAY, role_variables(tmp_path, options, empty))


def test_auto_passes_where_the_units_path_holds_squeue(tmp_path):
    bin_dir = tmp_path / "slurm-bin"
    fake_squeue(bin_dir)
    run(collections_in(tmp_path), tmp_path, CHECKS_PLAY, role_variables(tmp_path, {}, bin_dir))


def test_squeue_path_is_looked_at_instead_of_the_units_path(tmp_path):
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    squeue = fake_squeue(tmp_path / "elsewhere")
    collections = collections_in(tmp_path)
    variables = role_variables(tmp_path, {"squeue_path": str(squeue)}, empty)
    run(collections, tmp_path, CHECKS_PLAY, variables)

    missing = tmp_path / "missing" / "squeue"
    variables = role_variables(tmp_path, {"squeue_path": str(missing)}, empty)
    stdout, _changed = run(collections, tmp_path, CHECKS_PLAY, variables, succeeds=False)
    assert "squeue is not on this host (%s)" % missing in " ".join(stdout.split())
