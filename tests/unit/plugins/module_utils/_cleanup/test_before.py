# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta, timezone

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils._cleanup.before import (
    EXEMPT,
    KNOWN_ZONE_OFFSET_HOURS,
    NO_STARTED_AT,
    QUALIFIES,
    Before,
    before_against,
    check_not_future,
    classify_running_job,
    parse_before,
    read_boot_time,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import BeforeError, RecoveryError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.options import excerpt


@pytest.fixture
def host_zone():
    """Switch this process's local zone, as TZ does for date; restored afterwards."""
    saved = os.environ.get("TZ")

    def use(name):
        os.environ["TZ"] = name
        time.tzset()

    yield use
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


def utc(*fields):
    return datetime(*fields, tzinfo=timezone.utc)


def instant_of(text, **kwargs):
    return parse_before(text, **kwargs).instant


@pytest.mark.parametrize(
    "text, expected",
    [
        ("@1448378837", utc(2015, 11, 24, 15, 27, 17)),
        ("@1448378837.25", utc(2015, 11, 24, 15, 27, 17, 250000)),
        ("@0", utc(1970, 1, 1)),
        ("@1.0000009", utc(1970, 1, 1, 0, 0, 1)),
        ("2015-11-24T10:27:17", utc(2015, 11, 24, 15, 27, 17)),
        ("2015-11-24 10:27:17", utc(2015, 11, 24, 15, 27, 17)),
        ("2015-11-24t10:27:17", utc(2015, 11, 24, 15, 27, 17)),
        ("2015-11-24T10:27", utc(2015, 11, 24, 15, 27)),
        ("2015-11-24T10:27:17.5", utc(2015, 11, 24, 15, 27, 17, 500000)),
        ("2015-11-24T10:27:17,123456789", utc(2015, 11, 24, 15, 27, 17, 123456)),
        ("2015-11-24", utc(2015, 11, 24, 5)),
        ("2015-11-24T10:27:17Z", utc(2015, 11, 24, 10, 27, 17)),
        ("2015-11-24T10:27:17z", utc(2015, 11, 24, 10, 27, 17)),
        ("2015-11-24T10:27:17+01:00", utc(2015, 11, 24, 9, 27, 17)),
        ("2015-11-24T10:27:17-0500", utc(2015, 11, 24, 15, 27, 17)),
        ("2015-11-24T10:27:17+03", utc(2015, 11, 24, 7, 27, 17)),
        ("2015-11-24 10:27:17 +0545", utc(2015, 11, 24, 4, 42, 17)),
        ("2015-11-24 10:27:17.5-05:00", utc(2015, 11, 24, 15, 27, 17, 500000)),
        ("2015-11-24 10:27:17 PST", utc(2015, 11, 24, 18, 27, 17)),
        ("Tue Nov 24 10:27:17 EST 2015", utc(2015, 11, 24, 15, 27, 17)),
        ("Tue Nov 24 10:27:17 UTC 2015", utc(2015, 11, 24, 10, 27, 17)),
        ("Tue Nov 24 18:27:17 +03 2015", utc(2015, 11, 24, 15, 27, 17)),
        ("Tue Nov 24 21:12:17 +0545 2015", utc(2015, 11, 24, 15, 27, 17)),
        ("Tue Nov  3 10:27:17 EST 2015", utc(2015, 11, 3, 15, 27, 17)),
        ("tue nov 24 10:27:17 est 2015", utc(2015, 11, 24, 15, 27, 17)),
        ("Tue 24 Nov 10:27:17 UTC 2015", utc(2015, 11, 24, 10, 27, 17)),
        ("Tue Nov 24 10:27:17 PM UTC 2015", utc(2015, 11, 24, 22, 27, 17)),
        ("Tue Nov 24 12:27:17 AM UTC 2015", utc(2015, 11, 24, 0, 27, 17)),
        ("Tue Nov 24 12:27:17 PM UTC 2015", utc(2015, 11, 24, 12, 27, 17)),
        ("Tue, 24 Nov 2015 10:27:17 -0500", utc(2015, 11, 24, 15, 27, 17)),
        ("Nov 24 10:27:17 2015", utc(2015, 11, 24, 15, 27, 17)),
        ("  Tue Nov 24 10:27:17 2015  ", utc(2015, 11, 24, 15, 27, 17)),
    ],
)
def test_every_accepted_form(host_zone, text, expected):
    host_zone("America/New_York")
    before = parse_before(text)
    assert before.instant == expected
    assert before.source == "argument"


@pytest.mark.parametrize("abbreviation, hours", sorted(KNOWN_ZONE_OFFSET_HOURS.items()))
def test_known_abbreviations_on_a_utc_host(host_zone, abbreviation, hours):
    host_zone("UTC")
    expected = utc(2015, 11, 24, 10, 27, 17) - timedelta(hours=hours)
    assert instant_of("Tue Nov 24 10:27:17 %s 2015" % abbreviation) == expected


def test_default_date_output_of_a_utc_host_round_trips(host_zone):
    host_zone("UTC")
    now = int(time.time())
    printed = time.strftime("%a %b %e %H:%M:%S %Z %Y", time.localtime(now))
    assert instant_of(printed) == utc(1970, 1, 1) + timedelta(seconds=now)


def test_date_output_with_a_numeric_zone_round_trips(host_zone):
    host_zone("Asia/Kathmandu")
    printed = time.strftime("%a %b %e %H:%M:%S %Z %Y", time.localtime(1448378837))
    assert printed == "Tue Nov 24 21:12:17 +0545 2015"
    assert instant_of(printed) == utc(2015, 11, 24, 15, 27, 17)


def test_local_abbreviation_wins_over_the_us_table(host_zone):
    host_zone("Asia/Shanghai")
    assert instant_of("Tue Nov 24 23:27:17 CST 2015") == utc(2015, 11, 24, 15, 27, 17)


def test_us_table_applies_where_the_local_zone_uses_other_names(host_zone):
    host_zone("Asia/Shanghai")
    assert instant_of("Tue Nov 24 10:27:17 CDT 2015") == utc(2015, 11, 24, 15, 27, 17)


def test_local_abbreviation_outside_the_table_is_accepted(host_zone):
    host_zone("Europe/Paris")
    assert instant_of("Tue Nov 24 16:27:17 CET 2015") == utc(2015, 11, 24, 15, 27, 17)
    assert instant_of("Wed Jun 24 17:27:17 CEST 2015") == utc(2015, 6, 24, 15, 27, 17)


def test_local_abbreviation_not_in_effect_at_that_time_is_unknown(host_zone):
    host_zone("Europe/Paris")
    with pytest.raises(BeforeError, match="unknown time zone abbreviation 'CEST'"):
        parse_before("Tue Nov 24 16:27:17 CEST 2015")


def test_unknown_abbreviation_is_named_with_the_known_ones(host_zone):
    host_zone("UTC")
    with pytest.raises(BeforeError) as raised:
        parse_before("Tue Nov 24 10:27:17 IST 2015")
    message = str(raised.value)
    assert "unknown time zone abbreviation 'IST'" in message
    assert "EST" in message and "-0500" in message
    assert "Tue Nov 24 10:27:17 IST 2015" in message


def test_time_without_zone_is_local_in_winter_and_summer(host_zone):
    host_zone("America/New_York")
    assert instant_of("2015-01-15 12:00") == utc(2015, 1, 15, 17)
    assert instant_of("2015-07-15 12:00") == utc(2015, 7, 15, 16)


def refusal(text):
    """The message parse_before refuses `text` with."""
    with pytest.raises(BeforeError) as raised:
        parse_before(text)
    return str(raised.value)


def test_repeated_local_hour_is_refused_with_both_readings(host_zone):
    host_zone("America/New_York")
    assert refusal("2015-11-01 01:30") == (
        "option before='2015-11-01 01:30' refused: local time 2015-11-01 01:30 happens twice on this host "
        "(TZ=America/New_York), as EDT (UTC-04:00) and EST (UTC-05:00): write the zone, as "
        "2015-11-01T01:30:00-04:00 or 2015-11-01T01:30:00-05:00"
    )
    # Each reading the message offers is read as one instant, an hour apart.
    assert instant_of("2015-11-01T01:30:00-04:00") == utc(2015, 11, 1, 5, 30)
    assert instant_of("2015-11-01T01:30:00-05:00") == utc(2015, 11, 1, 6, 30)


def test_repeated_local_hour_with_an_abbreviation_is_exact(host_zone):
    host_zone("America/New_York")
    assert parse_before("Sun Nov  1 01:30:00 EDT 2015").instant == utc(2015, 11, 1, 5, 30)
    late = parse_before("Sun Nov  1 01:30:00 EST 2015")
    assert late.instant == utc(2015, 11, 1, 6, 30)
    assert late.source == "argument"


def test_skipped_local_hour_is_refused(host_zone):
    host_zone("America/New_York")
    assert refusal("2015-03-08T02:30:00") == (
        "option before='2015-03-08T02:30:00' refused: local time 2015-03-08 02:30 never happened on this host "
        "(TZ=America/New_York): a clock change skipped it; write the zone, as 2015-03-08T02:30:00-05:00 or "
        "2015-03-08T02:30:00-04:00"
    )


def test_skipped_local_hour_with_an_offset_is_exact(host_zone):
    host_zone("America/New_York")
    assert instant_of("2015-03-08T02:30:00-05:00") == utc(2015, 3, 8, 7, 30)
    assert instant_of("Sun Mar  8 02:30:00 EST 2015") == utc(2015, 3, 8, 7, 30)


def test_hours_next_to_the_clock_change_are_unambiguous(host_zone):
    host_zone("America/New_York")
    assert parse_before("2015-11-01 00:59:59").source == "argument"
    assert instant_of("2015-11-01 02:00") == utc(2015, 11, 1, 7)
    assert instant_of("2015-03-08 03:00") == utc(2015, 3, 8, 7)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("yesterday", None),
        ("1448378837", None),
        ("@", None),
        ("@12abc", None),
        ("2015-11-24T", None),
        ("2015-11-24T10:27:17 +01:00:00", None),
        ("2015-13-01", "month must be in 1..12"),
        ("2015-02-30 10:00", "day is out of range for month"),
        ("2015-11-24 24:00", "hour must be in 0..23"),
        ("2015-11-24T10:27:17+25:00", "bad UTC offset '+25:00'"),
        ("Wed Nov 24 10:27:17 UTC 2015", "2015-11-24 is a Tue, not a Wed"),
        ("Tue Nov 24 10:27:17 UTC", "give the year once"),
        ("Tue 2015 Nov 24 10:27:17 UTC 2015", None),
        ("Tue Nov 24 2015 10:27:17 UTC 2015", "give the year once"),
        ("Tue Foo 24 10:27:17 UTC 2015", "unknown month 'foo'"),
        ("Xyz Nov 24 10:27:17 UTC 2015", "unknown weekday 'Xyz'"),
        ("Tue Nov 24 13:27:17 PM UTC 2015", "hour 13 with PM"),
    ],
)
def test_unreadable_values_name_the_value_and_list_the_forms(host_zone, text, reason):
    host_zone("UTC")
    message = refusal(text)
    assert message.startswith("cannot read before=%r" % text)
    assert "'reboot'" in message and "'@<epoch seconds>'" in message
    assert "2015-11-24T10:27:17+01:00" in message and "'Tue Nov 24 10:27:17 EST 2015'" in message
    assert "\n" not in message
    if reason:
        assert reason in message


