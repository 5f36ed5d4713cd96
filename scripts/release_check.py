"""What must hold before a release's tag is pushed (RELEASING.md), run by `make release-check`.

galaxy.yml's version is the one every other place that writes a version writes, the changelog
has released it (its newest release, with a summary), no fragment is left for a later one, the
generated CHANGELOG files are what antsibull-changelog makes of changelogs/changelog.yaml, and
every ``version_added`` names a release. `--set-version X` writes X where a version is written
(RELEASING.md's first step); scripts/release-check.sh then builds and installs the artifact.

Exit status: 0 when everything holds, 1 with one line per problem otherwise.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
ANTSIBULL_CHANGELOG = REPO_ROOT / ".venv" / "bin" / "antsibull-changelog"
VERSION_FILE = Path("plugins/module_utils/_common/version.py")
PROMETHEUS_SAMPLE = Path("prometheus/arvados_recovery.sample.prom")
CHANGELOG_OUTPUTS = ("CHANGELOG.rst", "CHANGELOG.md")
RELEASE = r"\d+\.\d+\.\d+"
# What a stale place may hold instead of a release: a branch (the README's `main`) or another one.
ANY = r"[\w.-]+"

# Each place, besides galaxy.yml, where a version of the collection is written, as a pattern
# whose one group is the version. A user copies these lines: a stale one installs, or shows,
# another version than the one released.
WRITTEN_VERSIONS: dict[Path, list[str]] = {
    VERSION_FILE: [r'^COLLECTION_VERSION = "(%s)"$' % ANY],
    Path("README.md"): [
        r"recovery\.git,(%s)$" % ANY,
        r"^    version: (%s)   #" % ANY,
        r"arvados_ops-recovery-(%s)\.tar\.gz" % ANY,
    ],
    Path("docs/docsite/rst/guide_roles.rst"): [r"arvados-fail-jobs (%s) \(arvados_ops\.recovery\)" % ANY],
    PROMETHEUS_SAMPLE: [r'arvados_recovery_build_info\{version="(%s)"' % ANY],
}
VERSION_ADDED = re.compile(r"""^\s*version_added:\s*["']?([^"'\s]+)""", re.MULTILINE)


def galaxy_version(root: Path) -> str:
    return str(yaml.safe_load((root / "galaxy.yml").read_text())["version"])


def release_key(version: str) -> tuple:
    return tuple(int(part) for part in version.split("."))


def released(root: Path) -> dict:
    changes = yaml.safe_load((root / "changelogs" / "changelog.yaml").read_text()) or {}
    return changes.get("releases") or {}


def changelog_problems(root: Path, version: str) -> list[str]:
    releases = released(root)
    if version not in releases:
        return [
            "changelogs/changelog.yaml has no release %s (galaxy.yml's version): run "
            "antsibull-changelog release" % version
        ]
    problems = []
    newest = max(releases, key=release_key)
    if newest != version:
        problems.append("changelogs/changelog.yaml's newest release is %s, galaxy.yml says %s" % (newest, version))
    if not (releases[version].get("changes") or {}).get("release_summary"):
        problems.append("changelogs/changelog.yaml: release %s has no release_summary" % version)
    left = sorted(path.name for path in (root / "changelogs" / "fragments").glob("*.y*ml"))
    if left:
        problems.append("changelogs/fragments/ still holds %s: not in release %s" % (", ".join(left), version))
    return problems


def generated_changelog_problems(root: Path, run: Callable[..., subprocess.CompletedProcess]) -> list[str]:
    """CHANGELOG.rst and .md as committed against what antsibull-changelog generates now."""
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch)
        shutil.copytree(root / "changelogs", copy / "changelogs")
        shutil.copy2(root / "galaxy.yml", copy / "galaxy.yml")
        made = run([str(ANTSIBULL_CHANGELOG), "generate"], cwd=copy)
        if made.returncode:
            return ["antsibull-changelog generate failed: %s" % (made.stderr or made.stdout).strip()]
        problems = []
        for name in CHANGELOG_OUTPUTS:
            committed, generated = root / name, copy / name
            if not committed.is_file():
                problems.append("%s is missing: run antsibull-changelog generate" % name)
            elif committed.read_text() != generated.read_text():
                problems.append("%s is not what antsibull-changelog generates: run antsibull-changelog generate" % name)
        return problems


def written_version_problems(root: Path, version: str) -> list[str]:
    problems = []
    for relative, patterns in WRITTEN_VERSIONS.items():
        text = (root / relative).read_text()
        for pattern in patterns:
            found = re.findall(pattern, text, re.MULTILINE)
            if not found:
                problems.append("%s: no line matches %s" % (relative, pattern))
            problems.extend(
                "%s writes version %s, galaxy.yml says %s" % (relative, other, version)
                for other in sorted(set(found) - {version})
            )
    return problems


def documented_files(root: Path) -> list[Path]:
    plugins = [path for path in (root / "plugins").rglob("*") if path.suffix in (".py", ".yml", ".yaml")]
    specs = list((root / "roles").glob("*/meta/argument_specs.yml"))
    sources = list((root / "extensions" / "eda" / "plugins").rglob("*.py"))
    return sorted(plugins + specs + sources)


def version_added_problems(root: Path) -> list[str]:
    """A version_added that names no release tells users a version they can never install."""
    releases = set(released(root))
    problems = []
    for path in documented_files(root):
        for added in VERSION_ADDED.findall(path.read_text()):
            if added not in releases:
                problems.append("%s: version_added %s is no release" % (path.relative_to(root), added))
    return problems


def problems(root: Path, run: Callable[..., subprocess.CompletedProcess] | None = None) -> list[str]:
    run = run or run_quietly
    version = galaxy_version(root)
    return (
        changelog_problems(root, version)
        + generated_changelog_problems(root, run)
        + written_version_problems(root, version)
        + version_added_problems(root)
    )


def run_quietly(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, check=False)


def set_version(root: Path, version: str) -> list[Path]:
    """Write version in galaxy.yml and in each place of WRITTEN_VERSIONS; the files changed."""
    if not re.fullmatch(RELEASE, version):
        raise ValueError("version %r is not MAJOR.MINOR.PATCH" % version)
    changed = []
    places = {Path("galaxy.yml"): [r"^version: (%s)$" % ANY], **WRITTEN_VERSIONS}
    for relative, patterns in places.items():
        path = root / relative
        text = original = path.read_text()
        for pattern in patterns:
            text = re.sub(pattern, lambda match: replace_group(match, version), text, flags=re.MULTILINE)
        if text != original:
            path.write_text(text)
            changed.append(relative)
    return changed


def replace_group(match: re.Match, value: str) -> str:
    start, end = match.span(1)
    whole = match.group(0)
    return whole[: start - match.start()] + value + whole[end - match.start() :]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set-version", metavar="X.Y.Z", help="write X.Y.Z wherever the version is written, then stop")
    parser.add_argument("--print-version", action="store_true", help="print galaxy.yml's version, then stop")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.print_version:
        print(galaxy_version(args.root))
        return 0
    if args.set_version:
        for path in set_version(args.root, args.set_version):
            print("release-check: wrote %s in %s" % (args.set_version, path))
        return 0
    found = problems(args.root)
    for problem in found:
        print("release-check: %s" % problem, file=sys.stderr)
    if found:
        return 1
    print("release-check: version %s is written everywhere and released in the changelog" % galaxy_version(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
