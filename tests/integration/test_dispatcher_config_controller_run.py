"""dispatcher_config on a cluster built by Arvados' installer (issue 36), in real runs of
the role over the local connection: the controller's file and the host's config.yml are two
files of a temporary directory. Arvados 3.2.1 tools/ansible/roles/arvados_service copies
the inventory's arvados_config_file to /etc/arvados/config.yml on every run, so the role
writes into the controller's file and leaves the host's copy and the dispatcher alone;
with the controller's file turned off it refuses to edit the installer's copy unless told."""

from __future__ import annotations

import grp
import os
import stat

import pytest
import yaml

from tests.unit.roles.playbook_runs import DISPATCHER_PLAY, dispatcher_variables, run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes config.yml as root")

INSTALLERS = (
    "# Written by the operator, deployed by install-arvados-cluster.yml.\n"
    "Clusters:\n"
    "  zzzzz:\n"
    "    SystemRootToken: secret-root-token   # from the vault\n"
    "    Services:\n"
    "      Controller: {ExternalURL: 'https://zzzzz.example'}\n"
    "    PostgreSQL:\n"
    "      Connection: {host: db, password: secret-pw, dbname: arvados}\n"
    "    Collections: {BlobSigningKey: secret-blob-key}\n"
)
HOSTS_COPY = INSTALLERS.replace("from the vault", "the copy on the host")


def installer_site(tmp_path, group="root"):
    """The controller's file (0640, its group) and the host's copy; the variables of an
    installer's inventory: arvados_config_file, no dispatcher_config_controller_file."""
    controller = tmp_path / "controller" / "zzzzz-config.yml"
    controller.parent.mkdir()
    controller.write_text(INSTALLERS)
    os.chown(controller, 0, grp.getgrnam(group).gr_gid)
    controller.chmod(0o640)
    host = tmp_path / "config.yml"
    host.write_text(HOSTS_COPY)
    host.chmod(0o640)
    variables = dispatcher_variables(tmp_path, "3.2")
    for given_by_the_file in (
        "dispatcher_config_system_root_token",
        "dispatcher_config_controller_url",
    ):
        del variables[given_by_the_file]
    variables.update(
        arvados_config_file=str(controller),
        arvados_cluster_id="zzzzz",
        dispatcher_config_sbatch_arguments=["--exclusive"],
        # A secret that changes: the diff hides it.
        dispatcher_config_postgresql_connection={"host": "db2", "password": "secret-new-pw", "dbname": "arvados"},
        dispatcher_config_restart_on_change=True,
        # The drop-in goes into the test's directory, not the host's systemd.
        __dispatcher_config_dropin=str(tmp_path / "systemd" / "crunch-dispatch-slurm.service.d" / "50.conf"),
    )
    return controller, host, variables


def owner_group_mode(path):
    info = path.stat()
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def test_the_keys_go_into_the_controllers_file_and_the_installer_is_named(collections, tmp_path):
    controller, host, variables = installer_site(tmp_path, group="daemon")
    before = owner_group_mode(controller)

    predicted, changed = run(collections, tmp_path, DISPATCHER_PLAY, variables, "--check", "--diff")
    assert changed > 0 and controller.read_text() == INSTALLERS
    assert "would be written in %s" % controller in " ".join(predicted.split())
    assert "SbatchArgumentsList" in predicted and "<hidden>" in predicted and "BlobSigningKey" not in predicted
    for secret in ("secret-root-token", "secret-pw", "secret-new-pw", "secret-blob-key"):
        assert secret not in predicted

    done, changed = run(collections, tmp_path, DISPATCHER_PLAY, variables)
    assert changed > 0
    written = controller.read_text()
    assert written.startswith(INSTALLERS.split("      Controller", maxsplit=1)[0])
    assert "# from the vault" in written and "Collections: {BlobSigningKey: secret-blob-key}\n" in written
    cluster = yaml.safe_load(written)["Clusters"]["zzzzz"]
    assert cluster["Containers"]["SLURM"]["SbatchArgumentsList"][-1] == "--exclusive"
    assert list(cluster["Services"]["DispatchSLURM"]["InternalURLs"]) == ["http://localhost:9006"]
    assert owner_group_mode(controller) == before
    # The host's copy is the installer's to replace; the drop-in is still the host's.
    assert host.read_text() == HOSTS_COPY and stat.S_IMODE(host.stat().st_mode) == 0o640
    assert (tmp_path / "systemd" / "crunch-dispatch-slurm.service.d" / "50.conf").exists()
    message = " ".join(done.split())
    assert "are now in %s on the controller" % controller in message
    assert "install-arvados-cluster.yml" in message and "not restarted" in message

    again, changed = run(collections, tmp_path, DISPATCHER_PLAY, variables)
    assert changed == 0 and controller.read_text() == written
    assert "are already in %s" % controller in " ".join(again.split())


