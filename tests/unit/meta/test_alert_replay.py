"""The cluster scenario's replay of the watch's readings through the alert rules
(extensions/molecule/cluster/alert_replay.py), on gauges rendered by the watch's own code
and checked by the real promtool: the verify step it serves can only pass if it can fail."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_metrics
from tests.unit.molecule_config import REPO_ROOT

SCRIPT = REPO_ROOT / "extensions" / "molecule" / "cluster" / "alert_replay.py"
pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is missing")


def load_script():
    spec = importlib.util.spec_from_file_location("alert_replay", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reading(tmp_path, name, orphaned_jobs):
    """A .prom file as the watch writes it after a read that found orphaned_jobs."""
    result = {
        "orphaned_jobs": [
            {"uuid": "zzzzz-8i9sb-%015d" % number, "state": "Running"} for number in range(orphaned_jobs)
        ],
        "orphaned_containers": [],
        "stray_slurm_jobs": [],
    }
    metrics = watch_metrics.reconcile_metrics(
        result, duration_seconds=0.5, finished_at=1796320000.0, dispatcher_active=True
    )
    path = tmp_path / ("%s.prom" % name)
    watch_metrics.write_success(str(path), metrics, attempted_at=1796320000.0)
    return path


def replay(capsys, *paths):
    status = load_script().main(["--instance", "slurmctld", *map(str, paths)])
    return status, json.loads(capsys.readouterr().out)


def test_orphans_that_come_with_a_reboot_and_go_with_the_recovery_fire_then_stop(tmp_path, capsys):
    status, out = replay(capsys, reading(tmp_path, "b", 0), reading(tmp_path, "r", 2), reading(tmp_path, "c", 0))
    assert out["orphaned_jobs"] == [0, 2, 0]
    assert status == 0, out["promtool"]
    assert "SUCCESS" in out["promtool"]


@pytest.mark.parametrize(
    ("counts", "why"),
    [((0, 0, 0), "nothing orphaned: the alert never fires"), ((0, 2, 2), "the recovery left them: it never stops")],
)
def test_gauges_that_do_not_move_so_fail_the_replay(tmp_path, capsys, counts, why):
    paths = [reading(tmp_path, "reading%d" % number, count) for number, count in enumerate(counts)]
    status, out = replay(capsys, *paths)
    assert status != 0, why
    assert "FAILED" in out["promtool"]


def test_a_series_missing_from_a_reading_is_a_gap_not_a_zero():
    script = load_script()
    key = ("arvados_recovery_orphans", (("kind", "job"), ("state", "Running")))
    series = script.input_series([{key: 1.0}, {}, {key: 0.0}], "h")
    assert series == [
        {"series": 'arvados_recovery_orphans{instance="h", kind="job", state="Running"}', "values": "1 _x14 0x9"}
    ]
