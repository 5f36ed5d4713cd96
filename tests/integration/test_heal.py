"""Healing without a human, on the real lab: the rulebook arvados_ops.recovery.heal in a real
ansible-rulebook, its source reading a fresh database and the lab's Slurm, returning the
lab's node to service after Slurm took it down with its own reboot reason; and the remedy
playbook heal_nodes run by hand with events that its guardrails must refuse. The node is
always put back in service (reconcile_helpers.node_down). heal_orphans, by hand too, on real
orphaned jobs, stray Slurm jobs and orphaned containers made in a fresh database and the
lab's Slurm: healed when the event names what its read names, refused with nothing changed
(rows and queue compared) when it names more or fewer, a second run changes nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.integration import reconcile_helpers as rh
from tests.integration.fail_jobs_helpers import write_config
from tests.integration.module_playbook import REPO_ROOT
from tests.integration.test_findings_source import RULEBOOK_CLI, rulebook_env
from tests.integration.test_playbooks import LAB_INVENTORY, PLAYBOOKS, ansible_playbook

HEAL_NODES = PLAYBOOKS / "heal_nodes.yml"
HEAL_ORPHANS = PLAYBOOKS / "heal_orphans.yml"
REBOOT_REASON = "Node unexpectedly rebooted"
pytestmark = pytest.mark.usefixtures("linked_collection")


def event(**changes):
    value = {
        "finding": "nodes_down_after_reboot",
        "names": [rh.LAB_NODE],
        "count": 1,
        "read_ok": True,
        "database_is_standby": False,
        "dispatcher": {"known": True, "lock_held": True, "lock_expected": True, "unit_active": None},
        "read_at": "2026-12-05T02:00:00Z",
    }
    value.update(changes)
    return value


def decisions(state: Path) -> list[dict]:
    log = state / "decisions.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def heal_vars(state: Path, heal_event: dict, **extra) -> dict:
    return dict(heal_event=heal_event, heal_state_dir=str(state), **extra)


def heal_nodes(lab_env, state: Path, heal_event: dict, expect_rc: int = 0, **extra):
    return ansible_playbook(lab_env, HEAL_NODES, heal_vars(state, heal_event, **extra), expect_rc=expect_rc)


@pytest.mark.cores
def test_the_remedy_runs_only_when_its_check_names_what_the_event_names(lab_env, slurm, tmp_path):
    state = tmp_path / "heal"
    with rh.node_down(slurm, reason=REBOOT_REASON):
        stopped = heal_nodes(lab_env, state, event(names=[rh.LAB_NODE, "compute9"]), expect_rc=2)
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "down"
        assert (
            "the check would resume %s, the event names compute9, %s: nothing done"
            % (
                rh.LAB_NODE,
                rh.LAB_NODE,
            )
            in stopped.stdout
        )

        ansible_playbook(lab_env, HEAL_NODES, heal_vars(state, event()))
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "idle"

    (first, second) = decisions(state)
    assert (first["decision"], first["names"], first["result"]) == ("stopped", [rh.LAB_NODE, "compute9"], None)
    assert (second["decision"], second["result"]["resumed"], second["why"]) == ("ran", [rh.LAB_NODE], "")
    assert second["playbook"] == "arvados_ops.recovery.heal_nodes" and second["event_read_at"] == "2026-12-05T02:00:00Z"
    assert not (state / "lock").exists()

    # One remedy ran in the last hour: with heal_max_per_hour 1, events only.
    with rh.node_down(slurm, reason=REBOOT_REASON):
        heal_nodes(lab_env, state, event(), heal_max_per_hour=1)
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "down"
    refused = decisions(state)[-1]
    assert refused["decision"] == "refused"
    assert refused["why"] == "1 remedies ran in the last hour, heal_max_per_hour is 1: events only"


@pytest.mark.parametrize(
    "changes, why",
    [
        ({"read_ok": False}, "the read failed"),
        ({"database_is_standby": True}, "the database read is a standby"),
        ({"dispatcher": {"known": False}}, "the dispatcher's state is unknown"),
    ],
    ids=["read-failed", "standby", "dispatcher-unknown"],
)
def test_nothing_is_done_after_a_failed_read_on_a_standby_or_with_an_unknown_dispatcher(
    lab_env, slurm, tmp_path, changes, why
):
    state = tmp_path / "heal"
    with rh.node_down(slurm, reason=REBOOT_REASON):
        heal_nodes(lab_env, state, event(**changes))
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "down"
    (refused,) = decisions(state)
    assert refused["decision"] == "refused" and refused["why"].startswith(why)


def test_a_remedy_that_holds_the_lock_keeps_the_next_one_out(lab_env, slurm, tmp_path):
    state = tmp_path / "heal"
    (state / "lock").mkdir(parents=True)
    with rh.node_down(slurm, reason=REBOOT_REASON):
        heal_nodes(lab_env, state, event())
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "down"
    assert decisions(state)[-1]["why"].startswith("another remedy holds the lock %s" % (state / "lock"))
    # Not ours: left where it was.
    assert (state / "lock").is_dir()


def test_an_event_of_another_finding_is_refused_before_anything(lab_env, tmp_path):
    state = tmp_path / "heal"
    failed = heal_nodes(lab_env, state, event(finding="orphaned_containers"), expect_rc=2)
    assert "must be an arvados_ops.recovery.findings event" in failed.stdout
    assert decisions(state) == [] and not (state / "lock").exists()


def test_the_rulebook_returns_a_node_slurm_took_down_after_a_reboot(lab_env, slurm, fresh_db, tmp_path):
    """The whole loop: the source sees the node down on two reads, the rulebook runs
    heal_nodes, whose check agrees, and the node is back; the time it took is printed."""
    state = tmp_path / "heal"
    options = tmp_path / "findings.yml"
    options.write_text(
        yaml.safe_dump(
            {
                "interval": 5,
                "config_file": str(fresh_db.write_arvados_config(tmp_path / "config.yml")),
                "cluster_prefix": rh.PREFIX,
                "settle": 1,
                "db_wait": 0,
                "arvados_version": "3.2.1",
            }
        )
    )
    options.chmod(0o600)
    heal_vars = tmp_path / "heal.yml"
    heal_vars.write_text(yaml.safe_dump({"heal_findings_options_file": str(options), "heal_notify_only": []}))
    inventory = yaml.safe_load(LAB_INVENTORY.read_text())
    inventory["all"]["vars"]["heal_state_dir"] = str(state)
    inventory_file = tmp_path / "inventory.yml"
    inventory_file.write_text(json.dumps(inventory))
    env = rulebook_env(lab_env)
    env["LAB_DIR"] = lab_env.get("LAB_DIR", str(REPO_ROOT / ".lab"))
    # ansible-rulebook runs the playbook from a directory of its own, where this checkout's
    # ansible.cfg does not apply: the collection is found where an operator installs it.
    env["ANSIBLE_COLLECTIONS_PATH"] = str(REPO_ROOT / ".build" / "collections")
    with rh.node_down(slurm, reason=REBOOT_REASON):
        down_at = time.monotonic()
        rulebook = subprocess.Popen(
            [str(RULEBOOK_CLI), "-r", "arvados_ops.recovery.heal", "-i", str(inventory_file), "--vars", str(heal_vars)],
            cwd=str(REPO_ROOT),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            while time.monotonic() - down_at < 120 and not decisions(state) and rulebook.poll() is None:
                time.sleep(0.5)
            healed_after = time.monotonic() - down_at
        finally:
            os.killpg(rulebook.pid, signal.SIGTERM)
            output = rulebook.communicate(timeout=60)[0]
        made = decisions(state)
        assert [d["decision"] for d in made] == ["ran"], output[-5000:]
        assert made[0]["result"]["resumed"] == [rh.LAB_NODE]
        assert rh.node_state(slurm, rh.LAB_NODE).rstrip("*") == "idle"
    # Two reads an interval apart, then one playbook run.
    print("node down to back in service through the rulebook: %.1f s (interval 5 s)" % healed_after)
    assert healed_after >= 5
    assert fresh_db.lab.db_password() not in output


def orphans_vars(fresh_db, tmp_path: Path, heal_event: dict) -> dict:
    """heal_orphans' variables for one event, on the test's database; state in tmp_path/heal."""
    return heal_vars(
        tmp_path / "heal",
        heal_event,
        recover_db={"config_file": str(write_config(fresh_db, tmp_path))},
        reconcile_settle=1,
        reconcile_cluster_prefix=rh.PREFIX,
    )


def heal_orphans(lab_env, fresh_db, tmp_path: Path, heal_event: dict, expect_rc: int = 0):
    return ansible_playbook(lab_env, HEAL_ORPHANS, orphans_vars(fresh_db, tmp_path, heal_event), expect_rc=expect_rc)


def orphans_event(finding: str, names) -> dict:
    return event(finding=finding, names=sorted(names), count=len(names))


def database_rows(records) -> dict:
    """What a remedy could change in the database: jobs, containers, tokens, and the log rows."""
    conn = records.conn
    rows = {
        "jobs": conn.execute("SELECT uuid, state, modified_at FROM jobs ORDER BY uuid").fetchall(),
        "containers": conn.execute("SELECT uuid, state, modified_at FROM containers ORDER BY uuid").fetchall(),
        "tokens": conn.execute("SELECT uuid, expires_at FROM api_client_authorizations ORDER BY uuid").fetchall(),
        "logs": conn.execute("SELECT count(*) FROM logs").fetchone(),
    }
    conn.commit()
    return rows


def queued(slurm) -> dict:
    """The test's own Slurm jobs still queued, with their state."""
    return {job_id: job.state for job_id, job in slurm.queue().items() if job_id in slurm.submitted}