def test_before_errors_are_recovery_errors():
    assert issubclass(BeforeError, RecoveryError)


def test_reboot_reads_btime(tmp_path):
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu  1 2 3 4\nintr 5\nctxt 6\nbtime 1448378837\nprocesses 7\n")
    before = parse_before(" Reboot ", proc_stat_path=str(proc_stat))
    assert before.instant == utc(2015, 11, 24, 15, 27, 17)
    assert before.source == "reboot (btime 1448378837 in %s)" % proc_stat


@pytest.mark.parametrize("host_ahead", [timedelta(0), timedelta(seconds=90), -timedelta(seconds=90)])
def test_reboot_is_placed_on_the_database_clock_whatever_this_hosts_clock_says(tmp_path, host_ahead):
    """Booted 30 s ago by the database's clock: whether this host's clock (btime's) runs
    90 s ahead or behind, `before` is the database's now() less the uptime, so a job
    the API started 10 s ago (by the database's clock) stays exempt."""
    database_now = datetime(2026, 12, 4, 12, 0, 0)
    btime = int((database_now - timedelta(seconds=30) + host_ahead).replace(tzinfo=timezone.utc).timestamp())
    (tmp_path / "stat").write_text("cpu 1\nbtime %d\n" % btime)
    (tmp_path / "uptime").write_text("30.25 55.10\n")
    parsed = parse_before("reboot", proc_stat_path=str(tmp_path / "stat"))

    before = before_against(parsed, database_now)

    assert before.to_db_timestamp() == database_now - timedelta(seconds=30.25)
    assert before.source == (
        "reboot (the database's now() less this host's uptime, 30.25 s; btime %d in %s)" % (btime, tmp_path / "stat")
    )
    assert classify_running_job(database_now - timedelta(seconds=10), before) == EXEMPT
    assert classify_running_job(database_now - timedelta(seconds=31), before) == QUALIFIES


