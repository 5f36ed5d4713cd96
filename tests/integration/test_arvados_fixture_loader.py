"""The fixture loader's own logic (arvados_fixture_loader.py), on text written here: it runs
without Arvados' files and without the lab, so CI checks the loader even where the
fixture tests are skipped."""

from __future__ import annotations

import datetime
import hashlib

import pytest

from tests.integration import arvados_fixture_loader as loader

NOW = datetime.datetime(2024, 3, 31, 12, 30, 45)


def render(text: str) -> str:
    return loader.render_erb(text, NOW)


def test_identify_is_rails_crc32_of_the_label():
    """Rails' own expectations (activerecord test/cases/fixtures_test.rb,
    test_identifies_consistently): :ruby is 207281424, :sapphire_2 1066363776."""
    assert loader.identify("ruby") == 207281424
    assert loader.identify("sapphire_2") == 1066363776


@pytest.mark.parametrize(
    ("erb", "expected"),
    [
        ("<%= 3.minute.ago.to_s(:db) %>", "2024-03-31 12:27:45"),
        ("<%= 13.minutes.ago.to_fs(:db) %>", "2024-03-31 12:17:45"),
        ("<%= 3.1.minute.ago.to_s(:db) %>", "2024-03-31 12:27:39"),
        ("<%= 12.hour.ago.to_s(:db) %>", "2024-03-31 00:30:45"),
        ("<%= 366.days.ago.to_s(:db) %>", "2023-03-31 12:30:45"),
        # Time#advance(months: -1) keeps the day where the month has it, else its last day
        ("<%= 1.month.ago.to_s(:db) %>", "2024-02-29 12:30:45"),
        ("<%= 2.year.ago.to_fs(:db) %>", "2022-03-31 12:30:45"),
    ],
)
def test_times_are_rendered_as_activesupport_writes_them(erb, expected):
    assert render(erb) == expected


def test_loops_and_the_loop_variable():
    text = "<% for i in 1..3 do %>r<%=i%>: <%= i.to_s.rjust(3, '0') %> <%= ((i+5)/5).hour.ago.to_s(:db) %>\n<% end %>"
    assert render(text) == ("r1: 001 2024-03-31 11:30:45\nr2: 002 2024-03-31 11:30:45\nr3: 003 2024-03-31 11:30:45\n")
    assert render("<% for i in 4..5 do %><%= (2*(i-1)).hour.ago.to_s(:db) %>,<% end %>") == (
        "2024-03-31 06:30:45,2024-03-31 04:30:45,"
    )


def test_a_digest_of_a_hash_is_md5_of_its_compact_json():
    """The shape containers.yml's secret_mounts_md5 uses, on a hash of our own."""
    erb = "<%= Digest::MD5.hexdigest(SafeJSON.dump({'/etc/a b' => {'n' => \"x\\ty\\n\", 'k' => 'v'}})) %>"
    expected = hashlib.md5(b'{"/etc/a b":{"n":"x\\ty\\n","k":"v"}}').hexdigest()
    assert render(erb) == expected


@pytest.mark.parametrize(
    "erb",
    [
        "<%= 3.weeks.ago.to_s(:db) %>",
        "<%= Time.now %>",
        "<%= 1.minute.ago %>",
        "<%= 1.minute %>",
        "<%= `id` %>",
        "<% if true %>x<% end %>",
        "<%= 1.minute.ago.to_s(:rfc822) %>",
        "<%= i %>",
    ],
)
def test_other_ruby_is_refused(erb):
    with pytest.raises(loader.FixtureError, match="ERB this loader does not"):
        render(erb)


@pytest.mark.parametrize(
    ("value", "kind", "serialization", "stored"),
    [
        ({"a": 1}, dict, "model", '{"a":1}'),
        ({}, dict, "model", None),
        ([], list, "model", None),
        (["all"], list, "model", '["all"]'),
        ({"a": 1}, dict, "fixture", "---\na: 1\n"),
        ({}, dict, "fixture", "--- {}\n"),
        (["x"], list, "fixture", "---\n- x\n"),
        ("text", dict, "model", "text"),
    ],
)
def test_serialized_values_both_ways(value, kind, serialization, stored):
    assert loader.stored_value(value, "text", kind, serialization) == stored


def test_a_time_with_its_zone_is_stored_as_utc():
    """Rails writes UTC (default_timezone :utc) into `timestamp without time zone`."""
    zoned = datetime.datetime(2020, 11, 2, 2, 20, 43, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert loader.stored_value(zoned, "timestamp without time zone", None, "model") == datetime.datetime(
        2020, 11, 2, 0, 20, 43
    )
