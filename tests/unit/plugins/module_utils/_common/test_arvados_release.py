"""An Arvados release, read alike for the dispatcher's settings and the reconciliation's arvados_version."""

from __future__ import annotations

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.arvados_release import parse_release
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError

REFUSAL = "option version is %r: give a release"


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
    assert parse_release(text, REFUSAL) == release


@pytest.mark.parametrize("text", ["", "3", "three.two", "2.7.4foo", "2.7.4.1", "v3.2", None])
def test_what_names_no_release_is_refused_with_the_callers_message(text):
    with pytest.raises(ConfigError) as raised:
        parse_release(text, REFUSAL)
    assert str(raised.value) == "option version is %r: give a release" % (text,)
