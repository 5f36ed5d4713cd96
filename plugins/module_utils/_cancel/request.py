# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What to cancel and how: the options of the Slurm cancel engine, checked.

A ``CancelRequest`` cannot exist with a bad value in it, so the module, the
``arvados_fail_jobs`` module and the boot-time command all get the same
checks, and no command runs before they pass. Pure Python (3.8+).
"""

from __future__ import annotations

import re
import signal
import threading
import unicodedata
from dataclasses import MISSING, dataclass, fields
from types import FrameType
from typing import Any, Dict, Iterable, Optional, Pattern, Tuple

from .._common.errors import ConfigError
from .._common.option_bounds import (
    MAX_CONCURRENT_SCANCEL,
    MAX_JOB_IDS_PER_SCANCEL,
    MAX_SCANCEL_PER_SECOND,
    MAX_SLEEP_SECONDS,
)
from .._common.options import Option, Range, count, seconds
from .._common.uuids import CONTAINER_UUID_RE
from .._slurm.release import CTLD_AUTO, CTLD_CHOICES
from .._slurm.runner import COMMAND_TIMEOUT_OPTION, DEFAULT_COMMAND_TIMEOUT, cluster_list

# Any Arvados object UUID; callers narrow it to one kind, e.g.
# ^[0-9a-z]{5}-8i9sb-[0-9a-z]{15}$ for crunch v1 jobs or -dz642- for containers.
DEFAULT_NAME_PATTERN = r"^[0-9a-z]{5}-[0-9a-z]{5}-[0-9a-z]{15}$"

_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?", re.ASCII)
# The signal names scancel knows, with or without SIG (sig_name2num in Slurm's
# src/common/proc_args.c; XCPU is there from 22.05, checked on the lab's 22.05, which
# refuses any other name, RTMIN+3 too, with "Unknown job signal"). Numbers: Linux's 1 to 64
# (scancel refuses 0 and passes any other number on to slurmd).
SLURM_SIGNAL_NAMES = (
    "HUP", "INT", "QUIT", "ABRT", "KILL", "ALRM", "TERM", "USR1",
    "USR2", "URG", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "XCPU",
)  # fmt: skip
MAX_SIGNAL_NUMBER = 64
_RELEASE = re.compile(r"(?:[0-9]+\.[0-9]+)?", re.ASCII)

# How a queued job is stopped (option ``stop``):
#   cancel     scancel, as for any Slurm job;
#   terminate  as crunch-dispatch-slurm stops a container (services/crunch-dispatch-slurm/
#              slurm.go, Cancel, the same at 1.4.3, 2.7.4, 3.1.2 and 3.2.1): a pending job is
#              removed, a running one gets TERM on its batch step only, so that crunch-run
#              stops its container and records the outcome itself; what it gets if it is
#              still queued after that TERM is ``after_term``'s choice;
#   auto       terminate for jobs named after a container (-dz642-), cancel for the rest:
#              crunch v1 jobs (-8i9sb-) run under salloc, whose batch step is not the work.
STOP_AUTO = "auto"
STOP_TERMINATE = "terminate"
STOP_CANCEL = "cancel"
STOP_CHOICES = (STOP_AUTO, STOP_TERMINATE, STOP_CANCEL)

# What a job that ``stop`` terminates gets while it stays queued after its TERM
# (option ``after_term``):
#   term_again  TERM again every ``term_interval`` seconds until it leaves or the call's
#               deadline, never a plain cancel, as crunch-dispatch-slurm does (slurm.go,
#               Cancel, 1.4.3 to 3.2.1: "would kill crunch-run without stopping the
#               container"); jobs still there are reported in ``left_running``;
#   cancel      a plain scancel once ``terminate_grace`` has passed since Slurm took the
#               TERM: crunch-run is killed, and a Docker container, no process of the job,
#               outlives it with its node's resources and its output and logs unsaved.
AFTER_TERM_AGAIN = "term_again"
AFTER_TERM_CANCEL = "cancel"
AFTER_TERM_CHOICES = (AFTER_TERM_AGAIN, AFTER_TERM_CANCEL)

# The dispatcher's own repeat: after each Cancel its tracker waits for the next squeue poll
# (squeue.go, HasUUID) and one second more before the next Cancel, so a job that stays gets
# TERM once per poll, PollInterval 10 s by default (crunch-dispatch-slurm.go PollPeriod at
# 1.4.3; Containers.CloudVMs.PollInterval in lib/config/config.default.yml at 2.7.4 and 3.2.1).
DEFAULT_TERM_INTERVAL = 10.0
# The pace of the scancels, also the cleanup's (its options slurm_max_scancel_per_second and
# slurm_max_concurrent_scancel): what slurmctld takes beside its other clients.
DEFAULT_MAX_SCANCEL_PER_SECOND = 10.0
DEFAULT_MAX_CONCURRENT_SCANCEL = 3
# The deadline of a call without ``timeout``; a call that may send TERM first adds
# ``terminate_grace`` to it, the time crunch-run is given to stop its container.
BASE_TIMEOUT = 120.0


class CancelRequestError(ConfigError):
    """An option of a cancel request is invalid; the message names the bad value."""


@dataclass(frozen=True)
class CancelRequest:
    """Make the Slurm jobs with these names or ids absent.

    Durations are seconds. ``timeout`` bounds the whole call. A squeue is
    killed after ``command_timeout`` (set it to Slurm's MessageTimeout), an
    scancel after ``command_timeout`` per ten of its ids (scancel sends one
    request per id, ten at once; one ``command_timeout`` for an scancel
    --ctld that is one request), but not past the deadline unless it started
    less than ``command_timeout`` before it; so a call never lasts longer
    than ``timeout`` plus ``command_timeout``. Without
    ``timeout`` the deadline is ``BASE_TIMEOUT``, plus ``terminate_grace``
    when a job may be sent TERM first.

    ``terminate_grace`` defaults to 120 s: Arvados' cloud dispatcher gives
    crunch-run that long after its first TERM before it gives up on it
    (Containers.CloudVMs.TimeoutTERM, 2m in lib/config/config.default.yml at
    2.7.4, 3.1.2 and 3.2.1; defaultTimeoutTERM in lib/dispatchcloud/worker/
    pool.go at 1.4.3). It is the wait before an outright cancel only with
    ``after_term`` cancel; by default (``term_again``) a job that stays gets
    TERM again every ``term_interval`` until the deadline, as crunch-dispatch-
    slurm repeats it while the job stays queued, and is reported, not killed.

    ``ctld`` (_slurm.release): whether each scancel carries ``--ctld``, which from Slurm
    24.05 on makes it one request to slurmctld for all its ids; ``auto`` asks
    ``scancel --version`` once per run.
    """

    names: Tuple[str, ...] = ()
    job_ids: Tuple[str, ...] = ()
    user: Optional[str] = None
    wait: bool = True
    grace_period: float = 0.0
    retry_delay: float = 2.0
    error_retry_delay: float = 10.0
    timeout: Optional[float] = None
    max_scancel_per_second: float = DEFAULT_MAX_SCANCEL_PER_SECOND
    max_concurrent_scancel: int = DEFAULT_MAX_CONCURRENT_SCANCEL
    max_job_ids_per_scancel: int = 500
    log_interval: float = 30.0
    signal: Optional[str] = None
    batch: bool = False
    stop: str = STOP_AUTO
    after_term: str = AFTER_TERM_AGAIN
    term_interval: float = DEFAULT_TERM_INTERVAL
    terminate_grace: float = 120.0
    clusters: Optional[str] = None
    ctld: str = CTLD_AUTO
    name_pattern: str = DEFAULT_NAME_PATTERN
    squeue_path: str = "squeue"
    scancel_path: str = "scancel"
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    check_mode: bool = False
    # The release an earlier run of the same caller found ("24.11"; "" when scancel named
    # none), so that a caller cancelling in batches asks scancel --version once; None: ask.
    scancel_release: Optional[str] = None

    def __post_init__(self) -> None:
        pattern = _compiled_pattern(self.name_pattern)
        self._set("names", _unique(_checked_name(name) for name in _sequence("names", self.names)))
        self._set("job_ids", _unique(_checked_job_id(job_id) for job_id in _sequence("job_ids", self.job_ids)))
        self._set("user", _optional_word("user", self.user))
        self._set("signal", _checked_signal(self.signal))
        self._set("clusters", cluster_list("clusters", self.clusters, CancelRequestError))
        if self.scancel_release is not None and not _RELEASE.fullmatch(str(self.scancel_release)):
            raise CancelRequestError("scancel_release %r is not MAJOR.MINOR or empty" % (self.scancel_release,))
        if not isinstance(self.check_mode, bool):
            raise CancelRequestError("check_mode must be true or false, got %r" % (self.check_mode,))
        self._check_options(_TABLE_CHECKED)
        if self.batch and not self.signal:
            raise CancelRequestError("batch needs signal: scancel --batch alone would kill only the batch shell")
        self._refuse_stop_with_signal()
        if self.timeout is None:
            self._set("timeout", self.call_timeout)
            self._check_options(("timeout",))
        _match_names(pattern, self.names, self.call_timeout)
        # Job ids name jobs of unknown kind: they extend the default deadline, but only
        # a job sure to get TERM makes a short timeout an error, and only where an
        # outright cancel must fit in it.
        surely_terminates = self.stop == STOP_TERMINATE or any(map(self.terminates, self.names))
        if self.wait and surely_terminates and self.cancels_after_term and self.call_timeout <= self.terminate_grace:
            raise CancelRequestError(
                "timeout %g ends the call before terminate_grace %g is over, so a job that outlives its TERM "
                "could never be cancelled (after_term=cancel): raise timeout, lower terminate_grace or set "
                "after_term to term_again" % (self.call_timeout, self.terminate_grace)
            )
        for name in ("squeue_path", "scancel_path"):
            _require_path(name, getattr(self, name))

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)

    def _check_options(self, names: Iterable[str]) -> None:
        """The fields' values checked as the options of the same names are (CANCEL_OPTIONS)."""
        for name in names:
            try:
                self._set(name, CANCEL_OPTIONS[name].parse_value(name, getattr(self, name)))
            except ConfigError as error:
                raise CancelRequestError(str(error)) from None

    def _refuse_stop_with_signal(self) -> None:
        for option, default in (("stop", STOP_AUTO), ("after_term", AFTER_TERM_AGAIN)):
            if self.signal and getattr(self, option) != default:
                raise CancelRequestError(
                    "signal %s only signals and stops nothing; it cannot be combined with %s=%s"
                    % (self.signal, option, getattr(self, option))
                )

    def terminates(self, name: str) -> bool:
        """Whether the job of this name gets TERM on its batch step before any outright cancel."""
        if self.signal or self.stop == STOP_CANCEL:
            return False
        return self.stop == STOP_TERMINATE or bool(CONTAINER_UUID_RE.match(name))

    @property
    def cancels_after_term(self) -> bool:
        """Whether a job still queued ``terminate_grace`` after its TERM is cancelled outright."""
        return self.after_term == AFTER_TERM_CANCEL

    @property
    def call_timeout(self) -> float:
        """The bound of the whole call: ``timeout``, which __post_init__ sets when none is
        given to BASE_TIMEOUT, plus ``terminate_grace`` when a job may get TERM first."""
        if self.timeout is not None:
            return self.timeout
        return BASE_TIMEOUT + (self.terminate_grace if self.may_terminate else 0.0)

    @property
    def may_terminate(self) -> bool:
        """Whether some job may get TERM first: job ids may name containers too."""
        if self.signal or self.stop == STOP_CANCEL:
            return False
        return self.stop == STOP_TERMINATE or bool(self.job_ids) or any(map(self.terminates, self.names))


def request_defaults() -> Dict[str, Any]:
    """The default of every option, for the module's argument spec: one place for them."""
    return {field.name: field.default for field in fields(CancelRequest) if field.default is not MISSING}


_DEFAULTS = request_defaults()


def _option(option_type: str, request_field: Optional[str] = None, **extra: Any) -> Option:
    """An option whose default is the CancelRequest field's (None without a field)."""
    return Option(option_type, _DEFAULTS.get(request_field) if request_field else None, **extra)


# The options of slurm_job_cancel, one a CancelRequest field of the same name (but name and
# job_id, which fill names and job_ids): the module's argument spec is made from it, and a
# request checks its fields' values with it, whoever makes the request.
CANCEL_OPTIONS: Dict[str, Option] = {
    "name": _option("list", elements="str", aliases=["uuid"]),
    "job_id": _option("list", elements="str"),
    "user": _option("str"),
    "wait": _option("bool", "wait"),
    "grace_period": _option("float", "grace_period", check=seconds(MAX_SLEEP_SECONDS)),
    "retry_delay": _option("float", "retry_delay", check=seconds(MAX_SLEEP_SECONDS)),
    "error_retry_delay": _option("float", "error_retry_delay", check=seconds(MAX_SLEEP_SECONDS)),
    # None: the request works the deadline out from stop and terminate_grace.
    "timeout": _option("float", check=seconds(MAX_SLEEP_SECONDS, above=True)),
    "command_timeout": COMMAND_TIMEOUT_OPTION,
    "max_scancel_per_second": _option(
        "float", "max_scancel_per_second", check=Range(MAX_SCANCEL_PER_SECOND, 0, above=True)
    ),
    "max_concurrent_scancel": _option("int", "max_concurrent_scancel", check=count(MAX_CONCURRENT_SCANCEL)),
    "max_job_ids_per_scancel": _option("int", "max_job_ids_per_scancel", check=count(MAX_JOB_IDS_PER_SCANCEL)),
    "log_interval": _option("float", "log_interval", check=seconds(MAX_SLEEP_SECONDS)),
    "stop": _option("str", "stop", choices=STOP_CHOICES),
    "after_term": _option("str", "after_term", choices=AFTER_TERM_CHOICES),
    # Faster than the dispatcher's one-second pause between Cancels only loads slurmctld:
    # crunch-run needs time to stop its container whatever the number of TERMs. Above an
    # hour is no repeat within any sensible deadline.
    "term_interval": _option("float", "term_interval", check=seconds(3600.0, minimum=1.0)),
    "terminate_grace": _option("float", "terminate_grace", check=seconds(MAX_SLEEP_SECONDS)),
    "signal": _option("str"),
    "batch": _option("bool", "batch"),
    "clusters": _option("str"),
    "ctld": _option("str", "ctld", choices=CTLD_CHOICES),
    "name_pattern": _option("str", "name_pattern"),
    # None: the client found on PATH (find_program).
    "squeue_path": _option("path"),
    "scancel_path": _option("path"),
}
# The fields the table checks: the bools, the choices and the numbers; the others have
# checks of their own below, which say what a job name, an id or a signal must be.
_TABLE_CHECKED = tuple(
    name for name, option in CANCEL_OPTIONS.items() if option.check or option.choices or option.type == "bool"
)


def _compiled_pattern(pattern: Any) -> Pattern[str]:
    if not isinstance(pattern, str) or not pattern:
        raise CancelRequestError("name_pattern must be a non-empty regular expression, got %r" % (pattern,))
    try:
        return re.compile(pattern)
    except re.error as error:
        raise CancelRequestError("name_pattern %r is not a valid regular expression: %s" % (pattern, error)) from error


def _sequence(option: str, values: Any) -> Iterable[Any]:
    if values is None:
        return ()
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise CancelRequestError("%s must be a list of strings, got %r" % (option, values))
    return values


def _unique(values: Iterable[str]) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(values))