def test_no_restart_is_notified_when_only_the_controllers_file_changes(collections, tmp_path):
    controller, host, variables = installer_site(tmp_path)
    done = run(collections, tmp_path, DISPATCHER_PLAY, variables, "--tags", "dispatcher_config_settings")[0]
    assert "SbatchArgumentsList" in controller.read_text() and host.read_text() == HOSTS_COPY
    assert "RUNNING HANDLER" not in done


def test_the_installers_copy_on_the_host_is_refused_before_any_change(collections, tmp_path):
    controller, host, variables = installer_site(tmp_path)
    variables["dispatcher_config_controller_file"] = ""
    failed = " ".join(run(collections, tmp_path, DISPATCHER_PLAY, variables, succeeds=False)[0].split())
    assert "%s on localhost is the copy Arvados' installer deploys" % host in failed
    assert "the installer's next run puts its own file back" in failed
    assert "Set dispatcher_config_controller_file to %s" % controller in failed
    assert "dispatcher_config_edit_installer_copy=true" in failed
    assert host.read_text() == HOSTS_COPY and controller.read_text() == INSTALLERS
    assert not (tmp_path / "systemd").exists() and not (tmp_path / "helper").exists()


def test_the_installers_copy_is_edited_when_the_operator_says_so(collections, tmp_path):
    controller, host, variables = installer_site(tmp_path)
    variables.update(dispatcher_config_controller_file="", dispatcher_config_edit_installer_copy=True)
    done = run(collections, tmp_path, DISPATCHER_PLAY, variables, "--tags", "dispatcher_config_settings")[0]
    assert "SbatchArgumentsList" in host.read_text() and controller.read_text() == INSTALLERS
    # The host's file changed: the dispatcher's handlers run as on any host.
    assert "RUNNING HANDLER" in done


def test_a_controllers_file_that_is_missing_is_refused(collections, tmp_path):
    controller, host, variables = installer_site(tmp_path)
    variables["dispatcher_config_controller_file"] = str(tmp_path / "nowhere.yml")
    failed = " ".join(run(collections, tmp_path, DISPATCHER_PLAY, variables, succeeds=False)[0].split())
    assert (
        "dispatcher_config_controller_file names %s, which is not on the controller" % (tmp_path / "nowhere.yml")
        in failed
    )
    assert host.read_text() == HOSTS_COPY


def test_one_controllers_file_is_written_once_for_two_hosts(collections, tmp_path):
    controller, host, variables = installer_site(tmp_path)
    variables["ansible_connection"] = "local"
    play = dict(DISPATCHER_PLAY, hosts="all")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {}, "slurm2": {}}}}))
    done = run(collections, tmp_path, play, variables, "-i", inventory, "--tags", "dispatcher_config_settings")[0]
    assert "SbatchArgumentsList" in controller.read_text() and host.read_text() == HOSTS_COPY
    written = [line for line in done.splitlines() if line.startswith("changed: [")]
    assert written == ["changed: [localhost]"], done
    assert "RUNNING HANDLER" not in done


def test_hosts_naming_different_controller_files_are_refused_before_any_change(collections, tmp_path):
    controller, host, variables = installer_site(tmp_path)
    variables["ansible_connection"] = "local"
    del variables["arvados_config_file"]
    other = tmp_path / "controller" / "zzzzy-config.yml"
    other.write_text(INSTALLERS)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {"arvados_config_file": str(controller)},
                        "slurm2": {"arvados_config_file": str(other)},
                    }
                }
            }
        )
    )
    play = dict(DISPATCHER_PLAY, hosts="all")
    failed = " ".join(run(collections, tmp_path, play, variables, "-i", inventory, succeeds=False)[0].split())
    assert (
        "the hosts of this play name different cluster files on the controller (%s, %s" % (controller, other) in failed
    )
    assert controller.read_text() == INSTALLERS and other.read_text() == INSTALLERS and host.read_text() == HOSTS_COPY
