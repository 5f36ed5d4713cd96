# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Option ``before`` of ``arvados_fail_jobs``: which Running jobs it touches.

Which jobs qualify
------------------
Only jobs in state ``Running`` are ever considered.

* ``before`` not given: every Running job qualifies, whatever its ``started_at``.
* ``before`` given: a job qualifies when ``started_at < before`` and is *exempt*
  when ``started_at >= before`` (it started after the reboot, so a live
  dispatcher may be watching it).
* ``before`` given and ``started_at`` NULL: the job is classified
  ``no_started_at``. It is reported and left alone. Arvados sets ``started_at``
  when a job becomes Running, so such a row is inconsistent and there is no way
  to tell whether it started before the threshold; failing it could kill live
  work. Unlike Arvados' old Rails cleanup, which skipped these rows silently,
  the module reports them; to clean them up, run again with their ``uuids`` and
  without ``before``.

Accepted forms of ``before``
----------------------------
* ``reboot``: this host's boot, read on the database's clock once connected: its
  ``now()`` less this host's uptime (``/proc/uptime``, a monotonic count that no
  clock setting moves). Arvados writes ``started_at`` by the database's clock
  (``db_current_time``, 1.4.3 app/models/job.rb), and at boot this host's own clock
  may be off until NTP sets it: the ``btime`` line of ``/proc/stat`` (this host's
  clock less the uptime) would then put the boot after jobs that started since, and
  fail them. Before the database answers, the threshold shows ``btime``.
* ``@<epoch seconds>``, fractions allowed: ``@1448378837``, ``@1448378837.25``
  (what ``date +%s`` or ``date +%s.%N`` prints).
* ISO 8601: ``2015-11-24T10:27:17``, ``2015-11-24 10:27:17``, ``2015-11-24T10:27``,
  fractional seconds (``.25`` or ``,25``), a zone ``Z``, ``+01:00``, ``-0500``,
  ``+03`` or an abbreviation after a space (``2015-11-24 10:27:17 EST``), or a
  date alone (``2015-11-24``: midnight at the start of that day, local time).
* What ``date`` prints: ``Tue Nov 24 10:27:17 EST 2015`` (the C locale default),
  ``Tue Nov  4 10:27:17 +0545 2015`` (zones without a name), ``Tue 24 Nov
  10:27:17 UTC 2015``, 12-hour times with ``AM``/``PM``, and ``date -R``'s
  ``Tue, 24 Nov 2015 10:27:17 -0500``. English names, any letter case. A weekday
  that does not match the date is an error: it points to a typo.

Zones
-----
A time without a zone is local time of the host that parses it (``TZ`` and
``/etc/localtime``, as for ``date``). A zone abbreviation other than UTC, GMT,
UT and Z (UTC everywhere) is first read as this host's own zone at that time
(``date`` on a host in Shanghai prints ``CST`` for UTC+8, not US Central), then from a fixed table: UTC, GMT, UT, Z (+0), EST
(-5), EDT (-4), CST (-6), CDT (-5), MST (-7), MDT (-6), PST (-8), PDT (-7).
Any other abbreviation is an error that says so: abbreviations are ambiguous
world-wide, and a wrong guess moves the threshold by hours.

Refused, by name, before anything is read or changed (a threshold nobody meant
fails healthy jobs, cancels their Slurm jobs and revokes their tokens, none of
which can be undone):

* an empty or blank value (an unset shell variable, ``before: ""``): not "no
  threshold". No threshold is asked for by leaving ``before`` out (no
  ``--before``; the module's ``before`` unset or null);