@pytest.mark.parametrize("content", ["", "soon 5\n", "-3 4\n"])
def test_an_unreadable_uptime_is_an_error_naming_the_file(tmp_path, content):
    (tmp_path / "stat").write_text("btime 1448378837\n")
    (tmp_path / "uptime").write_text(content)
    parsed = parse_before("reboot", proc_stat_path=str(tmp_path / "stat"))
    with pytest.raises(
        BeforeError, match=re.escape("%s does not start with a number of seconds" % (tmp_path / "uptime"))
    ):
        before_against(parsed, datetime(2026, 12, 4))


def test_a_written_time_is_checked_not_moved():
    parsed = parse_before("2026-12-04T11:00:00Z")
    assert before_against(parsed, datetime(2026, 12, 4, 12)) is parsed
    assert before_against(None, datetime(2026, 12, 4, 12)) is None


def test_missing_btime_line_is_an_error(tmp_path):
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu  1 2 3 4\nctxt 6\n")
    with pytest.raises(BeforeError, match="has no btime line"):
        read_boot_time(str(proc_stat))


@pytest.mark.parametrize("line", ["btime", "btime soon", "btime 12 34", "btime -5"])
def test_unparsable_btime_is_an_error(tmp_path, line):
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu 1\n%s\n" % line)
    with pytest.raises(BeforeError, match="btime line of .* is not a number of seconds"):
        read_boot_time(str(proc_stat))


