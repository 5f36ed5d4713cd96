# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The dependencies an execution environment gets from the built collection.

ansible-builder reads meta/execution-environment.yml from each collection it installs, so
these tests start from the artifact 'ansible-galaxy collection build' makes, as an
execution environment definition would name it, never from the working tree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[3]
BIN_DIR = Path(sys.executable).parent
ANSIBLE_BUILDER = BIN_DIR / "ansible-builder"
ANSIBLE_GALAXY = BIN_DIR / "ansible-galaxy"
COLLECTION = "arvados_ops.recovery"
# The Python packages the collection's code imports, each declared with the oldest
# version 'make test' runs as its lower bound: the pin of requirements-dev.txt, or for
# psycopg Debian 12's python3-psycopg, which the Molecule images run the modules with.
PYTHON_PACKAGES = ("psycopg", "ruamel.yaml")
MOLECULE_IMAGE_VERSIONS = {"psycopg": "3.1.7"}
# The package holding squeue and scancel, by a platform's bindep profiles (as bindep
# names them on Debian 12 and on Rocky Linux 9).
SLURM_CLIENTS = (
    (("platform:dpkg", "platform:debian", "platform:debian-12"), "slurm-client"),
    (("platform:rpm", "platform:redhat", "platform:rocky", "platform:rocky-9"), "slurm"),
)

Depends = pytest.importorskip(
    "bindep.depends",
    reason="bindep is not installed (it comes with ansible-builder: pip install -r requirements-dev.txt)",
).Depends

pytestmark = pytest.mark.skipif(
    not ANSIBLE_BUILDER.exists(),
    reason="ansible-builder is not installed beside %s (pip install -r requirements-dev.txt)" % sys.executable,
)


def run(argv, cwd, env_home):
    """Output of argv, which must succeed; ansible's config and caches kept in env_home."""
    env = {
        "PATH": "%s:/usr/bin:/bin" % BIN_DIR,
        "HOME": str(env_home),
        # An empty ansible.cfg: the repository's own would put its working tree on the
        # collections path.
        "ANSIBLE_CONFIG": str(env_home / "ansible.cfg"),
        "LANG": "C.UTF-8",
    }
    result = subprocess.run(
        [str(arg) for arg in argv], cwd=str(cwd), env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, "%s failed:\n%s%s" % (argv[0], result.stdout, result.stderr)
    return result.stdout


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    (home / "ansible.cfg").write_text("")
    return home


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, home):
    dist = tmp_path_factory.mktemp("dist")
    run([ANSIBLE_GALAXY, "collection", "build", "--output-path", dist, REPO_ROOT], REPO_ROOT, home)
    (built,) = dist.glob("arvados_ops-recovery-*.tar.gz")
    return built


def pinned_versions():
    """{package name: version} of the pins in requirements-dev.txt."""
    pins = {}
    for line in (REPO_ROOT / "requirements-dev.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            (specifier,) = requirement.specifier
            pins[requirement.name.lower()] = specifier.version
    return pins


def declared(lines):
    """The requirement lines ansible-builder wrote, without its '# from collection' notes."""
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def assert_python_packages(lines):
    requirements = {Requirement(line).name.lower(): Requirement(line) for line in declared(lines)}
    pins = dict(pinned_versions(), **MOLECULE_IMAGE_VERSIONS)
    for name in PYTHON_PACKAGES:
        assert name in requirements, "%s is not declared: %s" % (name, lines)
        assert str(requirements[name].specifier) == ">=%s" % pins[name], "%s: declared %s, but 'make test' runs %s" % (
            name,
            requirements[name],
            pins[name],
        )


def assert_slurm_clients(lines):
    depends = Depends("\n".join(lines) + "\n")
    for profiles, package in SLURM_CLIENTS:
        selected = [rule[0] for rule in depends.active_rules(list(profiles))]
        assert package in selected, "bindep selects %s for %s, not %s" % (selected, profiles, package)


def install(requirements_file, cwd, collections_dir, home):
    """The collections of requirements_file installed the way the image's galaxy stage does."""
    run(
        [ANSIBLE_GALAXY, "collection", "install", "--offline", "-r", requirements_file, "-p", collections_dir],
        cwd,
        home,
    )
    assert (collections_dir / "ansible_collections" / "arvados_ops" / "recovery" / "MANIFEST.json").is_file()


def test_introspect_lists_the_artifacts_dependencies(artifact, tmp_path, home):
    requirements_file = tmp_path / "requirements.yml"
    requirements_file.write_text(yaml.safe_dump({"collections": [{"name": str(artifact), "type": "file"}]}))
    install(requirements_file, tmp_path, tmp_path / "collections", home)

    found = yaml.safe_load(run([ANSIBLE_BUILDER, "introspect", tmp_path / "collections"], tmp_path, home))

    assert all(COLLECTION in line for line in found["python"] + found["system"]), found
    assert_python_packages(found["python"])
    assert_slurm_clients(found["system"])


def test_create_makes_a_context_whose_image_gets_the_dependencies(artifact, tmp_path, home):
    """create only writes the context: the image's builder stage reads the dependencies from
    the installed collections with the context's own introspect.py, so that is run here on
    what the context's requirements.yml installs."""
    definition = {
        "version": 3,
        "images": {"base_image": {"name": "quay.io/ansible/awx-ee:latest"}},
        # The build sees only the context: the artifact is copied into its _build/.
        "additional_build_files": [{"src": str(artifact), "dest": "collections"}],
        "dependencies": {
            "galaxy": {"collections": [{"name": "collections/" + artifact.name, "type": "file"}]},
        },
    }
    (tmp_path / "execution-environment.yml").write_text(yaml.safe_dump(definition))

    run([ANSIBLE_BUILDER, "create", "-f", "execution-environment.yml", "-c", "context"], tmp_path, home)

    build_dir = tmp_path / "context" / "_build"
    assert (build_dir / "collections" / artifact.name).is_file()
    assert "ansible-galaxy collection install" in (tmp_path / "context" / "Containerfile").read_text()
    install(build_dir / "requirements.yml", build_dir, tmp_path / "collections", home)
    pip_file, bindep_file = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    run(
        [
            sys.executable,
            build_dir / "scripts" / "introspect.py",
            "introspect",
            "--write-pip",
            pip_file,
            "--write-bindep",
            bindep_file,
            tmp_path / "collections",
        ],
        tmp_path,
        home,
    )

    assert_python_packages(pip_file.read_text().splitlines())
    assert_slurm_clients(bindep_file.read_text().splitlines())