* a local time (no zone, or this host's own abbreviation) that happens twice
  (the hour repeated when summer time ends) or never (the hour skipped when it
  starts): the message gives both readings with their offsets, to write one;
* a local time when the host's zone is no zone: ``TZ`` set but empty, naming
  no file under ``/usr/share/zoneinfo`` and no POSIX TZ string (glibc then
  silently uses UTC), or giving a UTC offset no zone has, outside -12:00 to
  +14:00 (``TZ=UTC+25``: glibc takes it as 24 hours, a day off);
* an instant out of Python's range (``9999-12-31T23:59:59-05:00``);
* (checked on the database, :func:`check_not_future`) an instant later than
  the database's ``now()``: jobs started after it do not exist yet, so such a
  threshold takes every Running job, the healthy ones too (``2026-12-14`` for
  ``2026-12-04``). Leave ``before`` out to mean that.

Sub-microsecond fractions are truncated, never rounded up: jobs started at or
after the threshold are exempt, so a threshold never moves later than written.

The threshold is kept as an aware UTC datetime; ``to_db_timestamp()`` gives the
naive UTC value to compare with Arvados' ``timestamp without time zone``
columns, which hold UTC.
"""

from __future__ import annotations

import calendar
import os
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from decimal import ROUND_FLOOR, Decimal
from typing import Any, List, Mapping, NamedTuple, Optional, Tuple, cast

from .._common.errors import BeforeError, cut
from .._common.options import excerpt

PROC_STAT = "/proc/stat"
PROC_UPTIME = "/proc/uptime"

QUALIFIES = "qualifies"
EXEMPT = "exempt"
NO_STARTED_AT = "no_started_at"

ACCEPTED_FORMS = (
    "accepted forms: 'reboot'; '@<epoch seconds>' such as @1448378837.5; "
    "ISO 8601 such as 2015-11-24T10:27:17, 2015-11-24 10:27:17.5, "
    "2015-11-24T10:27:17Z, 2015-11-24T10:27:17+01:00, 2015-11-24 10:27:17 EST "
    "or 2015-11-24; or what date prints, such as 'Tue Nov 24 10:27:17 EST 2015'; "
    "a time without zone is local time"
)

KNOWN_ZONE_OFFSET_HOURS = {
    "UTC": 0,
    "GMT": 0,
    "UT": 0,
    "Z": 0,
    "EST": -5,
    "EDT": -4,
    "CST": -6,
    "CDT": -5,
    "MST": -7,
    "MDT": -6,
    "PST": -8,
    "PDT": -7,
}

_UNIVERSAL_ZONES = ("UTC", "GMT", "UT", "Z")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# Clock changes are months apart, so the UTC offsets in effect one day either
# side of a wall time are every offset that wall time can have.
_PROBE_SECONDS = 86400
# The UTC offsets of the world's zones today: Baker Island -12:00, Kiribati +14:00.
MIN_UTC_OFFSET_SECONDS = -12 * 3600
MAX_UTC_OFFSET_SECONDS = 14 * 3600
ZONEINFO = "/usr/share/zoneinfo"
NO_BEFORE_HINT = "leave before out (no --before) to take every Running job"
_POSIX_ZONE_NAME = r"(?:[A-Za-z]{3,}|<[A-Za-z0-9+-]{3,}>)"
_POSIX_OFFSET = r"[+-]?\d{1,2}(?::\d{1,2}(?::\d{1,2})?)?"
_POSIX_TZ = re.compile(
    _POSIX_ZONE_NAME + _POSIX_OFFSET + r"(?:" + _POSIX_ZONE_NAME + r"(?:" + _POSIX_OFFSET + r")?(?:,[^,]+,[^,]+)?)?",
    re.ASCII,
)

_ZONE = r"[+-]\d{2}(?::?\d{2})?|[a-z]{1,6}"
_CLOCK = r"(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2})(?:[.,](?P<fraction>\d+))?)?"
_EPOCH_FORM = re.compile(r"@(?P<seconds>[+-]?\d+(?:\.\d+)?)", re.ASCII)
_ISO_FORM = re.compile(
    r"(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})"
    r"(?:[t ]" + _CLOCK + r"\s*(?P<zone>" + _ZONE + r")?)?",
    re.ASCII | re.IGNORECASE,
)
_DATE_COMMAND_FORM = re.compile(
    r"(?:(?P<weekday>[a-z]{3}),?\s+)?"
    r"(?:(?P<month_name>[a-z]{3})\s+(?P<day>\d{1,2})"
    r"|(?P<day_first>\d{1,2})\s+(?P<month_name_second>[a-z]{3}))"
    r"\s+(?:(?P<year_before_time>\d{4})\s+)?" + _CLOCK + r"(?:\s*(?P<meridiem>[ap]m))?"
    r"(?:\s+(?P<zone>" + _ZONE + r"))?"
    r"(?:\s+(?P<year_after_time>\d{4}))?",
    re.ASCII | re.IGNORECASE,
)


@dataclass(frozen=True)
class Before:
    """The instant jobs must have started before to qualify; `given` is the value as
    written (``reboot``, ``2026-12-04``), for messages."""

    instant: datetime
    source: str
    given: str = ""
    # For ``reboot``: where this host's uptime is read once the database's now() is
    # known (on_database_clock); None for a `before` written as a time.
    uptime_path: Optional[str] = None

    def to_db_timestamp(self) -> datetime:
        """Naive UTC, comparable with Arvados' ``timestamp without time zone``."""
        return self.instant.astimezone(timezone.utc).replace(tzinfo=None)

    def to_iso8601(self) -> str:
        """``2015-11-24T15:27:17Z``, with microseconds only when there are any."""
        return self.to_db_timestamp().isoformat() + "Z"


class _LocalReading(NamedTuple):
    epoch_seconds: int
    abbreviation: str
    utc_offset_seconds: int


def parse_before(text: str, proc_stat_path: str = PROC_STAT) -> Before:
    """Turn a ``before`` value into a :class:`Before`; see the module docstring."""
    value = text.strip()
    if not value:
        raise BeforeError(
            "option before is empty%s (an unset shell variable?): give 'reboot' or a time, or %s"
            % ("" if not text else " (only blanks, got %s)" % excerpt(text), NO_BEFORE_HINT)
        )
    if value.lower() == "reboot":
        boot_time = read_boot_time(proc_stat_path)
        return Before(
            _from_epoch(Decimal(boot_time)),
            "reboot (btime %d in %s)" % (boot_time, proc_stat_path),
            text,
            uptime_path=os.path.join(os.path.dirname(proc_stat_path), "uptime"),
        )
    epoch_match = _EPOCH_FORM.fullmatch(value)
    if epoch_match:
        return Before(_from_epoch(Decimal(epoch_match.group("seconds")), text), "argument", text)
    instant, note = _parse_calendar_time(value, text)
    return Before(instant, "argument (%s)" % note if note else "argument", text)


def check_not_future(before: Optional[Before], database_now: datetime) -> None:
    """A BeforeError naming option before, its value and `database_now` (the
    database's ``now()``, aware, or naive UTC) when `before` is later: see the
    module docstring."""
    if before is None:
        return
    if database_now.tzinfo is not None:
        database_now = database_now.astimezone(timezone.utc).replace(tzinfo=None)
    if before.to_db_timestamp() <= database_now:
        return
    raise BeforeError(
        "option before is later than the database's now(), so it would take every Running job, the "
        "healthy ones started after the reboot too: got %s (%s), the database's now() is %sZ; nothing was "
        "changed. Give a time in the past (a typo in the date?), or %s"
        % (
            excerpt(before.given or before.source),
            before.to_iso8601(),
            database_now.isoformat(),
            NO_BEFORE_HINT,
        )
    )


def before_against(before: Optional[Before], database_now: datetime) -> Optional[Before]:
    """The `before` the run uses, against the database's `database_now` (UTC, read with
    the other checks, _cleanup.checks.ServerFacts), the clock Arvados writes ``started_at``
    by: ``reboot`` placed on that clock (on_database_clock), a time checked not to be later
    (check_not_future)."""
    if before is None:
        return None
    if before.uptime_path is not None:
        return on_database_clock(before, database_now, read_uptime(before.uptime_path))
    check_not_future(before, database_now)
    return before


def on_database_clock(before: Before, database_now: datetime, uptime: Decimal) -> Before:
    """``reboot`` as the database's `database_now` less this host's `uptime` (seconds):
    the boot on the clock that wrote ``started_at``, whatever this host's clock says."""
    if database_now.tzinfo is None:
        database_now = database_now.replace(tzinfo=timezone.utc)
    microseconds = int((uptime * 1000000).to_integral_value(rounding=ROUND_FLOOR))
    instant = database_now.astimezone(timezone.utc) - timedelta(microseconds=microseconds)
    # "reboot (btime N in PATH)" becomes "reboot (the database's now() less ...; btime N in PATH)".
    btime_note = before.source[len("reboot (") : -1]
    source = "reboot (the database's now() less this host's uptime, %s s; %s)" % (uptime, btime_note)
    return Before(instant, source, before.given)


def read_uptime(path: str = PROC_UPTIME) -> Decimal:
    """Seconds since this host booted, the first field of ``/proc/uptime``."""
    try:
        with open(path, encoding="ascii", errors="replace") as proc_uptime:
            first = proc_uptime.read().split()[:1]
    except OSError as error:
        raise BeforeError(
            "before=reboot: cannot read %s (%s); give before as a time instead" % (path, error.strerror or error)
        ) from None
    if not first or not re.fullmatch(r"\d+(\.\d+)?", first[0], re.ASCII):
        raise BeforeError("before=reboot: %s does not start with a number of seconds" % path)
    return Decimal(first[0])


def read_boot_time(proc_stat_path: str = PROC_STAT) -> int:
    """This host's boot time in epoch seconds, from the ``btime`` line of ``/proc/stat``."""
    try:
        with open(proc_stat_path, encoding="ascii", errors="replace") as proc_stat:
            lines = proc_stat.read().splitlines()
    except OSError as error:
        raise BeforeError(
            "before=reboot: cannot read %s (%s); give before as a time instead"
            % (proc_stat_path, error.strerror or error)
        ) from None
    for line in lines:
        fields = line.split()
        if fields and fields[0] == "btime":
            if len(fields) == 2 and re.fullmatch(r"\d+", fields[1], re.ASCII):
                return int(fields[1])
            raise BeforeError(
                "before=reboot: the btime line of %s is not a number of seconds: %s" % (proc_stat_path, excerpt(line))
            )
    raise BeforeError("before=reboot: %s has no btime line; give before as a time instead" % proc_stat_path)


def classify_running_job(started_at: Optional[datetime], before: Optional[Before]) -> str:
    """QUALIFIES, EXEMPT or NO_STARTED_AT for a Running job; see the module docstring.

    ``started_at`` is naive UTC as read from the database; an aware value is
    converted to UTC first.
    """
    if before is None:
        return QUALIFIES
    if started_at is None:
        return NO_STARTED_AT
    if started_at.tzinfo is not None:
        started_at = started_at.astimezone(timezone.utc).replace(tzinfo=None)
    return EXEMPT if started_at >= before.to_db_timestamp() else QUALIFIES


def _unreadable(text: str, reason: str = "") -> BeforeError:
    detail = "%s; " % reason if reason else ""
    return BeforeError("cannot read before=%s: %s%s" % (excerpt(text), detail, ACCEPTED_FORMS))


def _refused(text: str, reason: str) -> BeforeError:
    """A value read but meaning no one instant: the reason, without the list of forms."""
    return BeforeError("option before=%s refused: %s" % (excerpt(text), reason))


def _from_epoch(seconds: Decimal, text: str = "reboot") -> datetime:
    microseconds = int((seconds * 1000000).to_integral_value(rounding=ROUND_FLOOR))
    try:
        return _EPOCH + timedelta(microseconds=microseconds)
    except OverflowError:
        raise _unreadable(text, "out of range") from None


def _parse_calendar_time(value: str, text: str) -> Tuple[datetime, str]:
    iso_match = _ISO_FORM.fullmatch(value)
    if iso_match:
        wall = _wall_time(text, iso_match, int(iso_match.group("year")), int(iso_match.group("month")))
        return _to_utc(wall, iso_match.group("zone"), text)
    date_match = _DATE_COMMAND_FORM.fullmatch(value)
    if date_match:
        wall = _wall_time(text, date_match, _year_of(date_match, text), _month_of(date_match, text))
        _check_weekday(date_match.group("weekday"), wall, text)
        return _to_utc(wall, date_match.group("zone"), text)
    raise _unreadable(text)


def _year_of(match: re.Match[str], text: str) -> int:
    years = [year for year in (match.group("year_before_time"), match.group("year_after_time")) if year]
    if len(years) != 1:
        raise _unreadable(text, "give the year once")
    return int(years[0])


def _month_of(match: re.Match[str], text: str) -> int:
    name = (match.group("month_name") or match.group("month_name_second")).lower()
    if name not in _MONTHS:
        raise _unreadable(text, "unknown month %s" % excerpt(name))
    return _MONTHS.index(name) + 1


def _check_weekday(weekday: Optional[str], wall: datetime, text: str) -> None:
    if weekday is None:
        return
    if weekday.lower() not in _WEEKDAYS:
        raise _unreadable(text, "unknown weekday %s" % excerpt(weekday))
    actual = _WEEKDAYS[wall.weekday()]
    if weekday.lower() != actual:
        raise _unreadable(text, "%s is a %s, not a %s" % (wall.date().isoformat(), actual.title(), weekday.title()))


def _wall_time(text: str, match: re.Match[str], year: int, month: int) -> datetime:
    """The naive date and time as written, validated."""
    groups = match.groupdict()
    # One of the two alternatives of the pattern matched, and it names the day.
    day = int(cast(str, groups.get("day") or groups.get("day_first")))
    hour = _hour_of(groups, text)
    fraction = groups["fraction"] or ""
    try:
        return datetime(
            year,
            month,
            day,
            hour,
            int(groups["minute"] or 0),
            int(groups["second"] or 0),
            int((fraction + "000000")[:6]),
        )
    except ValueError as error:
        raise _unreadable(text, str(error)) from None


def _hour_of(groups: Mapping[str, Optional[str]], text: str) -> int:
    hour = int(groups["hour"] or 0)
    meridiem = (groups.get("meridiem") or "").lower()
    if not meridiem:
        return hour
    if not 1 <= hour <= 12:
        raise _unreadable(text, "hour %d with %s" % (hour, meridiem.upper()))
    return hour % 12 + (12 if meridiem == "pm" else 0)


def _to_utc(wall: datetime, zone: Optional[str], text: str) -> Tuple[datetime, str]:
    """The instant and, when the reading needed a rule, a note saying which."""
    if zone is None:
        return _from_local_wall_time(wall, text)
    try:
        if zone[0] in "+-":
            return (wall.replace(tzinfo=_numeric_offset(zone, text)).astimezone(timezone.utc), "")
        return _from_zone_abbreviation(wall, zone, text), ""
    except OverflowError:
        raise _unreadable(text, "out of range (in UTC it is not a date Python can hold)") from None


def _numeric_offset(zone: str, text: str) -> timezone:
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:] or 0)
    if hours > 23 or minutes > 59:
        raise _unreadable(text, "bad UTC offset %s" % excerpt(zone))
    offset = timedelta(hours=hours, minutes=minutes)
    return timezone(-offset if zone[0] == "-" else offset)