def test_missing_proc_stat_is_an_error(tmp_path):
    missing = tmp_path / "no-such-stat"
    with pytest.raises(BeforeError, match=re.escape("cannot read %s (No such file" % missing)):
        parse_before("reboot", proc_stat_path=str(missing))


def test_this_hosts_proc_stat_parses():
    boot_time = read_boot_time()
    assert datetime(2000, 1, 1).timestamp() < boot_time <= time.time()


def test_db_timestamp_is_naive_utc(host_zone):
    host_zone("Europe/Paris")
    before = parse_before("2015-11-24T10:27:17.5+01:00")
    assert before.to_db_timestamp() == datetime(2015, 11, 24, 9, 27, 17, 500000)
    assert before.to_db_timestamp().tzinfo is None
    assert before.to_iso8601() == "2015-11-24T09:27:17.500000Z"
    assert parse_before("@1448378837").to_iso8601() == "2015-11-24T15:27:17Z"


THRESHOLD = Before(utc(2015, 11, 24, 15, 27, 17), "argument")


@pytest.mark.parametrize(
    "started_at, expected",
    [
        (datetime(2015, 11, 24, 15, 27, 16, 999999), QUALIFIES),
        (datetime(2015, 11, 24, 15, 27, 17), EXEMPT),
        (datetime(2015, 11, 25), EXEMPT),
        (None, NO_STARTED_AT),
        (datetime(2015, 11, 24, 16, 27, 16, tzinfo=timezone(timedelta(hours=1))), QUALIFIES),
        (datetime(2015, 11, 24, 10, 27, 17, tzinfo=timezone(timedelta(hours=-5))), EXEMPT),
    ],
)
def test_running_job_classification_with_a_before(started_at, expected):
    assert classify_running_job(started_at, THRESHOLD) == expected