# In ASCII the characters below are exactly the comma, the controls and the whitespace:
# one regular expression checks a name that a per-character category lookup took 20 us for.
_FORBIDDEN_ASCII = re.compile(r"[\x00-\x20,\x7f]")


def _has_forbidden_character(text: str) -> bool:
    # Commas would split squeue's --name list; whitespace and control
    # characters have no place in a job name and hide in logs.
    if text.isascii():
        return _FORBIDDEN_ASCII.search(text) is not None
    return any(char == "," or char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp") for char in text)


def _checked_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise CancelRequestError("job name %r is not a non-empty string" % (name,))
    if _has_forbidden_character(name):
        raise CancelRequestError("job name %r contains a comma, whitespace or a control character" % (name,))
    return name


class _MatchTimedOut(Exception):
    pass


def _raise_timed_out(_signum: int, _frame: Optional[FrameType]) -> None:
    raise _MatchTimedOut()


def _match_names(pattern: Pattern[str], names: Tuple[str, ...], seconds_allowed: float) -> None:
    """Refuse the first name that does not fully match `pattern`, and a pattern that takes
    longer than the call's timeout to say (issue 34: ``(a+)+$`` backtracks for 2^n steps on
    n letters and spun past the module's timeout).

    Why a bound in time and not a check of the pattern's form: which patterns backtrack
    without end is not decidable from their form in general (``(a|aa)+$`` and ``(a|a)*$``
    have no nested quantifier), and a limit on the names' length would not do either, as
    UUIDs (27 characters) are long enough for 2^27 steps. Python's matcher checks for
    signals as it runs, so a timer (SIGALRM) stops it; without a main thread to receive
    it (a library caller's thread) the match is not bounded, as before.
    """
    if not names:
        return
    bounded = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if bounded:
        previous_handler = signal.signal(signal.SIGALRM, _raise_timed_out)
        previous_timer = signal.setitimer(signal.ITIMER_REAL, seconds_allowed)
    name = ""
    try:
        for name in names:
            if not pattern.fullmatch(name):
                raise CancelRequestError("job name %r does not match name_pattern %r" % (name, pattern.pattern))
    except _MatchTimedOut:
        raise CancelRequestError(
            "name_pattern %r took longer than timeout %g s to match the job name %r, so nothing was asked of "
            "Slurm: the pattern backtracks without end (nested repeats such as (a+)+ do); write it without them"
            % (pattern.pattern, seconds_allowed, name)
        ) from None
    finally:
        if bounded:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_handler)
            if previous_timer[0] > 0:
                signal.setitimer(signal.ITIMER_REAL, *previous_timer)