def _from_zone_abbreviation(wall: datetime, zone: str, text: str) -> datetime:
    if zone.upper() in _UNIVERSAL_ZONES:
        # UTC is UTC on every host: a TZ that glibc could not read also says "UTC".
        return wall.replace(tzinfo=timezone.utc)
    local_matches = [reading for reading in _local_readings(wall, text) if reading.abbreviation.upper() == zone.upper()]
    if local_matches:
        _check_local_zone(text, [reading.utc_offset_seconds for reading in local_matches])
        if len(local_matches) > 1:
            raise _refused(text, _twice(wall, local_matches))
        return _instant(local_matches[0].epoch_seconds, wall)
    hours = KNOWN_ZONE_OFFSET_HOURS.get(zone.upper())
    if hours is None:
        raise BeforeError(
            "cannot read before=%s: unknown time zone abbreviation %s; known: %s and this host's %s; "
            "give a numeric UTC offset such as -0500 instead"
            % (excerpt(text), excerpt(zone), ", ".join(KNOWN_ZONE_OFFSET_HOURS), "/".join(sorted(set(time.tzname))))
        )
    return wall.replace(tzinfo=timezone(timedelta(hours=hours))).astimezone(timezone.utc)


def _from_local_wall_time(wall: datetime, text: str) -> Tuple[datetime, str]:
    offsets = _offsets_near(wall, text)
    _check_local_zone(text, offsets)
    readings = _local_readings(wall, text)
    if len(readings) == 1:
        return _instant(readings[0].epoch_seconds, wall), ""
    if readings:
        raise _refused(text, _twice(wall, readings))
    raise _refused(
        text,
        "local time %s never happened on this host (%s): a clock change skipped it; write the zone, as %s"
        % (_minute_text(wall), _zone_text(), " or ".join(_with_offset(wall, offset) for offset in sorted(offsets))),
    )


