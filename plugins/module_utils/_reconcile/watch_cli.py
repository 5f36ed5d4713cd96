# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``arvados-recovery-watch`` command: the read-only reconcile, as Prometheus gauges.

It runs what the ``arvados_reconcile_info`` module runs (Slurm's queue against the
database, nothing written), asks systemd whether the dispatcher's unit is active, and
writes the result as node_exporter textfile gauges (watch_metrics), atomically, to
``metrics_file``; the result itself, with its UUIDs, goes to stdout as JSON, or to the
file named by ``--json``. A failed read keeps the last good gauges in the file and sets
``arvados_recovery_watch_read_failed``; a file there that is not UTF-8 text is no state to
keep: it is replaced by the status gauges alone, and the message says so.

Options: the module's (the database settings and the reconcile's, from the one table in
_reconcile.run) and the watch's own (WATCH_OPTIONS), from ``--options-file`` (read and
checked as ``arvados-fail-jobs`` reads its own: options_file) and from flags, which win.
The password has no flag: ``ps`` would show it.

Exit status: 0 after a successful read, its gauges written; 1 after a failed read (the
failure gauge written where it can be: the read's reason is on stderr either way), or when
an output cannot be written (the gauges: the result is still printed; or the ``--json``
file); 2 for options that cannot be used, found before the read (a bad value, an output
path that is not a regular file, a config file or a Slurm client that cannot be used):
nothing is written then, and the watch's stale alert fires. ``metrics_file`` empty writes
no gauges; so does the default one on a host without its directory (no node_exporter
there), which stderr says.
"""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
import time
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Sequence

from .._common import command_output, options_file
from .._common.errors import RecoveryError
from .._common.options import Option, number_text, parse, seconds
from .._common.version import COLLECTION, COLLECTION_VERSION
from .._dispatcher.state import UNIT_DOWN, UNIT_UP
from .._slurm.runner import CommandNotFoundError, require_program
from . import watch_metrics
from .run import ALL_OPTIONS as RECONCILE_ALL_OPTIONS
from .run import check_params, run_reconcile

PROGRAM = "arvados-recovery-watch"
# Debian's prometheus-node-exporter reads its textfile collector from here.
DEFAULT_METRICS_FILE = "/var/lib/prometheus/node-exporter/arvados_recovery.prom"
DEFAULT_DISPATCHER_UNIT = "crunch-dispatch-slurm.service"
# systemctl answers at once; a hung D-Bus must not hold the timer's run.
SYSTEMCTL_TIMEOUT = 10.0
# Where the result says which Slurm nodes are down or drained (the reconcile's
# `slurm_nodes`, each {"name", "state", "reason"}); a result without it leaves the
# nodes' gauges without samples.
NODES_KEY = "slurm_nodes"

MAX_SYSTEMCTL_TIMEOUT = 60.0

WATCH_OPTIONS: Dict[str, Option] = {
    # Empty: no gauges written (the JSON result only).
    "metrics_file": Option(
        "path",
        DEFAULT_METRICS_FILE,
        help="the .prom file to write, in node_exporter's textfile directory; a regular file or absent; "
        "'' for no gauges",
    ),
    # Empty: not asked, the dispatcher's gauges then have no sample.
    "dispatcher_unit": Option(
        "str",
        DEFAULT_DISPATCHER_UNIT,
        help="the dispatcher's systemd unit, asked with systemctl is-active; '' not to ask",
    ),
    "systemctl_timeout": Option(
        "float",
        SYSTEMCTL_TIMEOUT,
        help="seconds systemctl is-active may take; past them the dispatcher's unit is unknown (no sample)",
        check=seconds(MAX_SYSTEMCTL_TIMEOUT, above=True),
    ),
}
ALL_OPTIONS: Dict[str, Option] = dict(RECONCILE_ALL_OPTIONS, **WATCH_OPTIONS)
# The password would show in `ps` to every user of the host.
_NO_FLAG = ("db_password",)


class Reporter(command_output.Reporter):
    """Problems on stderr (command_output.Reporter: under journald with syslog priority
    prefixes, so that ``journalctl -p err`` finds the failed reads)."""

    def __init__(self, stream: Optional[IO[str]] = None, journald: Optional[bool] = None) -> None:
        super().__init__(PROGRAM, stream, journald)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Compare Slurm's queue with the Arvados database, read-only, and write the result as "
        "Prometheus gauges for node_exporter's textfile collector; the result with its UUIDs is printed as JSON.",
    )
    parser.add_argument(
        "--options-file",
        metavar="FILE",
        help="YAML or JSON mapping of option names (the arvados_reconcile_info module's, and this command's) "
        "to values; flags win over it",
    )
    parser.add_argument(
        "--json", metavar="FILE", dest="json_file", help="write the JSON result to FILE (atomically) instead of stdout"
    )
    parser.add_argument("--version", action="version", version="%s %s (%s)" % (PROGRAM, COLLECTION_VERSION, COLLECTION))
    for name, option in ALL_OPTIONS.items():
        if name not in _NO_FLAG:
            options_file.add_option_flag(parser, name, option, help_text=flag_help(name, option))
    return parser


def flag_help(name: str, option: Option) -> str:
    """The flag's help: the option's own (or where it comes from), its choices, default and
    bound, from the table, so that --help cannot say another default than the command uses."""
    text = option.help or (
        "the arvados_reconcile_info module's option %s" % name
        if name in RECONCILE_ALL_OPTIONS
        else "the option %s" % name
    )
    notes = []
    if option.type == "list":
        notes.append("repeat the flag or give a comma-separated list")
    if option.choices:
        notes.append("%s of %s" % ("each" if option.type == "list" else "one", ", ".join(map(str, option.choices))))
    if option.default is not None and "(default" not in text:
        notes.append("default: %s" % default_text(option.default))
    maximum = getattr(option.check, "maximum", None)
    if maximum is not None:
        notes.append("at most %s" % number_text(maximum))
    # argparse formats help with %: a literal one must be doubled.
    return (text + ("; " + "; ".join(notes) if notes else "")).replace("%", "%%")


def default_text(default: Any) -> str:
    """A default as an operator writes it: 10 (not 10.0), jobs,containers, false, ''."""
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, float):
        return "%g" % default
    if isinstance(default, list):
        return ",".join(map(str, default))
    return str(default) or "''"


def given_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The options as given, not yet typed: the file's, the flags over them; a list option
    written as a comma-separated list (``--kinds jobs,containers``, as Ansible splits one)
    split into its items."""
    given = options_file.file_and_flags(args, ALL_OPTIONS, PROGRAM)
    for name, value in given.items():
        if ALL_OPTIONS[name].type == "list":
            items = [value] if isinstance(value, str) else value
            if isinstance(items, list) and all(isinstance(item, str) for item in items):
                given[name] = [part.strip() for item in items for part in item.split(",") if part.strip()]
    return given


def gather_params(args: argparse.Namespace) -> Dict[str, Any]:
    """Every option typed and checked: the file's values, the flags over them."""
    return parse(ALL_OPTIONS, given_options(args), from_text=True)


def check_outputs(params: Mapping[str, Any], json_file: Optional[str]) -> None:
    """Each output path named is a regular file or absent (watch_metrics.check_output_path),
    before anything is read or written."""
    if params["metrics_file"]:
        watch_metrics.check_output_path(params["metrics_file"], watch_metrics.METRICS_FILE)
    if json_file:
        watch_metrics.check_output_path(json_file, "--json")


def reconcile_params(params: Mapping[str, Any]) -> Dict[str, Any]:
    """The options run_reconcile takes, as given (None: its default)."""
    return {name: value for name, value in params.items() if name in RECONCILE_ALL_OPTIONS and value is not None}


def systemd_unit_active(unit: str, timeout: float) -> Optional[bool]:
    """Whether `unit` is active (`systemctl is-active`); None when that cannot be known:
    no unit named, systemd not running here (a container, a chroot), no systemctl, or no
    answer."""
    if not unit or not os.path.isdir("/run/systemd/system"):
        return None
    try:
        # Found as every program the collection runs (PATH, then the sbin directories).
        systemctl = require_program("systemctl")
    except CommandNotFoundError:
        return None
    try:
        # Not AnsibleModule.run_command (ansible-core 2.21's pylint asks for it): this is
        # the arvados-recovery-watch command's, which runs with no Ansible at all.
        completed = subprocess.run(  # pylint: disable=ansible-bad-function
            [systemctl, "is-active", "--", unit],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    word = completed.stdout.strip()
    if word in UNIT_UP:
        return True
    return False if word in UNIT_DOWN else None


def down_or_drained_nodes(result: Mapping[str, Any]) -> Optional[List[Dict[str, Any]]]:
    """The result's Slurm nodes down or drained as watch_metrics counts them ({"state":
    "down"|"drain", "reason"}: the reconcile classes them, slurm_nodes.py), or None when
    the result does not list nodes (report_nodes false, or several Slurm clusters)."""
    listed = result.get(NODES_KEY)
    if listed is None:
        return None
    return [{"state": node["state"], "reason": node.get("reason")} for node in listed]


def write_json(result: Mapping[str, Any], json_file: Optional[str], stdout: IO[str]) -> None:
    # One line: without `indent` json encodes in C (indented, the text took longer than the
    # read itself on the 1,000,000-job benchmark); and in pieces, since the text built whole
    # was half again the read's heap (bench/README.md, "The watch's JSON written in pieces").
    if json_file:
        watch_metrics.write_pieces_atomically(json_file, command_output.json_text(result), what="--json")
    else:
        command_output.write_json(result, stdout)


class GaugesNotWritten(Exception):
    """The read succeeded (`result`) but its gauges could not be written (`failure`)."""

    def __init__(self, result: Dict[str, Any], failure: Exception):
        super().__init__(str(failure))
        self.result = result
        self.failure = failure


# Set on the read's exception when the failure gauge could not be written either: the
# read's reason must still be told, and the write's.
GAUGE_FAILURE = "watch_gauge_failure"
# Set on the read's exception when the failure gauge was written alone, the previous file
# being no state the watch could keep (not UTF-8): why, for the message.
GAUGES_DROPPED = "watch_gauges_dropped"


def watch(
    params: Mapping[str, Any],
    read: Callable[..., Dict[str, Any]] = run_reconcile,
    unit_active: Callable[[str, float], Optional[bool]] = systemd_unit_active,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> Dict[str, Any]:
    """One read, its gauges written to params["metrics_file"] (none when it is empty): the
    reconcile's result; or the read's exception after the failure gauge was written (when
    that fails too, the exception carries why in its attribute GAUGE_FAILURE); or
    GaugesNotWritten with the result when only the gauges could not be written."""
    metrics_file = params["metrics_file"]
    began = monotonic()
    try:
        result = read(reconcile_params(params))
    except Exception as error:
        # Whatever stopped the read, a bug included, the alert on failing reads must fire.
        if metrics_file:
            try:
                setattr(error, GAUGES_DROPPED, watch_metrics.write_failure(metrics_file, clock()))
            except Exception as failure:  # pylint: disable=broad-except
                # A full or read-only directory must not hide why the read failed.
                setattr(error, GAUGE_FAILURE, failure)
        raise
    duration = monotonic() - began
    finished_at = clock()
    metrics = watch_metrics.reconcile_metrics(
        result,
        duration,
        finished_at,
        dispatcher_active=unit_active(params["dispatcher_unit"], params["systemctl_timeout"]),
        nodes=down_or_drained_nodes(result),
    )
    if metrics_file:
        try:
            watch_metrics.write_success(metrics_file, metrics, finished_at)
        except (OSError, RecoveryError) as failure:
            raise GaugesNotWritten(result, failure) from failure
    return result


def write_problem(path: str, failure: BaseException) -> str:
    """Why `path` could not be written, naming its directory when that is the cause."""
    if isinstance(failure, RecoveryError):
        return str(failure)
    directory = os.path.dirname(os.path.abspath(path))
    if isinstance(failure, OSError) and failure.errno == errno.ENOENT and not os.path.isdir(directory):
        return "cannot write %s: its directory %s does not exist" % (path, directory)
    reason = failure.strerror if isinstance(failure, OSError) and failure.strerror else str(failure)
    return "cannot write %s: %s (in directory %s)" % (path, reason, directory)


def _default_directory_missing(given: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether no metrics_file was given and the default's directory does not exist: a
    host without node_exporter's textfile directory, on which a hand run wants the result."""
    return given.get("metrics_file") is None and not os.path.isdir(os.path.dirname(params["metrics_file"]))


def main(
    argv: Optional[Sequence[str]] = None,
    stdout: Optional[IO[str]] = None,
    reporter: Optional[Reporter] = None,
    check: Callable[[Mapping[str, Any]], Any] = check_params,
    **engine: Callable[..., Any],
) -> int:
    """`check` is every check of the read's options that asks nothing of Slurm or the
    database (_reconcile.run.check_params), run first so that its refusals write nothing."""
    args = build_parser().parse_args(argv)
    stdout = stdout or sys.stdout
    reporter = reporter or Reporter()
    try:
        given = given_options(args)
        params = parse(ALL_OPTIONS, given, from_text=True)
        check_outputs(params, args.json_file)
        check(reconcile_params(params))
    except RecoveryError as error:
        reporter.say("error", str(error))
        return 2
    if _default_directory_missing(given, params):
        reporter.say(
            "warning",
            "no gauges written: %s does not exist (no node_exporter textfile directory on this host); "
            "--metrics-file FILE writes them, --metrics-file '' says none are wanted"
            % os.path.dirname(params["metrics_file"]),
        )
        params = dict(params, metrics_file="")
    metrics_file = params["metrics_file"]
    try:
        result = watch(params, **engine)
    except RecoveryError as error:
        message = "read failed%s: %s" % (_gauges_note(error, metrics_file), error)
        reporter.say("error", message)
        _write_failure_json(message, args.json_file, stdout, reporter)
        return 1
    except GaugesNotWritten as not_written:
        reporter.say(
            "error",
            "the read succeeded (its result is written all the same) but its gauges were not: %s"
            % write_problem(metrics_file, not_written.failure),
        )
        _write_result(not_written.result, args.json_file, stdout, reporter)
        return 1
    except Exception as bug:
        gauge_failure = getattr(bug, GAUGE_FAILURE, None)
        if gauge_failure is not None:
            reporter.say(
                "error", "the failure gauge could not be written: %s" % write_problem(metrics_file, gauge_failure)
            )
        raise
    return 0 if _write_result(result, args.json_file, stdout, reporter) else 1


def _gauges_note(error: BaseException, metrics_file: str) -> str:
    """What became of the gauges after a failed read, for its message."""
    failure = getattr(error, GAUGE_FAILURE, None)
    if failure is not None:
        return " (and the failure gauge could not be written: %s)" % write_problem(metrics_file, failure)
    if not metrics_file:
        return ""
    read_failed = watch_metrics.PREFIX + "watch_read_failed"
    dropped = getattr(error, GAUGES_DROPPED, None)
    if dropped:
        return " (%s: taken as no previous state, replaced by the status gauges alone, %s is 1)" % (
            dropped,
            read_failed,
        )
    return " (the last good gauges are kept, %s is 1)" % read_failed


def _write_result(result: Mapping[str, Any], json_file: Optional[str], stdout: IO[str], reporter: Reporter) -> bool:
    try:
        write_json(result, json_file, stdout)
    except (OSError, RecoveryError) as error:
        reporter.say("error", write_problem(json_file or "stdout", error))
        return False
    return True


def _write_failure_json(message: str, json_file: Optional[str], stdout: IO[str], reporter: Reporter) -> None:
    """What the module returns when it fails, so that one parser reads both."""
    _write_result(command_output.failure_result(message), json_file, stdout, reporter)


if __name__ == "__main__":
    raise SystemExit(main())