def refused_with_nothing_changed(lab_env, fresh_db, records, slurm, tmp_path, finding: str, read: list, wrong: list):
    """Events naming more, then fewer, than the read: each run stops, says why, changes nothing."""
    before = (database_rows(records), queued(slurm))
    for names in wrong:
        stopped = heal_orphans(lab_env, fresh_db, tmp_path, orphans_event(finding, names), expect_rc=2)
        assert (
            "the read names %s as %s, the event names %s: nothing done"
            % (", ".join(sorted(read)), finding, ", ".join(sorted(names)))
            in stopped.stdout
        ), stopped.stdout[-3000:]
        assert (database_rows(records), queued(slurm)) == before


@pytest.mark.cores
def test_heal_orphans_fails_exactly_the_orphaned_jobs_an_event_names(fresh_db, lab_env, slurm, records, tmp_path):
    # A job whose Slurm job is queued: the evidence that jobs run under this Slurm, and work
    # the remedy must leave alone.
    healthy = records.job("Running")
    healthy_id = slurm.submit(healthy, hold=True)
    lost = sorted([records.job("Running"), records.job("Running")])
    refused_with_nothing_changed(
        lab_env, fresh_db, records, slurm, tmp_path, "orphaned_jobs", lost, [[*lost, healthy], lost[:1]]
    )

    ansible_playbook(lab_env, HEAL_ORPHANS, orphans_vars(fresh_db, tmp_path, orphans_event("orphaned_jobs", lost)))
    assert {uuid: records.state("jobs", uuid) for uuid in [*lost, healthy]} == dict.fromkeys(lost, "Failed") | {
        healthy: "Running"
    }
    assert queued(slurm) == {healthy_id: "PENDING"}

    again = heal_orphans(lab_env, fresh_db, tmp_path, orphans_event("orphaned_jobs", lost))
    assert again.changed == 0, again.stdout[-3000:]
    made = decisions(tmp_path / "heal")
    assert [d["decision"] for d in made] == ["stopped", "stopped", "ran", "nothing_to_do"]
    assert made[2]["playbook"] == "arvados_ops.recovery.heal_orphans"
    assert (made[2]["result"]["failed"], made[2]["result"]["requeued"]) == (lost, [])
    assert not (tmp_path / "heal" / "lock").exists()


