"""Every file the roles write that holds a secret ends with no access for other users, also
when it was there before with mode 0644: real ansible-playbook runs of the roles' own tasks
on this host, with every path the roles write pointed into a temporary directory (the
host's systemd and /etc are never touched). A whole host in a container, which took six
minutes more per run of the suite for the same role tasks, is not repeated here: the
Molecule scenarios run the roles on whole hosts."""

from __future__ import annotations

import grp
import os
import stat

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._dispatcher import config as dc
from tests.unit.roles.playbook_runs import DISPATCHER_PLAY, dispatcher_variables, role_tasks_play, run

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the roles write their files as root:<group>")


@pytest.mark.parametrize(
    "mode, private",
    [("0644", "0640"), ("0666", "0660"), ("0600", "0600"), ("0640", "0640"), ("0755", "0750"), ("644", "0640")],
)
def test_a_file_with_secrets_keeps_owner_and_group_access_and_loses_the_others(mode, private):
    assert dc.private_mode(mode) == private


@pytest.mark.parametrize("mode", ["", "rw-r--r--", "0888", "12345", None])
def test_a_mode_that_is_not_octal_is_named(mode):
    with pytest.raises(ConfigError, match="not an octal mode"):
        dc.private_mode(mode)


def a_group_other_than_root():
    for name in ("daemon", "adm", "nogroup"):
        try:
            return grp.getgrnam(name).gr_name
        except KeyError:
            continue
    pytest.skip("no group other than root to give the file")


def mode_of(path):
    info = path.stat()
    return "%04o" % stat.S_IMODE(info.st_mode), grp.getgrgid(info.st_gid).gr_name


def existing_file(path, text, group):
    path.write_text(text)
    os.chown(path, 0, grp.getgrnam(group).gr_gid)
    path.chmod(0o644)


@needs_root
def test_config_yml_readable_by_others_becomes_0640_with_its_owner_and_group_kept(collections, tmp_path):
    group = a_group_other_than_root()
    config = tmp_path / "config.yml"
    existing_file(config, "# the operator's\nClusters:\n  zzzzz:\n    ManagementToken: other-secret\n", group)
    variables = dispatcher_variables(tmp_path, "3.2")
    tags = ("--tags", "dispatcher_config_settings")

    predicted, _changed = run(collections, tmp_path, DISPATCHER_PLAY, variables, "--check", "--diff", *tags)
    assert mode_of(config) == ("0644", group), "check mode changed the mode"
    assert "was mode 0644" in predicted and "It would become 0640" in predicted
    assert "secret-root-token" not in predicted and "other-secret" not in predicted

    done, changed = run(collections, tmp_path, DISPATCHER_PLAY, variables, *tags)
    assert changed > 0
    assert mode_of(config) == ("0640", group)
    assert config.stat().st_uid == 0
    assert "was mode 0644" in done and "It is now 0640" in done
    assert "Its group is root" not in done
    assert yaml.safe_load(config.read_text())["Clusters"]["zzzzz"]["SystemRootToken"] == "secret-root-token"

    assert run(collections, tmp_path, DISPATCHER_PLAY, variables, *tags)[1] == 0


@needs_root
def test_a_root_group_config_yml_is_tightened_with_a_word_on_the_api_servers_group(collections, tmp_path):
    config = tmp_path / "config.yml"
    existing_file(config, "Clusters:\n  zzzzz: {}\n", "root")
    done, _changed = run(
        collections, tmp_path, DISPATCHER_PLAY, dispatcher_variables(tmp_path, "3.2"), "--tags", "dispatcher_config"
    )
    assert mode_of(config) == ("0640", "root")
    assert "Its group is root" in done


