# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection installed from git as README.md tells a user to: `ansible-galaxy
collection install git+URL,VERSION`, and the `collections/requirements.yml` shown there
(`type: git`, `version`). Offline: the URL is this checkout's own (file://) and the version
its HEAD commit, so what is installed is the committed tree. The installed copy is then
used: a module imported from it, and ansible-doc reading it through the collection
loader of the ansible-core these tests run on (each of the version stage's cores)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
BIN_DIR = Path(sys.executable).parent
ANSIBLE_GALAXY = BIN_DIR / "ansible-galaxy"
ANSIBLE_DOC = BIN_DIR / "ansible-doc"
GITHUB_URL = "https://github.com/arvados-ops/recovery.git"
MODULE = "slurm_job_cancel"


def readme_block(language: str, containing: str) -> str:
    """The first fenced block of README.md in that language holding that text."""
    for block in re.findall(r"^```%s\n(.*?)^```" % language, (REPO_ROOT / "README.md").read_text(), re.M | re.S):
        if containing in block:
            return block
    raise AssertionError("README.md has no %s block with %r" % (language, containing))


def head_commit() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def clean_env(tmp_path: Path) -> dict[str, str]:
    """No ansible.cfg nor collections path of this checkout's; a HOME of the test's own."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(HOME=str(tmp_path / "home"), LC_ALL="C.UTF-8", ANSIBLE_COLLECTIONS_ON_ANSIBLE_VERSION_MISMATCH="error")
    return env


def galaxy_install(tmp_path: Path, *source: str) -> Path:
    collections = tmp_path / "collections"
    completed = subprocess.run(
        [str(ANSIBLE_GALAXY), "collection", "install", "--offline", "-p", str(collections), *source],
        cwd=tmp_path,
        env=clean_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "arvados_ops.recovery" in completed.stdout, completed.stdout
    return collections


def requirements_file(tmp_path: Path) -> Path:
    """README.md's collections/requirements.yml, pointed at this checkout and its commit."""
    requirements = yaml.safe_load(readme_block("yaml", GITHUB_URL))
    (entry,) = requirements["collections"]
    assert entry["name"] == GITHUB_URL and entry["type"] == "git" and entry.get("version")
    entry.update(name=REPO_ROOT.as_uri(), version=head_commit())
    path = tmp_path / "collections" / "requirements.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(requirements))
    return path


def cli_source() -> str:
    """README.md's `ansible-galaxy collection install git+URL,VERSION`, for this checkout."""
    command = readme_block("sh", "git+" + GITHUB_URL)
    assert re.search(r"^ansible-galaxy collection install git\+%s,\S+$" % re.escape(GITHUB_URL), command, re.M)
    return "git+%s,%s" % (REPO_ROOT.as_uri(), head_commit())


@pytest.mark.parametrize("form", ["requirements.yml", "command line"])
def test_installed_from_git_the_collection_works(tmp_path, form):
    if form == "requirements.yml":
        collections = galaxy_install(tmp_path, "-r", str(requirements_file(tmp_path)))
    else:
        collections = galaxy_install(tmp_path, cli_source())
    installed = collections / "ansible_collections" / "arvados_ops" / "recovery"
    assert (installed / "MANIFEST.json").is_file()
    # galaxy.yml's build_ignore applies: the lab and the test suites stay behind.
    assert not (installed / "lab").exists() and not (installed / "tests" / "unit").exists()

    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ansible_collections.arvados_ops.recovery.plugins.modules.%s as module; print(module.__file__)"
            % MODULE,
        ],
        cwd=tmp_path,
        env=dict(clean_env(tmp_path), PYTHONPATH=str(collections)),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert Path(imported.stdout.strip()) == installed / "plugins" / "modules" / (MODULE + ".py")

    doc = subprocess.run(
        [str(ANSIBLE_DOC), "--json", "arvados_ops.recovery." + MODULE],
        cwd=tmp_path,
        env=dict(clean_env(tmp_path), ANSIBLE_COLLECTIONS_PATH=str(collections)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert doc.returncode == 0, doc.stdout + doc.stderr
    documented = yaml.safe_load(doc.stdout)["arvados_ops.recovery." + MODULE]["doc"]
    assert Path(documented["filename"]).resolve() == (installed / "plugins" / "modules" / (MODULE + ".py")).resolve()