def test_heal_orphans_stops_exactly_the_stray_slurm_jobs_an_event_names(fresh_db, lab_env, slurm, records, tmp_path):
    healthy = records.job("Running")
    healthy_id = slurm.submit(healthy, hold=True)
    # Slurm jobs of a job that ended and of a container cancelled: crunch v1's and
    # crunch-dispatch-slurm's strays.
    strays = sorted(
        [slurm.submit(records.job("Complete"), hold=True), slurm.submit(records.container("Cancelled", 0), hold=True)]
    )
    refused_with_nothing_changed(
        lab_env, fresh_db, records, slurm, tmp_path, "stray_slurm_jobs", strays, [[*strays, healthy_id], strays[:1]]
    )
    rows = database_rows(records)

    heal_orphans(lab_env, fresh_db, tmp_path, orphans_event("stray_slurm_jobs", strays))
    assert queued(slurm) == {healthy_id: "PENDING"}
    assert database_rows(records) == rows

    again = heal_orphans(lab_env, fresh_db, tmp_path, orphans_event("stray_slurm_jobs", strays))
    assert again.changed == 0, again.stdout[-3000:]
    made = decisions(tmp_path / "heal")
    assert [d["decision"] for d in made] == ["stopped", "stopped", "ran", "nothing_to_do"]
    assert made[2]["result"]["stopped_slurm_jobs"] == strays


def test_heal_orphans_only_reports_orphaned_containers(fresh_db, lab_env, slurm, records, tmp_path):
    live = records.container("Running")
    live_id = slurm.submit(live, hold=True)
    lost = records.container("Running")
    before = (database_rows(records), queued(slurm))

    heal_orphans(lab_env, fresh_db, tmp_path, orphans_event("orphaned_containers", [lost]))

    assert (database_rows(records), queued(slurm)) == before and live_id in before[1]
    (reported,) = decisions(tmp_path / "heal")
    assert reported["decision"] == "reported" and reported["result"]["orphaned_containers"] == [lost + " Running"]


def test_heal_orphans_refuses_an_event_of_another_finding_before_anything(lab_env, tmp_path):
    state = tmp_path / "heal"
    failed = ansible_playbook(lab_env, HEAL_ORPHANS, heal_vars(state, event()), expect_rc=2)
    assert "of the finding orphaned_jobs or orphaned_containers or stray_slurm_jobs that names" in failed.stdout
    assert decisions(state) == [] and not (state / "lock").exists()
