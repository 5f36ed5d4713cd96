"""The recovery playbooks on an inventory shaped like Arvados' own installer's
(tools/ansible/examples/full-cluster-inventory.yml at 3.2.1 and main: its groups, with two
arvados_api hosts, and `arvados_config_file` / `arvados_cluster_id` in `all`; written here,
not copied), run for real on the lab: both API hosts and the Slurm host are this machine
under local-connection aliases, the cluster's configuration file is on the controller (a
temporary file), and the only variable the installer's inventory lacks is
recover_slurm_hosts, where Slurm is. No recover_db, reconcile_db, recover_before or
reconcile_cluster_prefix is given: the database settings, Containers.MaxDispatchAttempts
and the cluster id come from that file."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab import datagen, labctl
from tests.integration import fail_jobs_helpers as helpers
from tests.integration import reconcile_helpers as rh
from tests.integration.test_playbooks import NODE_REBOOT, RECOVER, Run, ansible_playbook, queued_ids, states, submit_for

pytestmark = pytest.mark.usefixtures("linked_collection")

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": str(helpers.PYTHON)}
# Never answers: nothing listens on port 1.
UNREACHABLE = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1}
MAX_DISPATCH_ATTEMPTS = 7


def cluster_config(fresh_db, directory: Path, password: str | None = None) -> Path:
    """The whole cluster configuration as the installer's operator keeps it on the controller
    (examples/simple-cluster-config.yml's shape), naming the test's database."""
    lab = fresh_db.lab
    config = {
        "Clusters": {
            rh.PREFIX: {
                "PostgreSQL": {
                    "Connection": {
                        "user": labctl.DB_ROLE,
                        "password": password or lab.db_password(),
                        "host": "127.0.0.1",
                        "port": str(lab.pg_port),
                        "dbname": fresh_db.name,
                    }
                },
                "ManagementToken": "FIXMEDefaultManagementToken",
                "SystemRootToken": "FIXMEDefaultSystemRootToken",
                "Containers": {"MaxDispatchAttempts": MAX_DISPATCH_ATTEMPTS},
                "Services": {"Controller": {"ExternalURL": "https://api1.example:8443"}},
            }
        }
    }
    path = directory / ("%s-config.yml" % rh.PREFIX)
    labctl.write_private_file(path, yaml.safe_dump(config))
    return path


def installer_inventory(
    lab_env, directory: Path, config_file: Path, api1: dict | None = None, **extra_vars: Any
) -> Path:
    """The installer's groups and variables; recover_slurm_hosts names the Slurm host (the
    installer has no Slurm group). The lab's Slurm configuration and the `for:` duration are the
    lab's own, as in playbooks/inventory/lab.yml."""
    all_vars = {
        "arvados_config_file": str(config_file),
        "arvados_cluster_id": rh.PREFIX,
        "arvados_tls": {"Default": {"cert": {"path": "/etc/ssl/certs/ssl-cert-snakeoil.pem"}}},
        "recover_slurm_hosts": "api2",
        "recover_slurm_environment": {"SLURM_CONF": lab_env["SLURM_CONF"]},
        "reconcile_settle": 1,
        **extra_vars,
    }
    inventory = {
        "all": {"vars": all_vars},
        "arvados_api": {"hosts": {"api1": api1 or LOCAL, "api2": LOCAL}},
        "arvados_controller": {"hosts": {"api1": None}},
        "arvados_websocket": {"hosts": {"api1": None}},
        "arvados_postgresql": {"hosts": {"api1": None}},
        "arvados_keepstore": {"hosts": {"keep0": LOCAL}},
        "arvados_workbench": {"hosts": {"api1": None}},
    }
    path = directory / "installer-inventory.yml"
    path.write_text(json.dumps(inventory))
    return path


def boot_time() -> int:
    """This machine's boot time (btime), which `recover_before: reboot` means here."""
    stat = Path("/proc/stat").read_text()
    return int(re.search(r"^btime ([0-9]+)$", stat, re.M).group(1))


def jobs_before_this_boot(fresh_db):
    """Running jobs all started before this machine booted (the default threshold), none after."""
    boot = datagen.EPOCH + timedelta(seconds=boot_time() - 5)
    return helpers.load(fresh_db, boot_time=boot, running=5, running_after_boot=0, running_unstarted=1)


def test_recover_after_reboot_takes_the_database_from_arvados_config_file(fresh_db, lab_env, slurm, tmp_path):
    summary = jobs_before_this_boot(fresh_db)
    stale = summary.running_before_boot
    slurm_ids = submit_for(slurm, stale[:2])
    inventory = installer_inventory(lab_env, tmp_path, cluster_config(fresh_db, tmp_path))
    dump_before = helpers.pg_dump(fresh_db, lab_env)

    predicted = ansible_playbook(lab_env, RECOVER, {}, flags=["--check", "-v"], inventory=inventory)

    assert helpers.pg_dump(fresh_db, lab_env) == dump_before
    assert len(queued_ids(slurm, stale)) == 2
    assert predicted.summary()[1].startswith("%d jobs would be failed" % len(stale))
    assert "The database steps run on api1, the first host of arvados_api that answered." in predicted.stdout

    run = ansible_playbook(lab_env, RECOVER, {}, flags=["-v"], inventory=inventory)

    with fresh_db.connect() as conn:
        assert states(conn, stale) == {job: "Failed" for job in stale}
    assert queued_ids(slurm, list(slurm_ids)) == {}
    assert run.summary()[1].startswith("%d jobs failed" % len(stale))
    assert run.summary()[3].startswith("2 Slurm jobs cancelled, %d already absent (on api2)" % (len(stale) - 2))
    # The database steps ran once, on the first API host only.
    assert run.recap["api1"]["changed"] == 1 and run.recap["api2"]["changed"] == 1
    # Check mode predicted exactly the changes the run made.
    assert {host: counts["changed"] for host, counts in predicted.recap.items()} == {
        host: counts["changed"] for host, counts in run.recap.items()
    }
    assert "Find the jobs the reboot left Running" in run.stdout
    for output in (predicted.stdout, run.stdout):
        assert fresh_db.lab.db_password() not in output

    again = ansible_playbook(lab_env, RECOVER, {}, inventory=inventory)
    assert again.changed == 0, again.stdout[-3000:]
    assert again.summary()[1] == "0 jobs failed"