@needs_root
@pytest.mark.parametrize("with_group", [False, True])
def test_the_1_x_dispatcher_file_readable_by_others_loses_their_access(collections, tmp_path, with_group):
    group = a_group_other_than_root() if with_group else ""
    expected = ("0640", group) if with_group else ("0600", "root")
    legacy = tmp_path / "crunch-dispatch-slurm" / "crunch-dispatch-slurm.yml"
    legacy.parent.mkdir()
    existing_file(legacy, "Client: {}\n", "root")
    variables = dict(dispatcher_variables(tmp_path, "1.4"), dispatcher_config_file_group=group)

    predicted, _changed = run(
        collections, tmp_path, DISPATCHER_PLAY, variables, "--check", "--tags", "dispatcher_config"
    )
    assert mode_of(legacy) == ("0644", "root")
    assert "it would become %s" % expected[0] in predicted and "secret-token" not in predicted

    done, _changed = run(collections, tmp_path, DISPATCHER_PLAY, variables, "--tags", "dispatcher_config_settings")
    assert mode_of(legacy) == expected
    assert "was mode 0644" in done and "it is now %s" % expected[0] in done
    assert yaml.safe_load(legacy.read_text())["Client"]["AuthToken"] == "secret-token"


BOOT_RECOVERY_PLAY = role_tasks_play("options.yml", "Write the options file as the role does")


@needs_root
def test_the_boot_recovery_options_file_with_a_password_loses_the_access_of_others(collections, tmp_path):
    options = tmp_path / "fail-jobs.yml"
    existing_file(options, "{}\n", "root")
    variables = {
        "boot_recovery_options_file": str(options),
        "boot_recovery_options": {"db_password": "secret-db-password", "db_host": "db"},
    }

    predicted, _changed = run(collections, tmp_path, BOOT_RECOVERY_PLAY, variables, "--check", "--diff")
    assert mode_of(options) == ("0644", "root")
    assert "it would become 0600" in predicted and "secret-db-password" not in predicted

    done, changed = run(collections, tmp_path, BOOT_RECOVERY_PLAY, variables)
    assert changed > 0
    assert mode_of(options) == ("0600", "root")
    assert "was mode 0644" in done and "it is now 0600" in done and "secret-db-password" not in done
    assert yaml.safe_load(options.read_text())["db_password"] == "secret-db-password"
    assert run(collections, tmp_path, BOOT_RECOVERY_PLAY, variables)[1] == 0


BOOT_RECOVERY_CHECKS_PLAY = role_tasks_play("checks.yml", "Check the settings as the role does under every tag")


@needs_root
@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo"])
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_an_options_file_path_that_is_not_a_regular_file_is_refused_before_anything_is_written(
    collections, tmp_path, kind, check
):
    # Issue 34, Low 9: a directory at the options file's path reported ok, the options
    # written into it. Now refused by the checks every tag runs, before the command.
    path = tmp_path / "fail-jobs.yml"
    target = tmp_path / "elsewhere.yml"
    if kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        target.write_text("keep: me\n")
        path.symlink_to(target)
    else:
        os.mkfifo(path)
    variables = {"boot_recovery_options_file": str(path), "boot_recovery_arvados_version": "3.2"}
    options = ("--check",) if check else ()

    said, changed = run(collections, tmp_path, BOOT_RECOVERY_CHECKS_PLAY, variables, *options, succeeds=False)

    assert changed == 0
    expected = {
        "directory": "is a directory, not a regular file: nothing was written",
        "symlink": "is a symlink to %s, not a regular file" % target,
        "fifo": "is a FIFO, not a regular file: nothing was written",
    }[kind]
    assert "boot_recovery: boot_recovery_options_file %s %s" % (path, expected) in said.replace("\n", " "), said
    if kind == "directory":
        assert list(path.iterdir()) == []
    if kind == "symlink":
        assert target.read_text() == "keep: me\n"


@needs_root
def test_a_regular_or_absent_options_file_passes_the_check(collections, tmp_path):
    path = tmp_path / "fail-jobs.yml"
    variables = {"boot_recovery_options_file": str(path), "boot_recovery_arvados_version": "3.2"}
    run(collections, tmp_path, BOOT_RECOVERY_CHECKS_PLAY, variables)
    path.write_text("{}\n")
    run(collections, tmp_path, BOOT_RECOVERY_CHECKS_PLAY, variables)
