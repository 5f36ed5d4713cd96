"""plugins/module_utils/_common/uuids.py: format, patterns, prefixes, reproducibility."""

from __future__ import annotations

import random
import re

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import uuids

KINDS = {
    "job": "8i9sb",
    "job_task": "ot0gb",
    "log": "57u5n",
    "token": "gj3su",
    "container": "dz642",
    "container_request": "xvhdp",
    "user": "tpzed",
}


@pytest.mark.parametrize("kind,infix", sorted(KINDS.items()))
def test_infix_constants_are_arvados_infixes(kind, infix):
    assert uuids.INFIXES[kind] == infix


@pytest.mark.parametrize("kind,infix", sorted(KINDS.items()))
def test_new_uuid_matches_its_kind_only(kind, infix):
    uuid = uuids.new_uuid("zzzzz", infix)
    assert re.fullmatch(r"zzzzz-%s-[0-9a-z]{15}" % infix, uuid)
    assert uuids.is_uuid_of(kind, uuid)
    others = [other for other in KINDS if other != kind]
    assert not any(uuids.is_uuid_of(other, uuid) for other in others)


def test_job_pattern_text_is_the_documented_one():
    assert uuids.uuid_pattern(uuids.JOB_INFIX) == r"^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$"
    assert uuids.JOB_UUID_RE.match("abcde-8i9sb-0123456789abcde")
    assert not uuids.JOB_UUID_RE.match("abcde-dz642-0123456789abcde")


@pytest.mark.parametrize(
    "value",
    [
        "zzzzz-8i9sb-0123456789abcde\n",  # "$" alone would accept the newline
        "zzzzz-8i9sb-0123456789abcdef",
        "zzzzz-8i9sb-0123456789abcd",
        "ZZZZZ-8i9sb-0123456789abcde",
        "zzzzz-8i9sb-0123456789ABCDE",
        "x; rm -rf /",
        "zzzzz-8i9sb-0123456789abcde,zzzzz-8i9sb-0123456789abcdf",
        None,
        42,
    ],
)
def test_job_pattern_rejects_near_misses(value):
    assert not uuids.is_uuid_of("job", value)
    if isinstance(value, str):
        assert not uuids.JOB_UUID_RE.match(value)


def test_random_part_is_base36_of_fixed_length_and_varied():
    parts = {uuids.random_part() for _index in range(200)}
    assert len(parts) == 200
    assert all(re.fullmatch(r"[0-9a-z]{15}", part) for part in parts)
    # every character of the alphabet turns up, at every position class
    assert set("".join(parts)) == set(uuids.ALPHABET)


def test_seeded_rng_reproduces_uuids():
    first = [uuids.new_uuid("abcde", uuids.JOB_INFIX, random.Random(7)) for _index in range(3)]
    second = [uuids.new_uuid("abcde", uuids.JOB_INFIX, random.Random(7)) for _index in range(3)]
    assert first == second
    rng = random.Random(7)
    assert uuids.new_uuid("abcde", uuids.JOB_INFIX, rng) != uuids.new_uuid("abcde", uuids.JOB_INFIX, rng)


@pytest.mark.parametrize("prefix", ["zzzzz", "a1b2c", "00000", "9z9z9"])
def test_valid_prefixes(prefix):
    assert uuids.is_valid_prefix(prefix)
    assert uuids.check_prefix(prefix) == prefix


@pytest.mark.parametrize("prefix", ["", "zzzz", "zzzzzz", "ZZZZZ", "zz-zz", "zzzz\n", "zzzzz\n", " zzzz", None, 12345])
def test_invalid_prefixes(prefix):
    assert not uuids.is_valid_prefix(prefix)
    with pytest.raises(ValueError, match="cluster prefix"):
        uuids.check_prefix(prefix)
    with pytest.raises(ValueError):
        uuids.new_uuid(prefix, uuids.JOB_INFIX)


def test_bad_infix_is_refused():
    with pytest.raises(ValueError, match="infix"):
        uuids.new_uuid("zzzzz", "8i9s")


def test_system_user_uuid():
    assert uuids.system_user_uuid("zzzzz") == "zzzzz-tpzed-000000000000000"
    assert uuids.is_uuid_of("user", uuids.system_user_uuid("abcde"))


def test_cluster_of():
    assert uuids.cluster_of("abcde-8i9sb-0123456789abcde") == "abcde"
    with pytest.raises(ValueError):
        uuids.cluster_of("abcde-8i9sb-short")
