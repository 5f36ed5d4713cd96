# SPDX-License-Identifier: GPL-3.0-or-later
"""recovery_watch's two ways to the installer's monitoring, run for real on localhost with
every path in a temporary directory: the Alloy blocks that read the textfile, and the alert
rules installed only once the real promtool has checked them (their `for:` as the operator
sets them), and what the role says of the Prometheus configuration that should read them
(the host's, or the controller's that Arvados' installer deploys), which it never edits. Check
mode writes nothing and predicts the change; a second run changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

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
    values = {
        "recovery_watch_rules_dir": str(tmp_path / "rules"),
        "recovery_watch_prometheus_config": str(tmp_path / "prometheus" / "prometheus.yml"),
    }
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


def write_prometheus_config(path, rule_files):
    """A prometheus.yml with these rule_files (None: the key with no value, as Debian ships it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"global": {"evaluation_interval": "15s"}, "rule_files": rule_files}))
    return path.read_bytes()


def message(stdout):
    """The lines the rules entry point said of the Prometheus configuration."""
    task = stdout.split("TASK [arvados_ops.recovery.recovery_watch : Say whether Prometheus reads the alert rules]")[1]
    return yaml.safe_load(task[task.index("{") : task.index("\n}") + 2])["msg"]


def in_prometheus_dir(tmp_path, **extra):
    """The rules in `rules/` beside prometheus.yml, as a relative rule_files entry names them."""
    return rules_variables(tmp_path, recovery_watch_rules_dir=str(tmp_path / "prometheus" / "rules"), **extra)


@needs_root
@pytest.mark.parametrize(
    "rule_files",
    [
        ["rules/*.yml"],
        ["/etc/prometheus/other.yml", "TMP/prometheus/rules/arvados_*.yml"],
        ["TMP/prometheus/r?les/*"],
    ],
)
def test_a_rule_files_entry_that_covers_the_rules_is_said_to(tmp_path, rule_files):
    config = tmp_path / "prometheus" / "prometheus.yml"
    before = write_prometheus_config(config, [entry.replace("TMP", str(tmp_path)) for entry in rule_files])
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    said = message(run(collections_in(tmp_path), tmp_path, play, in_prometheus_dir(tmp_path))[0])
    assert said == [
        "recovery_watch: Prometheus reads the alert rules (%s/prometheus/rules/arvados_recovery_rules.yml): a "
        "rule_files entry of %s covers them." % (tmp_path, config)
    ]
    assert config.read_bytes() == before


@needs_root
@pytest.mark.parametrize(
    "rule_files",
    [
        None,
        ["rules/*.yaml"],
        # A glob's * stops at a slash, as in Go's filepath.Glob.
        ["TMP/prometheus/*"],
    ],
)
def test_a_configuration_that_misses_the_rules_is_told_what_to_add_and_left_alone(tmp_path, rule_files):
    config = tmp_path / "prometheus" / "prometheus.yml"
    entries = None if rule_files is None else [entry.replace("TMP", str(tmp_path)) for entry in rule_files]
    before = write_prometheus_config(config, entries)
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    collections = collections_in(tmp_path)
    for options in (("--check",), ()) if rule_files is None else ((),):
        stdout, _changed = run(collections, tmp_path, play, in_prometheus_dir(tmp_path), *options)
        assert message(stdout) == [
            "recovery_watch: Prometheus on localhost does not read the alert rules "
            "(%s/prometheus/rules/arvados_recovery_rules.yml): no rule_files entry of %s covers them. Add to that "
            "file (or add the second line to its rule_files):" % (tmp_path, config),
            "rule_files:",
            "  - %s/prometheus/rules/*.yml" % tmp_path,
            "Then reload Prometheus (systemctl reload prometheus.service).",
        ]
        assert config.read_bytes() == before


