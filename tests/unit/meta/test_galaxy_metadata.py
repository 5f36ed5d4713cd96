"""galaxy.yml within the limits Galaxy's importer checks on upload (galaxy-importer 0.4.44,
galaxy_importer/schema.py: MAX_LENGTH_*). An author of 75 characters was refused there
("Each author in 'authors' list must not be greater than 64 characters") while every
local build passed."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
GALAXY = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())


def test_names_and_version_fit():
    assert len(GALAXY["namespace"]) <= 39 and len(GALAXY["name"]) <= 64
    assert len(str(GALAXY["version"])) <= 128


def test_each_author_license_and_tag_fits():
    assert GALAXY["authors"] and all(len(author) <= 64 for author in GALAXY["authors"])
    assert all(len(name) <= 32 for name in GALAXY.get("license", []))
    assert all(len(tag) <= 64 and re.fullmatch(r"[a-z0-9_]+", tag) for tag in GALAXY.get("tags", []))


def test_urls_fit():
    for key in ("repository", "documentation", "homepage", "issues"):
        assert len(GALAXY.get(key) or "") <= 2000, key
