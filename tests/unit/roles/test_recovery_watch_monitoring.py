# SPDX-License-Identifier: GPL-3.0-or-later
"""recovery_watch's two ways to the installer's monitoring, run for real on localhost with
every path in a temporary directory: the Alloy blocks that read the textfile, and the alert
rules installed only once the real promtool has checked them. Check mode writes nothing and
predicts the change; a second run changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.unit.roles.playbook_runs import collections_in, role_tasks_play, run

REPO_ROOT = Path(__file__).resolve().parents[3]
RULES = REPO_ROOT / "prometheus" / "arvados_recovery_rules.yml"
ROLE = "arvados_ops.recovery.recovery_watch"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes its files as root:root")


def alloy_variables(tmp_path, **extra):
    values = {
        "recovery_watch_textfile_consumer": "alloy",
        "recovery_watch_alloy_snippet_file": str(tmp_path / "etc" / "recovery-watch.alloy"),
        "recovery_watch_metrics_file": "/var/lib/arvados-textfile/arvados_recovery.prom",
        "arvados_cluster_id": "zzzzz",
    }
    values.update(extra)
    return values


def rules_variables(tmp_path, **extra):
    values = {"recovery_watch_rules_dir": str(tmp_path / "rules")}
    values.update(extra)
    return values


@needs_root
def test_the_alloy_blocks_read_the_textfile_directory_and_label_the_cluster(tmp_path):
    collections = collections_in(tmp_path)
    play = role_tasks_play("alloy", "Alloy blocks", role=ROLE)
    settings = alloy_variables(tmp_path)
    snippet = tmp_path / "etc" / "recovery-watch.alloy"

    stdout, changed = run(collections, tmp_path, play, settings, "--check", "--diff")
    assert changed == 2 and not snippet.exists()
    assert '+    directory = "/var/lib/arvados-textfile"' in stdout

    run(collections, tmp_path, play, settings)
    text = snippet.read_text()
    assert 'prometheus.exporter.unix "arvados_recovery" {' in text
    assert 'set_collectors = ["textfile"]' in text
    assert 'replacement  = "zzzzz"' in text
    assert "targets    = discovery.relabel.arvados_recovery.output" in text
    assert "forward_to = [prometheus.remote_write.default.receiver]" in text
    assert oct(snippet.stat().st_mode & 0o777) == "0o644"
    assert run(collections, tmp_path, play, settings)[1] == 0


@needs_root
def test_without_a_cluster_id_the_blocks_scrape_the_exporter_unlabelled(tmp_path):
    collections = collections_in(tmp_path)
    settings = alloy_variables(
        tmp_path, recovery_watch_cluster="", recovery_watch_alloy_forward_to="prometheus.remote_write.site.receiver"
    )
    run(collections, tmp_path, role_tasks_play("alloy", "Alloy blocks", role=ROLE), settings)
    text = (tmp_path / "etc" / "recovery-watch.alloy").read_text()
    assert "discovery.relabel" not in text
    assert "targets    = prometheus.exporter.unix.arvados_recovery.targets" in text
    assert "forward_to = [prometheus.remote_write.site.receiver]" in text


@needs_root
def test_the_rules_are_installed_as_shipped_once_promtool_checked_them(tmp_path):
    collections = collections_in(tmp_path)
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    installed = tmp_path / "rules" / "arvados_recovery_rules.yml"

    stdout, changed = run(collections, tmp_path, play, rules_variables(tmp_path), "--check", "--diff")
    assert changed == 2 and not (tmp_path / "rules").exists()

    stdout, changed = run(collections, tmp_path, play, rules_variables(tmp_path))
    assert installed.read_bytes() == RULES.read_bytes()
    assert oct(installed.stat().st_mode & 0o777) == "0o644"
    # systemd is not PID 1 here: nothing to reload, and the handler says so by skipping.
    assert "RUNNING HANDLER [arvados_ops.recovery.recovery_watch : Reload Prometheus after a rules change]" in stdout
    assert run(collections, tmp_path, play, rules_variables(tmp_path))[1] == 0


@needs_root
def test_rules_promtool_refuses_never_replace_those_in_place(tmp_path):
    collections = collections_in(tmp_path)
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    installed = tmp_path / "rules" / "arvados_recovery_rules.yml"
    installed.parent.mkdir()
    installed.write_text("groups: []\n")
    refusing = tmp_path / "promtool"
    refusing.write_text("#!/bin/sh\necho 'FAILED: 1 rule invalid' >&2\nexit 1\n")
    refusing.chmod(0o755)

    stdout = run(
        collections, tmp_path, play, rules_variables(tmp_path, recovery_watch_promtool=str(refusing)), succeeds=False
    )[0]
    assert "failed to validate" in stdout
    assert installed.read_text() == "groups: []\n"
    assert "RUNNING HANDLER" not in stdout


@needs_root
def test_without_promtool_no_rule_is_installed(tmp_path):
    collections = collections_in(tmp_path)
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    settings = rules_variables(tmp_path, recovery_watch_promtool=str(tmp_path / "no-promtool"))
    stdout = run(collections, tmp_path, play, settings, succeeds=False)[0]
    assert "recovery_watch: %s (recovery_watch_promtool) is not there" % settings["recovery_watch_promtool"] in stdout
    assert not (tmp_path / "rules").exists()


def test_a_consumer_the_role_does_not_know_is_refused_by_name(tmp_path):
    play = {"hosts": "localhost", "gather_facts": False, "roles": [ROLE]}
    stdout, changed = run(
        collections_in(tmp_path),
        tmp_path,
        play,
        alloy_variables(tmp_path, recovery_watch_textfile_consumer="telegraf"),
        succeeds=False,
    )
    assert "recovery_watch_textfile_consumer" in stdout and changed == 0


@needs_root
def test_the_readme_shows_the_alloy_blocks_the_role_writes(tmp_path):
    settings = alloy_variables(tmp_path)
    del settings["recovery_watch_metrics_file"]
    run(collections_in(tmp_path), tmp_path, role_tasks_play("alloy", "Alloy blocks", role=ROLE), settings)
    written = (tmp_path / "etc" / "recovery-watch.alloy").read_text()
    blocks = "\n".join(line for line in written.splitlines() if not line.startswith("//")).strip()
    readme = (REPO_ROOT / "roles" / "recovery_watch" / "README.md").read_text()
    # The README's block, indented three spaces in its list item.
    shown = readme.split('   ```text\n   prometheus.exporter.unix "arvados_recovery"', 1)[1].split("   ```", 1)[0]
    shown = '   prometheus.exporter.unix "arvados_recovery"' + shown
    assert "\n".join(line[3:] for line in shown.splitlines()).strip() == blocks