def _twice(wall: datetime, readings: List[_LocalReading]) -> str:
    return "local time %s happens twice on this host (%s), as %s: write the zone, as %s" % (
        _minute_text(wall),
        _zone_text(),
        " and ".join("%s (UTC%s)" % (r.abbreviation, _offset_text(r.utc_offset_seconds)) for r in readings),
        " or ".join(_with_offset(wall, r.utc_offset_seconds) for r in readings),
    )


def _with_offset(wall: datetime, offset_seconds: int) -> str:
    return "%s%s" % (wall.strftime("%Y-%m-%dT%H:%M:%S"), _offset_text(offset_seconds))


def _zone_text() -> str:
    tz = os.environ.get("TZ")
    return "TZ=%s" % cut(tz) if tz is not None else "/etc/localtime"


def _check_local_zone(text: str, offsets: List[int]) -> None:
    """Refuse a reading of this host's local time when its zone is none: see the module
    docstring."""
    problem = tz_problem()
    if problem is None:
        wrong = [offset for offset in offsets if not MIN_UTC_OFFSET_SECONDS <= offset <= MAX_UTC_OFFSET_SECONDS]
        if not wrong:
            return
        problem = "this host's local time is UTC%s (%s), an offset no zone has (they run from -12:00 to +14:00)" % (
            _offset_text(wrong[0]),
            _zone_text(),
        )
    raise _refused(text, "%s; write the zone, as 2015-11-24T10:27:17-05:00 or 2015-11-24T15:27:17Z" % problem)


