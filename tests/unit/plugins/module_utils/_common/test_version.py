"""The version the command reports is galaxy.yml's."""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import version

GALAXY = Path(__file__).resolve().parents[5] / "galaxy.yml"


def test_the_version_is_galaxy_ymls():
    galaxy = yaml.safe_load(GALAXY.read_text())
    assert version.COLLECTION == "%s.%s" % (galaxy["namespace"], galaxy["name"])
    assert version.COLLECTION_VERSION == galaxy["version"]
