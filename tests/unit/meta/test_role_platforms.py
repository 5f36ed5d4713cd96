# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The platforms a role's meta/main.yml claims are exactly those a Molecule scenario runs
it on: each scenario's image is a Debian release debootstrapped by
scripts/build-molecule-image.sh and tagged with its codename. An image whose tag is
${MOLECULE_DEBIAN_RELEASE:-bookworm} runs on bookworm and on the releases run-tests.sh's
molecule-releases stage gives it. A platform added to a role without a scenario that runs
the role there, or a scenario on a new release without the claim, fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.unit.molecule_config import (
    DEFAULT_RELEASE,
    RELEASE_VARIABLE,
    interpolate,
    load_molecule_yml,
    release_stage_releases,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = REPO_ROOT / "extensions" / "molecule"
IMAGE_BUILDER = REPO_ROOT / "scripts" / "build-molecule-image.sh"
COLLECTION = "arvados_ops.recovery."
ROLES = sorted(path.name for path in (REPO_ROOT / "roles").iterdir() if (path / "meta" / "main.yml").exists())
# The images scripts/build-molecule-image.sh makes, named <this>[-kind]:<codename>.
IMAGE = re.compile(r"^localhost/arvados-recovery-molecule(-[a-z]+)?:(?P<codename>[a-z]+)$")


def load(path: Path):
    return yaml.safe_load(path.read_text())


def debootstrapped_codenames() -> set[str]:
    """The Debian releases the image builder debootstraps: the cases of its release table."""
    return set(re.findall(r"^\s*([a-z]+)\) psycopg=", IMAGE_BUILDER.read_text(), re.M))


def image_codenames(molecule_yml: Path) -> set[str]:
    """The releases a scenario's images are of: its default, and for an image named by
    MOLECULE_DEBIAN_RELEASE the releases the molecule-releases stage sets too."""
    releases = {DEFAULT_RELEASE}
    if "${%s" % RELEASE_VARIABLE in molecule_yml.read_text():
        releases |= set(release_stage_releases())
    codenames = set()
    for release in releases:
        for platform in load_molecule_yml(molecule_yml, {RELEASE_VARIABLE: release})["platforms"]:
            match = IMAGE.match(platform["image"])
            assert match, "%s: %s is not an image scripts/build-molecule-image.sh makes" % (
                molecule_yml,
                platform["image"],
            )
            codenames.add(match.group("codename"))
    return codenames


def roles_in(node) -> set[str]:
    """The collection's roles a playbook (or a piece of one) runs: include_role, import_role,
    roles: lists, and the collection's playbooks it imports."""
    found: set[str] = set()
    if isinstance(node, list):
        for item in node:
            found |= roles_in(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            short = key.rsplit(".", 1)[-1]
            if short in ("include_role", "import_role"):
                found.add(value["name"])
            elif key == "roles":
                found |= {entry if isinstance(entry, str) else entry.get("role", entry.get("name")) for entry in value}
            elif short == "import_playbook" and value.startswith(COLLECTION):
                found |= roles_in(load(REPO_ROOT / "playbooks" / (value[len(COLLECTION) :] + ".yml")))
            else:
                found |= roles_in(value)
    return {name[len(COLLECTION) :] if name.startswith(COLLECTION) else name for name in found}


def scenario_platforms(role: str) -> set[tuple[str, str]]:
    """(distribution, codename) of every image a scenario that converges the role runs on."""
    platforms = set()
    for molecule_yml in sorted(SCENARIOS.glob("*/molecule.yml")):
        converge = molecule_yml.with_name("converge.yml")
        if not converge.exists() or role not in roles_in(load(converge)):
            continue
        platforms |= {("Debian", codename) for codename in image_codenames(molecule_yml)}
    return platforms


def claimed_platforms(role: str) -> set[tuple[str, str]]:
    galaxy_info = load(REPO_ROOT / "roles" / role / "meta" / "main.yml")["galaxy_info"]
    return {
        (platform["name"], str(version)) for platform in galaxy_info["platforms"] for version in platform["versions"]
    }


def test_there_are_roles_and_scenarios():
    assert ROLES == ["boot_recovery", "dispatcher_config", "recovery_watch"]
    assert len(list(SCENARIOS.glob("*/molecule.yml"))) >= 1


def test_the_images_are_of_the_releases_the_image_builder_debootstraps():
    used = {codename for role in ROLES for _name, codename in scenario_platforms(role)}
    assert used
    assert used <= debootstrapped_codenames()


@pytest.mark.parametrize("role", ROLES)
def test_a_role_claims_exactly_the_platforms_its_scenarios_run_it_on(role):
    assert claimed_platforms(role) == scenario_platforms(role)


def test_roles_in_follows_the_collections_playbooks():
    site = [{"ansible.builtin.import_playbook": "arvados_ops.recovery.site"}]
    assert roles_in(site) == {"boot_recovery", "dispatcher_config", "recovery_watch"}
    assert roles_in([{"tasks": [{"include_role": {"name": "arvados_ops.recovery.boot_recovery"}}]}]) == {
        "boot_recovery"
    }


def test_the_cluster_scenario_runs_on_the_release_it_is_given():
    cluster = SCENARIOS / "cluster" / "molecule.yml"
    assert image_codenames(cluster) == {"bullseye", "bookworm", "trixie"}
    platforms = load_molecule_yml(cluster, {RELEASE_VARIABLE: "trixie"})["platforms"]
    assert {platform["image"] for platform in platforms} == {"localhost/arvados-recovery-molecule-cluster:trixie"}
    # Each release's containers and network are its own.
    assert all("-trixie-" in platform["name"] for platform in platforms)
    assert {platform["network"] for platform in platforms} == {"arvados-recovery-cluster-trixie"}


def test_interpolate_replaces_set_and_defaulted_names_as_molecule_does():
    text = "a: ${X:-one}\nb: ${Y:-two}.5\nc: ${Z}"
    assert interpolate(text, {"X": "set", "Z": "zed"}) == "a: set\nb: two.5\nc: zed"
    # An empty value takes the default too (`:-`).
    assert interpolate("${X:-one}", {"X": ""}) == "one"


def test_the_image_builder_knows_debian_11_12_and_13():
    assert debootstrapped_codenames() == {"bullseye", "bookworm", "trixie"}
