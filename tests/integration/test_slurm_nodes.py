"""Nodes after a reboot and Locked containers' locks, on the real lab: the lab's one Slurm
node taken down with Slurm's own reboot reason or drained with an administrator's, read by
arvados_reconcile_info, resumed (or not) by slurm_node_resume in real ansible-playbook runs;
locks read from rows of the real schema. The node is always put back in service, even when
a test fails (reconcile_helpers.node_down)."""

from __future__ import annotations

import pytest

from tests.integration import module_playbook
from tests.integration import reconcile_helpers as rh
from tests.integration.test_playbooks import ansible_playbook
from tests.integration.test_recover_after_node_reboot import NODE_REBOOT, playbook_vars

RESUME = "arvados_ops.recovery.slurm_node_resume"
REBOOT_REASON = "Node unexpectedly rebooted"
ADMIN_REASON = "disk | replaced = soon, ticket 12"


@pytest.fixture
def config(fresh_db, tmp_path):
    return fresh_db.write_arvados_config(tmp_path / "config.yml")


def lab_node(result):
    return {node["name"]: node for node in result["slurm_nodes"]}.get(rh.LAB_NODE)


def resume(lab_env, tmp_path, *tasks):
    return module_playbook.run_playbook(RESUME, lab_env, tmp_path, list(tasks)).results


def test_a_node_slurm_took_down_after_a_reboot_is_reported_and_resumed(lab_env, slurm, config, tmp_path):
    with rh.node_down(slurm, reason=REBOOT_REASON):
        result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, orphans="never"))
        assert not result.get("failed"), result.get("msg")
        node = lab_node(result)
        assert node is not None, result["slurm_nodes"]
        assert (node["state"], node["reason"], node["reason_is_unexpected_reboot"]) == ("down", REBOOT_REASON, True)
        assert node["slurmd_responding"] is True and node["reason_set_by"] == "root"
        assert result["slurm"]["scontrol_calls"] == 1

        predicted, done, again = resume(
            lab_env,
            tmp_path,
            {"args": {"name": [rh.LAB_NODE]}, "check": True, "diff": True},
            {"args": {"name": [rh.LAB_NODE]}},
            {"args": {"name": [rh.LAB_NODE]}},
        )
        assert predicted["changed"] is True and predicted["resumed"] == [rh.LAB_NODE]
        assert predicted["diff"]["after"] == "%s RESUME\n" % rh.LAB_NODE
        assert predicted["nodes"][rh.LAB_NODE]["state"] == "down"
        assert done["changed"] is True and done["resumed"] == [rh.LAB_NODE], done
        assert done["nodes"][rh.LAB_NODE]["state"] is None and done["nodes"][rh.LAB_NODE]["reason"] is None
        assert again["changed"] is False and again["in_service"] == [rh.LAB_NODE]
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "idle"


def test_an_administrators_drain_is_reported_and_left_alone(lab_env, slurm, config, tmp_path):
    with rh.node_down(slurm, reason=ADMIN_REASON, state="drain"):
        result = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, orphans="never"))
        node = lab_node(result)
        assert (node["state"], node["reason"], node["reason_is_unexpected_reboot"]) == ("drain", ADMIN_REASON, False)

        predicted, done = resume(
            lab_env, tmp_path, {"args": {"name": [rh.LAB_NODE]}, "check": True}, {"args": {"name": [rh.LAB_NODE]}}
        )
        for outcome in (predicted, done):
            assert outcome["changed"] is False and outcome["resumed"] == []
            (refused,) = outcome["refused"]
            assert refused["reason"] == ADMIN_REASON and "an administrator's, left alone" in refused["why"]
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") in ("drained", "draining")
        again = rh.run_reconcile(lab_env, tmp_path, rh.reconcile_args(config, orphans="never"))
        assert lab_node(again)["reason"] == ADMIN_REASON


