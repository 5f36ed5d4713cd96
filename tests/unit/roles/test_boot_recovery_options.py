"""The boot_recovery role lists the options of arvados-fail-jobs it accepts three times (its
vars, its argument specs, its README); each must stay the command's options, less `before`
(the unit always passes `--before reboot`) and `uuids` (a boot cleanup never picks jobs by
name)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_run import ALL_OPTIONS

ROLE = Path(__file__).resolve().parents[3] / "roles" / "boot_recovery"
NOT_AT_BOOT = {"before", "uuids"}


def test_the_roles_known_options_are_the_commands():
    known = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__boot_recovery_known_options"]
    assert sorted(known) == sorted(set(ALL_OPTIONS) - NOT_AT_BOOT)


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