@pytest.mark.parametrize("started_at", [None, datetime(2015, 11, 24), datetime(2099, 1, 1)])
def test_without_before_every_running_job_qualifies(started_at):
    assert classify_running_job(started_at, None) == QUALIFIES


# -- values of before nobody meant (issue 34) ----------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_an_empty_before_is_refused_not_read_as_no_threshold(text):
    with pytest.raises(BeforeError) as raised:
        parse_before(text)
    assert str(raised.value).startswith("option before is empty")
    assert str(raised.value).endswith(
        "(an unset shell variable?): give 'reboot' or a time, or leave before out (no --before) to take every "
        "Running job"
    )


@pytest.mark.parametrize(
    "text", ["9999-12-31T23:59:59-05:00", "9999-12-31 23:59:59 EST", "Fri Dec 31 23:59:59 -0100 9999", "@1e400"]
)
def test_an_instant_past_what_python_holds_is_a_clear_error(host_zone, text):
    host_zone("UTC")
    with pytest.raises(BeforeError) as raised:
        parse_before(text)
    assert str(raised.value).startswith("cannot read before=%s" % excerpt(text))


def test_the_last_instant_python_holds_in_utc_is_read(host_zone):
    host_zone("UTC")
    assert instant_of("9999-12-31T23:59:59+01:00") == utc(9999, 12, 31, 22, 59, 59)


@pytest.mark.parametrize(
    "tz, offset", [("ABC+25", "-24:00"), ("ABC-25", "+24:00"), ("ABC+13", "-13:00"), ("XYZ-15", "+15:00")]
)
def test_a_local_time_with_an_offset_no_zone_has_is_refused(host_zone, tz, offset):
    host_zone(tz)
    for text in ("2026-12-04 10:00", "Fri Dec  4 10:00:00 %s 2026" % time.tzname[0]):
        with pytest.raises(BeforeError) as raised:
            parse_before(text)
        assert str(raised.value) == (
            "option before=%s refused: this host's local time is UTC%s (TZ=%s), an offset no zone has (they "
            "run from -12:00 to +14:00); write the zone, as 2015-11-24T10:27:17-05:00 or 2015-11-24T15:27:17Z"
            % (excerpt(text), offset, tz)
        )
    # A time with its zone does not depend on the host's.
    assert instant_of("2026-12-04T10:00:00Z") == utc(2026, 12, 4, 10)


def test_utc_in_the_value_is_utc_whatever_tz_says(host_zone):
    host_zone("UTC+25")
    with pytest.raises(BeforeError, match="local time is UTC-24:00 \\(TZ=UTC\\+25\\)"):
        parse_before("2026-12-04 10:00")
    assert instant_of("Fri Dec  4 10:00:00 UTC 2026") == utc(2026, 12, 4, 10)
    assert instant_of("2026-12-04 10:00 GMT") == utc(2026, 12, 4, 10)


@pytest.mark.parametrize("tz", ["UTC-14", "UTC+12", "Pacific/Kiritimati", "Etc/GMT+12"])
def test_the_zones_at_the_ends_of_the_world_are_read(host_zone, tz):
    host_zone(tz)
    assert parse_before("2026-12-04 10:00").source == "argument"


