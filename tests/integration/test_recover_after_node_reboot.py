"""playbooks/recover_after_node_reboot.yml, run for real: ansible-playbook with the lab
inventory, the lab's Slurm (its one node taken down as a reboot does, and brought back)
and a fresh database per test. Each test cancels, by id, the Slurm jobs it submitted.
"""

from __future__ import annotations

import pytest

from tests.integration import reconcile_helpers as rh
from tests.integration.fail_jobs_helpers import write_config
from tests.integration.test_playbooks import PLAYBOOKS, ansible_playbook

NODE_REBOOT = PLAYBOOKS / "recover_after_node_reboot.yml"

pytestmark = pytest.mark.usefixtures("linked_collection")


def playbook_vars(fresh_db, tmp_path, **extra):
    values = {
        "recover_db": {"config_file": str(write_config(fresh_db, tmp_path))},
        "reconcile_settle": 1,
        "reconcile_cluster_prefix": rh.PREFIX,
    }
    values.update(extra)
    return values


def test_after_a_node_reboot_exactly_the_lost_work_is_recovered(fresh_db, lab_env, slurm, records, tmp_path):
    live_job = records.job("Running")
    killed_job = records.job("Running")
    node_job = records.job("Running")
    complete_job = records.job("Complete")
    live_container = records.container("Running")
    lost_container = records.container("Running")
    cancelled_container = records.container("Cancelled", priority=0)
    held = {
        uuid: slurm.submit(uuid, hold=True) for uuid in (live_job, complete_job, live_container, cancelled_container)
    }
    killed_id = slurm.submit(killed_job)
    node_id = rh.submit_like_the_dispatcher(slurm, node_job)
    slurm.wait_for_state(node_id, "RUNNING")
    slurm.run("scancel", killed_id)
    with rh.node_down(slurm):
        assert rh.wait_for(lambda: slurm.final_state(node_id) == "NODE_FAIL", 30), slurm.final_state(node_id)
        variables = playbook_vars(fresh_db, tmp_path)

        predicted = ansible_playbook(lab_env, NODE_REBOOT, variables, flags=["--check"])
        assert {uuid: records.state("jobs", uuid) for uuid in (killed_job, node_job)} == {
            killed_job: "Running",
            node_job: "Running",
        }
        assert set(held) <= {job.name for job in slurm.queue().values()}

        first = ansible_playbook(lab_env, NODE_REBOOT, variables)
        second = ansible_playbook(lab_env, NODE_REBOOT, variables)

    summary = first.summary()
    assert predicted.summary()[0].startswith("2 stray Slurm jobs would be stopped")
    assert summary[0].startswith("2 stray Slurm jobs stopped")
    assert sorted(summary[0].split(": ")[1].split(" (")[0].split(", ")) == sorted([complete_job, cancelled_container])
    assert summary[1].startswith("2 orphaned crunch v1 jobs failed")
    assert lost_container in summary[3] and live_container not in summary[3]
    assert summary[4].startswith("NO DISPATCHER IS ALIVE")
    assert "start crunch-dispatch-slurm by hand" in summary[4]
    assert {uuid: records.state("jobs", uuid) for uuid in (live_job, killed_job, node_job)} == {
        live_job: "Running",
        killed_job: "Failed",
        node_job: "Failed",
    }
    queued = {job.name for job in slurm.queue().values()}
    assert {live_job, live_container} <= queued
    assert not {complete_job, cancelled_container} & queued
    assert records.state("containers", lost_container) == "Running"
    assert first.changed >= 2
    assert second.changed == 0, second.stdout[-3000:]
    assert second.summary()[0].startswith("0 stray Slurm jobs stopped")


def test_a_job_with_its_slurm_job_alive_is_never_touched(fresh_db, lab_env, slurm, records, tmp_path):
    live_job = records.job("Running")
    slurm.submit(live_job, hold=True)

    run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, reconcile_orphans="always"))

    assert run.changed == 0
    assert records.state("jobs", live_job) == "Running"
    assert live_job in {job.name for job in slurm.queue().values()}


def test_without_evidence_nothing_is_failed_and_the_summary_says_why(fresh_db, lab_env, records, tmp_path):
    lost_job = records.job("Running")

    run = ansible_playbook(lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path))

    assert run.changed == 0
    assert records.state("jobs", lost_job) == "Running"
    assert run.summary()[2].startswith("Orphans withheld: jobs; Slurm shows no Slurm job")


def test_a_bad_variable_fails_before_anything_changes(fresh_db, lab_env, records, tmp_path):
    lost_job = records.job("Running")
    completed = ansible_playbook(
        lab_env, NODE_REBOOT, playbook_vars(fresh_db, tmp_path, reconcile_orphans="sometimes"), expect_rc=2
    )
    assert "reconcile_orphans one of evidence, always, never (got sometimes)" in completed.stdout
    assert records.state("jobs", lost_job) == "Running"
