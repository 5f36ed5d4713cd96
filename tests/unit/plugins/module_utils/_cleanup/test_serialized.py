# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
"""YAML serialized columns loaded as Serializer.legacy_load loads them (1.4.3
services/api/lib/serializers.rb:18-32), or kept as text where Arvados' would raise."""

from __future__ import annotations

import json

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.serialized import (
    LoadedTexts,
    legacy_load,
)


@pytest.mark.parametrize(
    "text, loaded",
    [
        ("---\na: 1\nb:\n- x\n", {"a": 1, "b": ["x"]}),
        ("--- {}\n", {}),
        ("---\n- all\n", ["all"]),
        # a String holding JSON: an API server downgraded to YAML stored JSON as a YAML string
        ("--- '{\"a\": 1}'\n", {"a": 1}),
        # what Psych.safe_load refuses stays the text it is
        ("--- !ruby/hash:ActiveSupport::HashWithIndifferentAccess\na: 1\n", None),
        ("---\nwhen: 2014-01-01 00:00:00 Z\n", None),
        ("--- 'not json'\n", None),
        ("---\n: [\n", None),
    ],
)
def test_legacy_load(text, loaded):
    assert json.loads(legacy_load(text)) == (text if loaded is None else loaded)


def test_loaded_texts_bind_as_two_parallel_lists():
    texts = LoadedTexts()
    texts.values.update({"b c": '"x"', "a b": "{}"})
    assert texts.params() == {"loaded_keys": ["a b", "b c"], "loaded_values": ["{}", '"x"']}
