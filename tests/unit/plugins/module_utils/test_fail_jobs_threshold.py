# -*- coding: utf-8 -*-
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import os
import re
import time
from datetime import datetime, timedelta, timezone

import pytest

from ansible_collections.arvados_ops.recovery.plugins.module_utils.errors import RecoveryError, ThresholdError
from ansible_collections.arvados_ops.recovery.plugins.module_utils.fail_jobs_threshold import (
    EXEMPT,
    KNOWN_ZONE_OFFSET_HOURS,
    NO_STARTED_AT,
    QUALIFIES,
    Threshold,
    classify_running_job,
    parse_before,
    read_boot_time,
)


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
    threshold = parse_before(text)
    assert threshold.instant == expected
    assert threshold.source == "argument"


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
    with pytest.raises(ThresholdError, match="unknown time zone abbreviation 'CEST'"):
        parse_before("Tue Nov 24 16:27:17 CEST 2015")


def test_unknown_abbreviation_is_named_with_the_known_ones(host_zone):
    host_zone("UTC")
    with pytest.raises(ThresholdError) as raised:
        parse_before("Tue Nov 24 10:27:17 IST 2015")
    message = str(raised.value)
    assert "unknown time zone abbreviation 'IST'" in message
    assert "EST" in message and "-0500" in message
    assert "Tue Nov 24 10:27:17 IST 2015" in message


def test_time_without_zone_is_local_in_winter_and_summer(host_zone):
    host_zone("America/New_York")
    assert instant_of("2015-01-15 12:00") == utc(2015, 1, 15, 17)
    assert instant_of("2015-07-15 12:00") == utc(2015, 7, 15, 16)


def test_repeated_local_hour_takes_the_earlier_instant(host_zone):
    host_zone("America/New_York")
    threshold = parse_before("2015-11-01 01:30")
    assert threshold.instant == utc(2015, 11, 1, 5, 30)
    assert "happens twice" in threshold.source and "EDT" in threshold.source


def test_repeated_local_hour_with_an_abbreviation_is_exact(host_zone):
    host_zone("America/New_York")
    assert parse_before("Sun Nov  1 01:30:00 EDT 2015").instant == utc(2015, 11, 1, 5, 30)
    late = parse_before("Sun Nov  1 01:30:00 EST 2015")
    assert late.instant == utc(2015, 11, 1, 6, 30)
    assert late.source == "argument"


def test_skipped_local_hour_takes_the_earliest_reading(host_zone):
    host_zone("America/New_York")
    threshold = parse_before("2015-03-08T02:30:00")
    assert threshold.instant == utc(2015, 3, 8, 6, 30)
    assert "skipped by a clock change" in threshold.source and "-04:00" in threshold.source


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
        ("", None),
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
    with pytest.raises(ThresholdError) as raised:
        parse_before(text)
    message = str(raised.value)
    assert message.startswith("cannot read before=%r" % text)
    assert "'reboot'" in message and "'@<epoch seconds>'" in message
    assert "2015-11-24T10:27:17+01:00" in message and "'Tue Nov 24 10:27:17 EST 2015'" in message
    assert "\n" not in message
    if reason:
        assert reason in message


def test_threshold_errors_are_recovery_errors():
    assert issubclass(ThresholdError, RecoveryError)


def test_reboot_reads_btime(tmp_path):
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu  1 2 3 4\nintr 5\nctxt 6\nbtime 1448378837\nprocesses 7\n")
    threshold = parse_before(" Reboot ", proc_stat_path=str(proc_stat))
    assert threshold.instant == utc(2015, 11, 24, 15, 27, 17)
    assert threshold.source == "reboot (btime 1448378837 in %s)" % proc_stat


def test_missing_btime_line_is_an_error(tmp_path):
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu  1 2 3 4\nctxt 6\n")
    with pytest.raises(ThresholdError, match="has no btime line"):
        read_boot_time(str(proc_stat))


@pytest.mark.parametrize("line", ["btime", "btime soon", "btime 12 34", "btime -5"])
def test_unparsable_btime_is_an_error(tmp_path, line):
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu 1\n%s\n" % line)
    with pytest.raises(ThresholdError, match="btime line of .* is not a number of seconds"):
        read_boot_time(str(proc_stat))


def test_missing_proc_stat_is_an_error(tmp_path):
    missing = tmp_path / "no-such-stat"
    with pytest.raises(ThresholdError, match=re.escape("cannot read %s (No such file" % missing)):
        parse_before("reboot", proc_stat_path=str(missing))


def test_this_hosts_proc_stat_parses():
    boot_time = read_boot_time()
    assert datetime(2000, 1, 1).timestamp() < boot_time <= time.time()


def test_db_timestamp_is_naive_utc(host_zone):
    host_zone("Europe/Paris")
    threshold = parse_before("2015-11-24T10:27:17.5+01:00")
    assert threshold.to_db_timestamp() == datetime(2015, 11, 24, 9, 27, 17, 500000)
    assert threshold.to_db_timestamp().tzinfo is None
    assert threshold.to_iso8601() == "2015-11-24T09:27:17.500000Z"
    assert parse_before("@1448378837").to_iso8601() == "2015-11-24T15:27:17Z"


THRESHOLD = Threshold(utc(2015, 11, 24, 15, 27, 17), "argument")


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
def test_running_job_classification_with_a_threshold(started_at, expected):
    assert classify_running_job(started_at, THRESHOLD) == expected


@pytest.mark.parametrize("started_at", [None, datetime(2015, 11, 24), datetime(2099, 1, 1)])
def test_without_a_threshold_every_running_job_qualifies(started_at):
    assert classify_running_job(started_at, None) == QUALIFIES