def tz_problem(environ: Optional[Any] = None, zoneinfo: str = ZONEINFO) -> Optional[str]:
    """Why ``TZ`` names no zone (glibc then uses UTC without a word), or None: unset (the
    host's /etc/localtime), a file of the zone database, or a POSIX TZ string."""
    tz = (os.environ if environ is None else environ).get("TZ")
    if tz is None:
        return None
    if not tz:
        return "TZ is set but empty, which glibc reads as UTC"
    name = tz[1:] if tz.startswith(":") else tz
    candidates = (
        [name]
        if name.startswith("/")
        else [
            os.path.join(directory, name)
            for directory in ((os.environ if environ is None else environ).get("TZDIR"), zoneinfo)
            if directory
        ]
    )
    if ".." not in name.split("/") and any(os.path.isfile(path) for path in candidates):
        return None
    if not tz.startswith(":") and _POSIX_TZ.fullmatch(tz):
        return None
    return (
        "TZ=%s names no zone of this host (no such file under %s) and is no POSIX TZ string, "
        "so glibc reads local times as UTC" % (cut(tz), zoneinfo)
    )


def _local_readings(wall: datetime, text: str) -> List[_LocalReading]:
    """Every instant this host's clock showed ``wall`` (whole seconds), earliest first."""
    wall_epoch = _wall_epoch(wall)
    readings = {}
    for offset in _offsets_near(wall, text):
        candidate = wall_epoch - offset
        local = _localtime(candidate, text)
        if tuple(local[:6]) == wall.timetuple()[:6]:
            readings[candidate] = _LocalReading(candidate, local.tm_zone, local.tm_gmtoff)
    return [readings[epoch] for epoch in sorted(readings)]


