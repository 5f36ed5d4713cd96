# SPDX-License-Identifier: GPL-3.0-or-later
"""The recovery_watch role on localhost (systemd is not PID 1 here): its argument specs
refuse an option the watch does not take, by name and before anything is written, and
--check predicts the command, the options file, the service, the timer and its enable
link without writing any, and without starting what does not exist yet."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_cli
from tests.unit.roles.playbook_runs import collections_in, run

ROLE = Path(__file__).resolve().parents[3] / "roles" / "recovery_watch"
PLAY = {"hosts": "localhost", "gather_facts": False, "roles": ["arvados_ops.recovery.recovery_watch"]}
# The .prom file is a role variable of its own (recovery_watch_metrics_file).
NOT_IN_OPTIONS = {"metrics_file"}


def variables(tmp_path, **extra):
    values = {
        "recovery_watch_options": {"config_file": "/etc/arvados/config.yml", "slurm_user": "crunch"},
        "recovery_watch_options_file": str(tmp_path / "etc" / "recovery-watch.yml"),
        "recovery_watch_command": str(tmp_path / "bin" / "arvados-recovery-watch"),
        "recovery_watch_lib_dir": str(tmp_path / "lib"),
        "recovery_watch_metrics_file": str(tmp_path / "textfile" / "arvados_recovery.prom"),
        "recovery_watch_install_packages": False,
    }
    values.update(extra)
    return values


def test_the_argument_specs_describe_each_option_of_the_watch_with_its_type():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]["recovery_watch_options"]["options"]
    assert sorted(options) == sorted(set(watch_cli.ALL_OPTIONS) - NOT_IN_OPTIONS)
    for name, spec in options.items():
        assert spec["type"] == watch_cli.ALL_OPTIONS[name].type, name


def test_the_readme_lists_each_option():
    readme = (ROLE / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `recovery_watch_options` |"))
    listed = re.search(r"names them: (.*?)\. Unknown names", row).group(1)
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(set(watch_cli.ALL_OPTIONS) - NOT_IN_OPTIONS)


@pytest.mark.parametrize(
    "extra, named",
    [
        ({"recovery_watch_options": {"db_passwrod": "Typo-Secret-5d0e"}}, "recovery_watch_options.db_passwrod"),
        ({"recovery_watch_options": {"metrics_file": "/tmp/x.prom"}}, "recovery_watch_options.metrics_file"),
        ({"recovery_watch_install_node_exporter": "perhaps"}, "recovery_watch_install_node_exporter"),
    ],
)
def test_a_setting_the_watch_does_not_take_is_refused_by_name_before_anything_is_written(tmp_path, extra, named):
    stdout, changed = run(collections_in(tmp_path), tmp_path, PLAY, variables(tmp_path, **extra), succeeds=False)
    assert named in stdout
    assert "Typo-Secret-5d0e" not in stdout
    assert changed == 0
    assert not (tmp_path / "etc").exists() and not (tmp_path / "bin").exists()


@pytest.mark.parametrize(
    "extra",
    [{"recovery_watch_interval": "every minute"}, {"recovery_watch_metrics_file": "/var/lib/x/watch.txt"}],
)
def test_a_bad_interval_or_metrics_file_is_refused_before_anything_is_written(tmp_path, extra):
    stdout, changed = run(collections_in(tmp_path), tmp_path, PLAY, variables(tmp_path, **extra), succeeds=False)
    assert "recovery_watch: paths must be absolute" in stdout
    assert changed == 0
    assert not (tmp_path / "bin").exists()


def test_check_mode_predicts_every_file_writes_none_and_starts_nothing(tmp_path):
    settings = variables(tmp_path, recovery_watch_options={"db_password": "Check-Secret-77a1", "settle": 2.5})
    stdout, changed = run(collections_in(tmp_path), tmp_path, PLAY, settings, "--check", "--diff")
    # The command, the checker, the directories, the options file, the two units, the link.
    assert changed >= 7
    assert not (tmp_path / "bin").exists() and not (tmp_path / "etc").exists() and not (tmp_path / "lib").exists()
    assert "Check-Secret-77a1" not in stdout
    assert re.search(
        r"\+ExecStart=%s --options-file %s --metrics-file %s --json %%S/arvados-recovery-watch/result.json"
        % (
            settings["recovery_watch_command"],
            settings["recovery_watch_options_file"],
            settings["recovery_watch_metrics_file"],
        ),
        stdout,
    ), stdout[-4000:]
    assert "+OnUnitInactiveSec=1min" in stdout
    assert re.search(r"TASK \[arvados_ops.recovery.recovery_watch : Start the timer.*\n(skipping|ok).*", stdout)


def test_the_installed_command_is_the_watch_carried_in_one_file(tmp_path):
    """The command tag alone writes only the command (boot_recovery's installer)."""
    settings = variables(tmp_path, recovery_watch_python=sys.executable)
    # /usr/local/bin is there on a host; here the directory stands for it.
    (tmp_path / "bin").mkdir()
    run(collections_in(tmp_path), tmp_path, PLAY, settings, "--tags", "recovery_watch_command")
    command = tmp_path / "bin" / "arvados-recovery-watch"
    assert "from arvados_recovery._reconcile.watch_cli import main" in command.read_text()
    assert not (tmp_path / "etc").exists()
    version = subprocess.run([str(command), "--version"], capture_output=True, text=True, check=True, timeout=60)
    assert version.stdout.startswith("arvados-recovery-watch ")
    options_file = tmp_path / "watch.yml"
    options_file.write_text("db_password: Secret-1f3e\n")
    options_file.chmod(0o644)
    refused = subprocess.run(
        [str(command), "--options-file", str(options_file), "--metrics-file", str(tmp_path / "x.prom")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert refused.returncode == 2
    assert "holds db_password but is mode 0644" in refused.stderr
    assert not (tmp_path / "x.prom").exists()