def _checked_job_id(job_id: Any) -> str:
    if isinstance(job_id, int) and not isinstance(job_id, bool):
        job_id = str(job_id)
    if not isinstance(job_id, str) or not _JOB_ID.fullmatch(job_id):
        raise CancelRequestError("job id %r is not digits with an optional _N array index" % (job_id,))
    return job_id


def _optional_word(option: str, value: Any) -> Optional[str]:
    if value is None:
        return None
    _require_word(option, value)
    return value


def _require_word(option: str, value: Any) -> None:
    if not isinstance(value, str) or not value or _has_forbidden_character(value):
        raise CancelRequestError(
            "%s %r must be a non-empty string without commas, whitespace or control characters" % (option, value)
        )


def _require_path(option: str, value: Any) -> None:
    if not isinstance(value, str) or not value or any(unicodedata.category(char) == "Cc" for char in value):
        raise CancelRequestError("%s %r must be a non-empty path without control characters" % (option, value))


def _checked_signal(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and 1 <= int(value) <= MAX_SIGNAL_NUMBER:
        return value
    name = value[3:] if isinstance(value, str) and value.startswith("SIG") else value
    if name in SLURM_SIGNAL_NAMES:
        return value
    raise CancelRequestError(
        "signal %r is not a signal Slurm knows: give one of %s (with or without SIG), or a number from 1 to %d"
        % (value, ", ".join(SLURM_SIGNAL_NAMES), MAX_SIGNAL_NUMBER)
    )