def _offsets_near(wall: datetime, text: str) -> List[int]:
    wall_epoch = _wall_epoch(wall)
    probes = (wall_epoch - _PROBE_SECONDS, wall_epoch, wall_epoch + _PROBE_SECONDS)
    return sorted({_localtime(probe, text).tm_gmtoff for probe in probes})


def _localtime(epoch_seconds: int, text: str) -> time.struct_time:
    try:
        return time.localtime(epoch_seconds)
    except (OverflowError, OSError, ValueError):
        raise _unreadable(text, "out of range") from None


def _wall_epoch(wall: datetime) -> int:
    """The wall time's whole seconds counted as if it were UTC."""
    return calendar.timegm(wall.timetuple())


def _instant(epoch_seconds: int, wall: datetime) -> datetime:
    try:
        return _EPOCH + timedelta(seconds=epoch_seconds, microseconds=wall.microsecond)
    except OverflowError:
        raise BeforeError("before: %s is out of range in UTC" % _minute_text(wall)) from None


def _minute_text(wall: datetime) -> str:
    return wall.strftime("%Y-%m-%d %H:%M")


def _offset_text(offset_seconds: int) -> str:
    sign = "-" if offset_seconds < 0 else "+"
    hours, remainder = divmod(abs(offset_seconds), 3600)
    return "%s%02d:%02d" % (sign, hours, remainder // 60)
