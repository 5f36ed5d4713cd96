"""molecule.yml as Molecule reads it: `${NAME}` and `${NAME:-default}` replaced from an
environment before the YAML is parsed (the cluster scenario takes its Debian release and
subnet that way)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = REPO_ROOT / "extensions" / "molecule"
RUN_TESTS = REPO_ROOT / "scripts" / "run-tests.sh"
RELEASE_VARIABLE = "MOLECULE_DEBIAN_RELEASE"
DEFAULT_RELEASE = "bookworm"
REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def interpolate(text: str, environment: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        return environment.get(match.group("name")) or match.group("default") or ""

    return REFERENCE.sub(value, text)


def load_molecule_yml(path: Path, environment: dict[str, str] | None = None):
    return yaml.safe_load(interpolate(path.read_text(), environment or {}))


def release_stage_releases() -> list[str]:
    """The releases run-tests.sh's molecule-releases stage runs the cluster scenario on."""
    match = re.search(r"^MOLECULE_RELEASES=\(([a-z ]+)\)$", RUN_TESTS.read_text(), re.M)
    assert match, "scripts/run-tests.sh has no MOLECULE_RELEASES=(...) line"
    return match.group(1).split()
