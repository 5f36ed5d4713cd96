"""The boot_recovery role lists the options of arvados-fail-jobs it accepts twice (its
argument specs, which refuse any other name, and its README); each must stay the command's
options, less `before` (the unit always passes `--before reboot`) and `uuids` (a boot cleanup
never picks jobs by name)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.run import ALL_OPTIONS
from tests.unit.roles.playbook_runs import collections_in, run

ROLE = Path(__file__).resolve().parents[3] / "roles" / "boot_recovery"
NOT_AT_BOOT = {"before", "uuids"}


def test_the_argument_specs_describe_each_option_with_the_commands_type():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]["boot_recovery_options"]["options"]
    assert sorted(options) == sorted(set(ALL_OPTIONS) - NOT_AT_BOOT)
    for name, spec in options.items():
        expected = ALL_OPTIONS[name]["type"]
        assert spec["type"] == expected, "%s: %s in the role, %s in the command" % (name, spec["type"], expected)


def test_the_readme_lists_each_option():
    readme = (ROLE / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `boot_recovery_options` |"))
    listed = re.search(r"names them: (.*?)\. Unknown names", row).group(1)
    assert sorted(re.findall(r"`(\w+)`", listed)) == sorted(set(ALL_OPTIONS) - NOT_AT_BOOT)


@pytest.mark.parametrize("name", ["db_passwrod", "before"])
def test_an_option_the_boot_cleanup_does_not_take_is_refused_by_name_before_anything_is_written(tmp_path, name):
    play = {"hosts": "localhost", "gather_facts": False, "roles": ["arvados_ops.recovery.boot_recovery"]}
    variables = {
        "boot_recovery_arvados_version": "3.2",
        "boot_recovery_options": {"cluster_id": "zzzzz", name: "Typo-Secret-5d0e"},
        "boot_recovery_options_file": str(tmp_path / "etc" / "fail-jobs.yml"),
        "boot_recovery_command": str(tmp_path / "bin" / "arvados-fail-jobs"),
        "boot_recovery_lib_dir": str(tmp_path / "lib"),
    }

    stdout, changed = run(collections_in(tmp_path), tmp_path, play, variables, succeeds=False)

    assert "boot_recovery_options.%s" % name in stdout
    # A misspelt password's value is never shown.
    assert "Typo-Secret-5d0e" not in stdout
    assert changed == 0
    assert not (tmp_path / "etc").exists() and not (tmp_path / "bin").exists()
