"""`make release-check` (scripts/release_check.py) on a copy of the collection released for real
by antsibull-changelog, as RELEASING.md says: it passes, and each way a release goes stale
(a version left behind, a fragment left over, a version_added of no release, a CHANGELOG not
regenerated) is named; on the collection as it is between releases, the missing release is."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import release_check

REPO_ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = REPO_ROOT / ".venv" / "bin"
# What a release reads or writes; the test trees and the lab are not part of it.
LEFT_OUT = ("bench/", "tests/", "lab/", "extensions/molecule/")


def committed_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=str(REPO_ROOT), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    return [name for name in listed if not name.startswith(LEFT_OUT) and (REPO_ROOT / name).is_file()]


@pytest.fixture(scope="module")
def collection_copy(tmp_path_factory) -> Path:
    # antsibull-changelog finds the new plugins through ansible-doc, which needs the
    # collection under ansible_collections/<namespace>/<name>.
    root = tmp_path_factory.mktemp("release") / "ansible_collections" / "arvados_ops" / "recovery"
    for name in committed_files():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, root / name)
    return root


@pytest.fixture(scope="module")
def released(collection_copy, tmp_path_factory) -> Path:
    """The copy after RELEASING.md's steps for a release 7.1.0."""
    root = tmp_path_factory.mktemp("released") / "ansible_collections" / "arvados_ops" / "recovery"
    shutil.copytree(collection_copy, root)
    release_check.set_version(root, "7.1.0")
    # RELEASING.md's step 4: each release has its summary (the copy may be at a release,
    # its fragments all released).
    fragments = root / "changelogs" / "fragments"
    fragments.mkdir(parents=True, exist_ok=True)
    (fragments / "release_summary.yml").write_text("release_summary: >-\n  A release made by the tests.\n")
    for path in release_check.documented_files(root):
        text = path.read_text()
        path.write_text(re.sub(r"(version_added:\s*['\"]?)[0-9.]+", r"\g<1>7.1.0", text))
    environment = dict(os.environ, PATH="%s:%s" % (VENV_BIN, os.environ["PATH"]))
    subprocess.run(
        [str(VENV_BIN / "antsibull-changelog"), "release", "--version", "7.1.0"],
        cwd=str(root),
        env=environment,
        check=True,
        capture_output=True,
    )
    return root


def changed_copy(released: Path, tmp_path: Path) -> Path:
    root = tmp_path / "ansible_collections" / "arvados_ops" / "recovery"
    shutil.copytree(released, root)
    return root


def test_a_release_made_as_releasing_md_says_passes(released):
    assert release_check.problems(released) == []
    assert "## v7\\.1\\.0" in (released / "CHANGELOG.md").read_text()
    readme = (released / "README.md").read_text()
    assert "recovery.git,7.1.0\n" in readme and "    version: 7.1.0   #" in readme


def test_between_releases_the_release_to_make_is_named(collection_copy):
    version = release_check.galaxy_version(collection_copy)
    if version in release_check.released(collection_copy):
        pytest.skip("galaxy.yml's version %s is released: the collection is at a release" % version)
    found = release_check.problems(collection_copy)
    assert found[0] == (
        "changelogs/changelog.yaml has no release %s (galaxy.yml's version): run antsibull-changelog release" % version
    )


def test_a_version_left_behind_is_named_with_its_file(released, tmp_path):
    root = changed_copy(released, tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text().replace("recovery.git,7.1.0", "recovery.git,main"))
    assert release_check.problems(root) == ["README.md writes version main, galaxy.yml says 7.1.0"]


def test_a_fragment_left_over_is_named(released, tmp_path):
    root = changed_copy(released, tmp_path)
    (root / "changelogs" / "fragments" / "late.yml").write_text("bugfixes:\n  - late - a fix.\n")
    assert release_check.problems(root) == ["changelogs/fragments/ still holds late.yml: not in release 7.1.0"]


def test_a_version_added_of_no_release_is_named(released, tmp_path):
    root = changed_copy(released, tmp_path)
    module = root / "plugins" / "modules" / "slurm_job_cancel.py"
    module.write_text(module.read_text().replace("version_added: 7.1.0", "version_added: 7.2.0", 1))
    assert release_check.problems(root) == ["plugins/modules/slurm_job_cancel.py: version_added 7.2.0 is no release"]


def test_a_changelog_not_regenerated_is_named(released, tmp_path):
    root = changed_copy(released, tmp_path)
    (root / "CHANGELOG.rst").write_text((root / "CHANGELOG.rst").read_text() + "\nedited by hand\n")
    assert release_check.problems(root) == [
        "CHANGELOG.rst is not what antsibull-changelog generates: run antsibull-changelog generate"
    ]


def test_galaxy_ahead_of_the_changelog_is_named(released, tmp_path):
    root = changed_copy(released, tmp_path)
    release_check.set_version(root, "7.1.1")
    assert release_check.problems(root)[0] == (
        "changelogs/changelog.yaml has no release 7.1.1 (galaxy.yml's version): run antsibull-changelog release"
    )


def test_set_version_writes_every_place_and_refuses_what_is_no_release(collection_copy, tmp_path):
    root = changed_copy(collection_copy, tmp_path)
    changed = release_check.set_version(root, "2.3.4")
    assert sorted(map(str, changed)) == sorted(["galaxy.yml", *map(str, release_check.WRITTEN_VERSIONS)])
    assert release_check.written_version_problems(root, "2.3.4") == []
    with pytest.raises(ValueError, match="'2.3' is not MAJOR.MINOR.PATCH"):
        release_check.set_version(root, "2.3")


def test_the_scripts_read_the_version_galaxy_yml_gives(released, capsys):
    # release-check.sh and build-check.sh name the tag and the artifact by this line.
    assert release_check.main(["--print-version", "--root", str(released)]) == 0
    assert capsys.readouterr().out == "7.1.0\n"
    for script in ("release-check.sh", "build-check.sh"):
        assert "scripts/release_check.py --print-version" in (REPO_ROOT / "scripts" / script).read_text()