def test_the_first_api_host_that_answers_runs_the_database_steps(fresh_db, lab_env, tmp_path):
    summary = jobs_before_this_boot(fresh_db)
    inventory = installer_inventory(lab_env, tmp_path, cluster_config(fresh_db, tmp_path), api1=UNREACHABLE)

    run = ansible_playbook(lab_env, RECOVER, {}, flags=["--check"], inventory=inventory)

    assert "The database steps run on api2, the first host of arvados_api that answered (api1 did not answer)." in (
        run.stdout
    )
    assert run.summary()[1].startswith("%d jobs would be failed" % len(summary.running_before_boot))
    assert run.recap["api1"]["unreachable"] == 0 and run.recap["api1"]["ignored"] == 1


def test_an_explicit_recover_db_wins_over_arvados_config_file(fresh_db, lab_env, tmp_path):
    summary = jobs_before_this_boot(fresh_db)
    # The cluster's file names a password the server refuses: it must not be the one used.
    config = cluster_config(fresh_db, tmp_path, password="not-the-password")
    explicit = {"config_file": str(helpers.write_config(fresh_db, tmp_path))}
    inventory = installer_inventory(lab_env, tmp_path, config, recover_db=explicit)

    run = ansible_playbook(lab_env, RECOVER, {}, inventory=inventory)

    with fresh_db.connect() as conn:
        assert set(states(conn, summary.running_before_boot).values()) == {"Failed"}
    assert run.summary()[1].startswith("%d jobs failed" % len(summary.running_before_boot))

    # Without it, that file's settings are used, and refused by the server, before any change.
    dump_before = helpers.pg_dump(fresh_db, lab_env)
    bare = installer_inventory(lab_env, tmp_path, config)
    refused = ansible_playbook(lab_env, RECOVER, {}, inventory=bare, expect_rc=2)
    assert "password authentication failed" in refused.stdout and "not-the-password" not in refused.stdout
    assert helpers.pg_dump(fresh_db, lab_env) == dump_before


def test_a_cluster_id_the_file_lacks_is_refused_naming_it(fresh_db, lab_env, tmp_path):
    inventory = installer_inventory(lab_env, tmp_path, cluster_config(fresh_db, tmp_path), arvados_cluster_id="xurid")

    refused = ansible_playbook(lab_env, RECOVER, {}, inventory=inventory, expect_rc=2)

    assert "arvados_config_file: cluster_id xurid is not in config_file" in refused.stdout
    assert "which defines: %s" % rh.PREFIX in refused.stdout
    assert fresh_db.lab.db_password() not in refused.stdout


def test_recover_after_node_reboot_takes_the_database_limit_and_prefix_from_the_file(
    fresh_db, lab_env, slurm, records, tmp_path
):
    live = records.container("Running")
    finished = records.container("Complete")
    locked = records.container("Locked")
    records.lock(locked, rh.DISPATCHER_TOKEN, 3)
    held = {uuid: slurm.submit(uuid, hold=True) for uuid in (live, finished)}
    inventory = installer_inventory(lab_env, tmp_path, cluster_config(fresh_db, tmp_path))

    predicted = ansible_playbook(lab_env, NODE_REBOOT, {}, flags=["--check", "-v"], inventory=inventory)
    assert set(held) <= {job.name for job in slurm.queue().values()}
    first = ansible_playbook(lab_env, NODE_REBOOT, {}, flags=["-v"], inventory=inventory)
    second = ansible_playbook(lab_env, NODE_REBOOT, {}, inventory=inventory)

    assert predicted.summary()[0].startswith("1 stray Slurm jobs would be stopped: %s" % finished)
    summary = first.summary()
    assert summary[0].startswith("1 stray Slurm jobs stopped: %s" % finished)
    queued = {job.name for job in slurm.queue().values()}
    assert live in queued and finished not in queued
    # Containers.MaxDispatchAttempts from the file on the controller, and the cluster id as
    # the prefix (the system root token's uuid is <prefix>-gj3su-000000000000000).
    assert (
        "MaxDispatchAttempts from config_file %s, Clusters.%s.Containers.MaxDispatchAttempts"
        % (
            tmp_path / ("%s-config.yml" % rh.PREFIX),
            rh.PREFIX,
        )
        in summary[-2]
    ), summary[-2]
    assert "%s: token system_root_token, lock_count 3 of %d" % (locked, MAX_DISPATCH_ATTEMPTS) in summary[-2]
    assert "4 dispatch attempts left" in summary[-2]
    assert isinstance(first, Run) and first.changed >= 1
    assert predicted.changed == first.changed
    assert second.changed == 0, second.stdout[-3000:]
    assert second.summary()[0].startswith("0 stray Slurm jobs stopped")
    for output in (predicted.stdout, first.stdout):
        assert fresh_db.lab.db_password() not in output
