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
``arvados_recovery_watch_read_failed``.

Options: the module's (the database settings and the reconcile's, from the one table in
reconcile_run) and the watch's own (WATCH_OPTIONS), from ``--options-file`` (read and
checked as ``arvados-fail-jobs`` reads its own: options_file) and from flags, which win.
The password has no flag: ``ps`` would show it.

Exit status: 0 after a successful read; 1 after a failed one (the failure gauge written);
2 for a command line or an options file that cannot be used (nothing written: the
watch's stale alert then fires).
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import options_file, watch_metrics
from .dispatcher_state import UNIT_DOWN, UNIT_UP
from .errors import RecoveryError, shown
from .json_stream import json_pieces
from .options import Option, parse, seconds
from .reconcile_run import ALL_OPTIONS as RECONCILE_ALL_OPTIONS
from .reconcile_run import run_reconcile
from .version import COLLECTION, COLLECTION_VERSION

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

WATCH_OPTIONS: Dict[str, Option] = {
    "metrics_file": Option(
        "path", DEFAULT_METRICS_FILE, help="the .prom file to write (node_exporter's textfile directory)"
    ),
    # Empty: not asked, the dispatcher's gauges then have no sample.
    "dispatcher_unit": Option(
        "str", DEFAULT_DISPATCHER_UNIT, help="the dispatcher's systemd unit, asked with systemctl is-active"
    ),
    "systemctl_timeout": Option("float", SYSTEMCTL_TIMEOUT, check=seconds(60.0, above=True)),
}
ALL_OPTIONS: Dict[str, Option] = dict(RECONCILE_ALL_OPTIONS, **WATCH_OPTIONS)
# The password would show in `ps` to every user of the host.
_NO_FLAG = ("db_password",)
_PRIORITY = {"info": 6, "warning": 4, "error": 3}


class Reporter:
    """Problems on stderr; under journald with syslog priority prefixes, so that
    ``journalctl -p err`` finds the failed reads."""

    def __init__(self, stream=None, journald: Optional[bool] = None):
        self.stream = stream or sys.stderr
        self.journald = bool(os.environ.get("JOURNAL_STREAM")) if journald is None else journald

    def say(self, level: str, text: str) -> None:
        prefix = "<%d>" % _PRIORITY[level] if self.journald else "%s: " % PROGRAM
        # A value in the text (a Slurm message, a path) must not forge another line.
        self.stream.write("%s%s\n" % (prefix, shown(text)))
        self.stream.flush()


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
            options_file.add_option_flag(
                parser, name, option, help_text=option.help or "the arvados_reconcile_info module's option %s" % name
            )
    return parser


def gather_params(args: argparse.Namespace) -> Dict[str, Any]:
    """Every option typed and checked: the file's values, the flags over them."""
    return parse(ALL_OPTIONS, options_file.file_and_flags(args, ALL_OPTIONS, PROGRAM), from_text=True)


def reconcile_params(params: Mapping[str, Any]) -> Dict[str, Any]:
    """The options run_reconcile takes, as given (None: its default)."""
    return {name: value for name, value in params.items() if name in RECONCILE_ALL_OPTIONS and value is not None}


def systemd_unit_active(unit: str, timeout: float) -> Optional[bool]:
    """Whether `unit` is active (`systemctl is-active`); None when that cannot be known:
    no unit named, systemd not running here (a container, a chroot), or no answer."""
    if not unit or not os.path.isdir("/run/systemd/system"):
        return None
    try:
        # Not AnsibleModule.run_command (ansible-core 2.21's pylint asks for it): this is
        # the arvados-recovery-watch command's, which runs with no Ansible at all.
        completed = subprocess.run(  # pylint: disable=ansible-bad-function
            ["systemctl", "is-active", "--", unit],
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


def write_json(result: Mapping[str, Any], json_file: Optional[str], stdout) -> None:
    # One line: without `indent` json encodes in C. On the 1M-job benchmark (105,500 orphans)
    # the indented text took 2.6-4.1 s, more than the read itself; and in pieces, since the
    # 51 MB text built whole was half again the read's heap (bench/README.md).
    pieces = itertools.chain(json_pieces(result), ("\n",))
    if json_file:
        watch_metrics.write_pieces_atomically(json_file, pieces)
    else:
        for piece in pieces:
            stdout.write(piece)


def watch(
    params: Mapping[str, Any],
    read: Callable[..., Dict[str, Any]] = run_reconcile,
    unit_active: Callable[[str, float], Optional[bool]] = systemd_unit_active,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> Dict[str, Any]:
    """One read, its gauges written to params["metrics_file"]: the reconcile's result, or
    the read's exception after the failure gauge was written."""
    began = monotonic()
    try:
        result = read(reconcile_params(params))
    except Exception:
        # Whatever stopped the read, a bug included, the alert on failing reads must fire.
        watch_metrics.write_failure(params["metrics_file"], clock())
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
    watch_metrics.write_success(params["metrics_file"], metrics, finished_at)
    return result


def main(argv=None, stdout=None, reporter=None, **engine) -> int:
    args = build_parser().parse_args(argv)
    stdout = stdout or sys.stdout
    reporter = reporter or Reporter()
    try:
        params = gather_params(args)
    except RecoveryError as error:
        reporter.say("error", str(error))
        return 2
    try:
        result = watch(params, **engine)
    except RecoveryError as error:
        message = "read failed (the last good gauges are kept, %sread_failed is 1): %s" % (
            watch_metrics.PREFIX + "watch_",
            error,
        )
        reporter.say("error", message)
        _write_failure_json(message, args.json_file, stdout, reporter)
        return 1
    except OSError as error:
        reporter.say("error", "cannot write %s: %s" % (params["metrics_file"], error.strerror or error))
        return 1
    try:
        write_json(result, args.json_file, stdout)
    except OSError as error:
        reporter.say("error", "cannot write %s: %s" % (args.json_file, error.strerror or error))
        return 1
    return 0


def _write_failure_json(message: str, json_file: Optional[str], stdout, reporter: Reporter) -> None:
    """What the module returns when it fails, so that one parser reads both."""
    try:
        write_json({"changed": False, "failed": True, "msg": message}, json_file, stdout)
    except OSError as error:
        reporter.say("error", "cannot write %s: %s" % (json_file, error.strerror or error))


if __name__ == "__main__":
    raise SystemExit(main())