@needs_root
def test_with_the_installer_the_controllers_file_is_read_and_named_and_no_copy_is_edited(tmp_path):
    host_copy = tmp_path / "prometheus" / "prometheus.yml"
    # The host's copy reads the rules, but the installer's next run puts the controller's back.
    host_before = write_prometheus_config(host_copy, [str(tmp_path / "rules" / "*.yml")])
    controller = tmp_path / "controller" / "prometheus.yml"
    controller_before = write_prometheus_config(controller, ["/etc/prometheus/alerts.yml"])
    settings = rules_variables(tmp_path, arvados_prometheus_config_file=str(controller))
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    collections = collections_in(tmp_path)

    said = message(run(collections, tmp_path, play, settings)[0])
    assert said[0] == (
        "recovery_watch: Prometheus on localhost does not read the alert rules (%s/rules/arvados_recovery_rules.yml): "
        "no rule_files entry of %s on the controller (the file Arvados' installer copies to %s) covers them. Add to "
        "that file (or add the second line to its rule_files):" % (tmp_path, controller, host_copy)
    )
    assert said[1:3] == ["rule_files:", "  - %s/rules/*.yml" % tmp_path]
    assert said[3] == (
        "Then run the installer, `ansible-playbook -i localhost, install-arvados-cluster.yml`: it deploys that file "
        "and restarts Prometheus. %s on localhost is left as it is: the installer's next run would put its own file "
        "back." % host_copy
    )
    assert (host_copy.read_bytes(), controller.read_bytes()) == (host_before, controller_before)

    # Once the operator has added the line, the same run says Prometheus reads them.
    write_prometheus_config(controller, ["/etc/prometheus/alerts.yml", str(tmp_path / "rules" / "*.yml")])
    said = message(run(collections, tmp_path, play, settings)[0])
    assert said == [
        "recovery_watch: Prometheus reads the alert rules (%s/rules/arvados_recovery_rules.yml): a rule_files entry "
        "of %s covers them." % (tmp_path, controller)
    ]


@needs_root
def test_a_configuration_that_cannot_be_read_is_said_so_and_the_rules_still_go_in(tmp_path):
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    stdout, changed = run(collections_in(tmp_path), tmp_path, play, rules_variables(tmp_path))
    said = message(stdout)
    assert len(said) == 1 and said[0].startswith(
        "recovery_watch: %s could not be read (" % (tmp_path / "prometheus" / "prometheus.yml")
    )
    assert said[0].endswith("as `- %s/rules/*.yml` does." % tmp_path)
    assert changed == 2 and (tmp_path / "rules" / "arvados_recovery_rules.yml").exists()


@needs_root
def test_the_operators_for_durations_replace_those_of_the_named_alerts_alone(tmp_path):
    collections = collections_in(tmp_path)
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    waits = {"ArvadosStraySlurmJobs": "0s", "ArvadosRecoveryWatchAbsent": "1m30s"}
    settings = rules_variables(tmp_path, recovery_watch_rules_for=waits)
    installed = tmp_path / "rules" / "arvados_recovery_rules.yml"

    stdout, changed = run(collections, tmp_path, play, settings, "--check", "--diff")
    assert changed == 2 and not installed.exists()

    run(collections, tmp_path, play, settings)
    shipped = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    rules = yaml.safe_load(installed.read_text())["groups"][0]["rules"]
    assert [rule["for"] for rule in rules] == [waits.get(rule["alert"], rule["for"]) for rule in shipped]
    assert [dict(rule, **{"for": None}) for rule in rules] == [dict(rule, **{"for": None}) for rule in shipped]
    # The text as shipped but for those two lines: its comments and layout stay.
    changed_lines = [
        pair
        for pair in zip(RULES.read_text().splitlines(), installed.read_text().splitlines(), strict=True)
        if pair[0] != pair[1]
    ]
    assert changed_lines == [("        for: 15m", "        for: 0s"), ("        for: 10m", "        for: 1m30s")]
    assert run(collections, tmp_path, play, settings)[1] == 0


@needs_root
@pytest.mark.parametrize(
    "waits, named",
    [({"ArvadosOrphan": "0s"}, "not ArvadosOrphan: 0s."), ({"ArvadosOrphans": "soon"}, "not ArvadosOrphans: soon.")],
)
def test_a_for_duration_for_no_such_alert_or_no_duration_is_refused(tmp_path, waits, named):
    play = role_tasks_play("rules", "Alert rules", role=ROLE)
    stdout = run(
        collections_in(tmp_path),
        tmp_path,
        play,
        rules_variables(tmp_path, recovery_watch_rules_for=waits),
        succeeds=False,
    )[0]
    assert "recovery_watch: recovery_watch_rules_for maps alerts of the rules file (ArvadosStraySlurmJobs, " in stdout
    assert named in stdout
    assert not (tmp_path / "rules").exists()
