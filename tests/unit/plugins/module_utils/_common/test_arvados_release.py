"""An Arvados release read as the dispatcher's settings and the Locked diagnosis read it."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.arvados_release import release_of


@pytest.mark.parametrize(
    "text, release",
    [
        ("3.2", (3, 2, 0)),
        ("2.7.4", (2, 7, 4)),
        (" 2.7.4-1 ", (2, 7, 4)),
        ("1.4.3~bpo12+1", (1, 4, 3)),
        ("3.2.1+deb12u1", (3, 2, 1)),
        (3.2, (3, 2, 0)),
    ],
)
def test_a_release_and_a_packages_version_read_alike(text, release):
    assert release_of(text) == release


@pytest.mark.parametrize("text", ["", "3", "three.two", "2.7.4foo", "2.7.4.1", "v3.2", None])
def test_what_names_no_release_is_none(text):
    assert release_of(text) is None