@pytest.mark.parametrize(
    "tz, problem",
    [
        ("", "TZ is set but empty, which glibc reads as UTC"),
        ("America/New_Yrok", None),
        (":Nowhere/City", None),
        ("XYZ", None),
        ("/nonexistent/zone", None),
        ("../../../etc/passwd", None),
    ],
)
def test_a_tz_that_names_no_zone_is_refused_for_local_times(host_zone, tz, problem):
    host_zone(tz)
    with pytest.raises(BeforeError) as raised:
        parse_before("2026-12-04 10:00")
    expected = problem or (
        "TZ=%s names no zone of this host (no such file under /usr/share/zoneinfo) and is no POSIX TZ string, "
        "so glibc reads local times as UTC" % tz
    )
    assert str(raised.value) == (
        "option before='2026-12-04 10:00' refused: %s; write the zone, as 2015-11-24T10:27:17-05:00 or "
        "2015-11-24T15:27:17Z" % expected
    )
    # With a zone of its own the time is read whatever TZ says.
    assert instant_of("2026-12-04 10:00 UTC") == utc(2026, 12, 4, 10)


@pytest.mark.parametrize("tz", ["UTC", "EST5EDT", "EST5EDT,M3.2.0,M11.1.0", "<+0545>-5:45", ":America/New_York"])
def test_a_tz_of_the_zone_database_or_posix_is_taken(host_zone, tz):
    host_zone(tz)
    assert parse_before("2026-12-04 10:00").source == "argument"


def test_a_long_value_is_cut_in_the_message():
    text = "2026-12-04" + "x" * 100000
    with pytest.raises(BeforeError) as raised:
        parse_before(text)
    assert str(raised.value).startswith("cannot read before='%s...' (100010 characters): " % text[:60])
    assert len(str(raised.value)) < 1000


DB_NOW = datetime(2026, 12, 4, 12, 0, 0, 123456)


@pytest.mark.parametrize(
    "text, iso",
    [
        ("2026-12-14", "2026-12-14T00:00:00Z"),
        ("2099-01-01", "2099-01-01T00:00:00Z"),
        ("2026-12-04T12:00:00.123457Z", "2026-12-04T12:00:00.123457Z"),
        ("@1796428800", "2026-12-05T00:00:00Z"),
    ],
)
def test_a_before_later_than_the_databases_now_is_refused(host_zone, text, iso):
    host_zone("UTC")
    with pytest.raises(BeforeError) as raised:
        check_not_future(parse_before(text), DB_NOW)
    assert str(raised.value) == (
        "option before is later than the database's now(), so it would take every Running job, the healthy ones "
        "started after the reboot too: got %s (%s), the database's now() is 2026-12-04T12:00:00.123456Z; nothing "
        "was changed. Give a time in the past (a typo in the date?), or leave before out (no --before) to take "
        "every Running job" % (excerpt(text), iso)
    )


@pytest.mark.parametrize("text", ["2026-12-04", "2026-12-04T12:00:00.123456Z", "@0", "2026-12-04T13:00:00+01:00"])
def test_a_before_up_to_the_databases_now_is_taken(host_zone, text):
    host_zone("UTC")
    check_not_future(parse_before(text), DB_NOW)
    check_not_future(parse_before(text), DB_NOW.replace(tzinfo=timezone.utc))
    check_not_future(None, DB_NOW)


def test_an_aware_database_now_is_compared_in_utc(host_zone):
    host_zone("UTC")
    east = timezone(timedelta(hours=5))
    # 17:00 at +05:00 is 12:00 UTC: a before of 12:30 UTC is later.
    with pytest.raises(BeforeError, match="now\\(\\) is 2026-12-04T12:00:00Z"):
        check_not_future(parse_before("2026-12-04T12:30:00Z"), datetime(2026, 12, 4, 17, 0, tzinfo=east))


def test_a_before_later_than_the_database_now_is_refused(host_zone):
    host_zone("UTC")
    assert before_against(None, DB_NOW) is None
    earlier = parse_before("2026-12-01")
    assert before_against(earlier, DB_NOW) is earlier
    with pytest.raises(BeforeError, match="later than the database's now"):
        before_against(parse_before("2026-12-14"), DB_NOW)
