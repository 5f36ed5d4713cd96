"""Fixtures of the role tests."""

from __future__ import annotations

import pytest

from tests.unit.roles.playbook_runs import collections_in


@pytest.fixture
def collections(tmp_path):
    return collections_in(tmp_path)
