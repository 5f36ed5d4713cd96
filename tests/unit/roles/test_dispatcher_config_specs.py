"""The role validates its variables against meta/argument_specs.yml: every default of
defaults/main.yml is described there with the same default, so a variable added to one
(such as the installer's dispatcher_config_controller_file, issue 36) is not missed in the other."""

from __future__ import annotations

import yaml

from tests.unit.roles.playbook_runs import REPO_ROOT

ROLE = REPO_ROOT / "roles" / "dispatcher_config"
# Defaults computed at run time: the spec says them in words.
DESCRIBED_IN_WORDS = {"dispatcher_config_installer_command"}


def defaults():
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def spec_options():
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def test_every_default_is_in_the_argument_specs_and_nothing_else():
    assert set(defaults()) == set(spec_options())


def test_the_argument_specs_give_each_variable_its_default():
    options = spec_options()
    differing = {
        name: (value, options[name].get("default"))
        for name, value in defaults().items()
        if name not in DESCRIBED_IN_WORDS and options[name].get("default") != value
    }
    assert differing == {}


def test_an_installers_inventory_names_the_controllers_file_with_nothing_added():
    """Arvados 3.2.1 tools/ansible/examples/*-inventory.yml set arvados_config_file."""
    assert defaults()["dispatcher_config_controller_file"] == "{{ arvados_config_file | default('') }}"
    assert defaults()["dispatcher_config_edit_installer_copy"] is False