def test_each_locked_orphan_gets_its_lock_diagnosed(lab_env, records, config, tmp_path):
    by_root = records.container("Locked")
    records.lock(by_root, rh.DISPATCHER_TOKEN, 4)
    exhausted = records.container("Locked")
    records.lock(exhausted, rh.DISPATCHER_TOKEN, 10)
    expired_token = records.token(expires_in=-3600)[0]
    expired = records.container("Locked")
    records.lock(expired, expired_token, 1)
    live_token, owner = records.token(expires_in=None)
    theirs = records.container("Locked")
    records.lock(theirs, live_token, 2)
    gone = records.container("Locked")
    records.lock(gone, rh.PREFIX + "-gj3su-0123456789abcde", 1)
    running = records.container("Running")

    result = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, orphans="always", kinds=["containers"], arvados_version="3.2.1")
    )

    assert not result.get("failed"), result.get("msg")
    locks = {entry["uuid"]: entry.get("lock") for entry in result["orphaned_containers"]}
    assert locks[running] is None
    assert result["max_dispatch_attempts"] == {"value": 10, "source": "Arvados 3.2.1's default"}
    assert (locks[by_root]["token"], locks[by_root]["lock_count"], locks[by_root]["dispatch_attempts_left"]) == (
        "system_root_token",
        4,
        6,
    )
    assert "do not unlock it" in locks[exhausted]["action"]
    assert locks[expired]["token"] == "expired" and locks[expired]["token_expires_at"]
    assert (locks[theirs]["token"], locks[theirs]["token_user_uuid"]) == ("another", owner)
    assert locks[gone]["token"] == "missing" and "PATCH /arvados/v1/containers/%s" % gone in locks[gone]["action"]
    # One statement for the five locks, beside the reconciliation's own.
    assert result["database_statements"] <= 8


def test_config_yml_sets_the_limit(lab_env, records, config, tmp_path):
    text = config.read_text()
    assert "Containers:" not in text
    config.write_text(
        text.replace("    PostgreSQL:", "    Containers:\n      MaxDispatchAttempts: 3\n    PostgreSQL:", 1)
    )
    locked = records.container("Locked")
    records.lock(locked, rh.DISPATCHER_TOKEN, 3)
    result = rh.run_reconcile(
        lab_env, tmp_path, rh.reconcile_args(config, orphans="always", kinds=["containers"], arvados_version="3.2.1")
    )
    assert result["max_dispatch_attempts"]["value"] == 3, result.get("msg")
    assert result["max_dispatch_attempts"]["source"].endswith("Clusters.zzzzz.Containers.MaxDispatchAttempts")
    assert result["orphaned_containers"][0]["lock"]["dispatch_attempts_left"] == 0


def playbook(lab_env, fresh_db, tmp_path, flags=(), **extra):
    variables = playbook_vars(
        fresh_db, tmp_path, reconcile_kinds=["containers"], recover_slurm_user="*", recover_resume_nodes=True
    )
    variables.update(extra)
    return ansible_playbook(lab_env, NODE_REBOOT, variables, flags=list(flags))


@pytest.mark.usefixtures("linked_collection")
def test_the_recovery_playbook_resumes_a_rebooted_node_when_asked(lab_env, slurm, fresh_db, tmp_path):
    with rh.node_down(slurm, reason=REBOOT_REASON):
        predicted = playbook(lab_env, fresh_db, tmp_path, flags=["--check"])
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "down"
        not_asked = playbook(lab_env, fresh_db, tmp_path, recover_resume_nodes=False)
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "down"
        done = playbook(lab_env, fresh_db, tmp_path)
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "idle"
    down = "1 Slurm nodes down or drained: %s down (%s); " % (rh.LAB_NODE, REBOOT_REASON)
    assert predicted.summary()[-1] == down + "would resume: %s" % rh.LAB_NODE
    assert not_asked.summary()[-1].startswith(down + "none resumed (recover_resume_nodes=true resumes those")
    assert done.summary()[-1] == down + "resumed: %s" % rh.LAB_NODE
    assert done.summary()[-2] == "No orphaned Locked container"


@pytest.mark.usefixtures("linked_collection")
def test_the_recovery_playbook_leaves_an_administrators_drain_alone(lab_env, slurm, fresh_db, tmp_path):
    with rh.node_down(slurm, reason=ADMIN_REASON, state="drain"):
        run = playbook(lab_env, fresh_db, tmp_path)
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") in ("drained", "draining")
    assert run.summary()[-1] == (
        "1 Slurm nodes down or drained: %s drain (%s); none has Slurm's reason %r, all left alone"
        % (rh.LAB_NODE, ADMIN_REASON, REBOOT_REASON)
    )
