"""The watch's textfile as the installer's monitoring reads it: a real Prometheus (Debian's
`prometheus`) scrapes a real node_exporter (`prometheus-node-exporter`, textfile collector
alone) serving the file the watch's own writer (watch_metrics) puts in its directory, with
the rules the recovery_watch role installed (its `rules` entry point, promtool-checked)
loaded through `rule_files`. An alert fires and clears on what the file says: no file at
all (ArvadosRecoveryWatchAbsent), then orphans (ArvadosOrphans, with the `cluster` label
the scrape gives). Only the rules' `for:` durations are cut to nothing, so that the test
takes seconds, not a quarter of an hour; the expressions are those installed. No lab: the
file is written from a reconcile result, as the watch writes it. Two free ports, chosen when
the test starts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_metrics
from tests.integration.ports import free_ports
from tests.integration.slurm_helpers import wait_for
from tests.unit.roles.playbook_runs import collections_in, role_tasks_play, run

CLUSTER = "zzzzz"
CONTAINER = "zzzzz-dz642-0123456789abcde"
# scripts/install-deps.sh installs both for make test; a machine without them skips, saying so.
pytestmark = [
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus (Debian's prometheus) is not installed"),
    pytest.mark.skipif(
        shutil.which("prometheus-node-exporter") is None,
        reason="prometheus-node-exporter (Debian's package) is not installed",
    ),
    pytest.mark.skipif(os.geteuid() != 0, reason="the role writes the rules as root:root"),
]


def api(port: int, path: str) -> dict:
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as response:
        return json.load(response)["data"]


def firing(port: int, alert: str) -> list:
    """The labels of each firing alert of that name, as the Prometheus on `port` lists them."""
    try:
        alerts = api(port, "/api/v1/alerts")["alerts"]
    except OSError:
        return []
    return [entry["labels"] for entry in alerts if entry["labels"]["alertname"] == alert and entry["state"] == "firing"]


def wait_until(condition, what: str, timeout: float = 60.0):
    value = wait_for(condition, timeout, interval=0.5)
    assert value, "not within %ss: %s" % (timeout, what)
    return value


def started(argv: list, log: Path) -> subprocess.Popen:
    with log.open("wb") as stream:
        return subprocess.Popen(argv, stdout=stream, stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=20)


def write_textfile(path: Path, orphaned_containers: int) -> None:
    result = {
        "orphaned_containers": [
            {"uuid": CONTAINER, "state": "Running", "locked_by_uuid": "zzzzz-gj3su-000000000000000"}
        ]
        * orphaned_containers,
        "dispatcher": {"lock_held": True},
    }
    now = time.time()
    watch_metrics.write_success(str(path), watch_metrics.reconcile_metrics(result, 0.5, now, None), now)


def test_prometheus_alerts_on_the_watchs_textfile_and_clears(tmp_path):
    prometheus_port, node_exporter_port = free_ports(2)
    # The rules as the role installs them: promtool-checked, in their directory.
    rules_dir = tmp_path / "rules"
    run(
        collections_in(tmp_path),
        tmp_path,
        role_tasks_play("rules", "Alert rules", role="arvados_ops.recovery.recovery_watch"),
        {"recovery_watch_rules_dir": str(rules_dir)},
    )
    installed = rules_dir / "arvados_recovery_rules.yml"
    live_rules = tmp_path / "live-rules" / "arvados_recovery_rules.yml"
    live_rules.parent.mkdir()
    live_rules.write_text(re.sub(r"(?m)^(\s+for:) \d+m$", r"\1 0s", installed.read_text()))

    textfile_dir = tmp_path / "textfile"
    textfile_dir.mkdir()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(live_rules.parent / "*.yml")],
                "scrape_configs": [
                    {
                        "job_name": "arvados_recovery",
                        "static_configs": [
                            {"targets": ["127.0.0.1:%d" % node_exporter_port], "labels": {"cluster": CLUSTER}}
                        ],
                    }
                ],
            }
        )
    )
    node_exporter = started(
        [
            "prometheus-node-exporter",
            "--web.listen-address=127.0.0.1:%d" % node_exporter_port,
            "--collector.disable-defaults",
            "--collector.textfile",
            "--collector.textfile.directory=%s" % textfile_dir,
        ],
        tmp_path / "node_exporter.log",
    )
    prometheus = started(
        [
            "prometheus",
            "--config.file=%s" % config,
            "--storage.tsdb.path=%s" % (tmp_path / "data"),
            "--web.listen-address=127.0.0.1:%d" % prometheus_port,
        ],
        tmp_path / "prometheus.log",
    )
    try:
        # No textfile yet: the watch is absent.
        wait_until(lambda: firing(prometheus_port, "ArvadosRecoveryWatchAbsent"), "ArvadosRecoveryWatchAbsent firing")
        # Both still up: one that could not listen has exited by now, and said why.
        for process, log in ((node_exporter, "node_exporter.log"), (prometheus, "prometheus.log")):
            assert process.poll() is None, (tmp_path / log).read_text()[-2000:]

        write_textfile(textfile_dir / "arvados_recovery.prom", orphaned_containers=2)
        orphans = wait_until(lambda: firing(prometheus_port, "ArvadosOrphans"), "ArvadosOrphans firing")
        assert orphans == [
            {
                "alertname": "ArvadosOrphans",
                "cluster": CLUSTER,
                "instance": "127.0.0.1:%d" % node_exporter_port,
                "kind": "container",
                "severity": "warning",
            }
        ]
        wait_until(
            lambda: not firing(prometheus_port, "ArvadosRecoveryWatchAbsent"), "ArvadosRecoveryWatchAbsent cleared"
        )
        build = api(prometheus_port, "/api/v1/query?query=arvados_recovery_build_info")["result"]
        assert [entry["metric"]["version"] for entry in build] == [watch_metrics.COLLECTION_VERSION]

        # After the recovery the watch reads no orphan: the alert clears.
        write_textfile(textfile_dir / "arvados_recovery.prom", orphaned_containers=0)
        wait_until(lambda: not firing(prometheus_port, "ArvadosOrphans"), "ArvadosOrphans cleared")
    finally:
        stop(prometheus)
        stop(node_exporter)
