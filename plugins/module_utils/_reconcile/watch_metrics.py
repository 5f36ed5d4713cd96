# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The watch's Prometheus text: a reconcile result as gauges, written atomically.

Pure Python (3.8+), standard library only. The watch command reads Slurm and the
database read-only (``_reconcile.run``) and hands the result here; node_exporter's textfile
collector serves the file. Names follow Prometheus' conventions: gauges only (a oneshot
run keeps no counter between runs), a unit suffix where there is a unit, and labels from
bounded sets: a UUID, a Slurm job id or a free-text reason never becomes a label (they
are in the command's JSON output).

A failed read leaves the last good values in place and sets
``arvados_recovery_watch_read_failed`` to 1: an alert on stale or failing reads then
fires, while the other gauges still say what was last known.
"""

from __future__ import annotations

import math
import os
import platform
import stat
import tempfile
from typing import Any, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from .._common.errors import RecoveryError, cut
from .._common.options_file import kind_of
from .._common.version import COLLECTION_VERSION
from .._slurm.nodes import NODE_REASONS, NODE_STATES, node_reason_class
from .._slurm.queue import QueueEntry
from .engine import CONTAINERS, ENTRY_KIND, JOBS

PREFIX = "arvados_recovery_"
# The kind label's values, sorted.
KIND_LABELS = tuple(sorted(ENTRY_KIND.values()))
# A Slurm job's state reduced to the bounded set an alert needs.
SLURM_STATE_CLASSES = ("pending", "running", "suspended", "ending")
# The records an orphan can be, by kind (services/api/app/models/container.rb,
# job.rb): a label value each, so their series exist, at 0, before anything is orphaned.
ORPHAN_STATES = ((ENTRY_KIND[JOBS], "Running"), (ENTRY_KIND[CONTAINERS], "Locked"), (ENTRY_KIND[CONTAINERS], "Running"))


class Metric(NamedTuple):
    name: str
    help: str
    # Each sample: its labels in order of `labels` and its value.
    labels: Tuple[str, ...]
    samples: Tuple[Tuple[Tuple[str, ...], float], ...]


def slurm_state_class(state: str) -> str:
    entry = QueueEntry("", state, "", "")
    if entry.is_leaving:
        return "ending"
    if entry.is_pending:
        return "pending"
    return "suspended" if entry.is_suspended else "running"


def _slurm_jobs_by_kind_and_class(entries: Iterable[Mapping[str, Any]]) -> Tuple[Tuple[Tuple[str, ...], float], ...]:
    counts = {(kind, state): 0 for kind in KIND_LABELS for state in SLURM_STATE_CLASSES}
    for entry in entries:
        counts[(entry["kind"], slurm_state_class(entry["state"]))] += 1
    return tuple((key, float(value)) for key, value in sorted(counts.items()))


def _orphans(result: Mapping[str, Any]) -> Tuple[Tuple[Tuple[str, ...], float], ...]:
    counts = {key: 0 for key in ORPHAN_STATES}
    for kind, listed in ((JOBS, "orphaned_jobs"), (CONTAINERS, "orphaned_containers")):
        label = ENTRY_KIND[kind]
        for entry in result.get(listed) or ():
            counts[(label, entry["state"])] = counts.get((label, entry["state"]), 0) + 1
    return tuple((key, float(value)) for key, value in sorted(counts.items()))


def _withheld(result: Mapping[str, Any]) -> Tuple[Tuple[Tuple[str, ...], float], ...]:
    withheld = result.get("orphans_withheld") or {}
    return tuple(sorted(((ENTRY_KIND[kind],), 1.0 if withheld.get(kind) else 0.0) for kind in ENTRY_KIND))


def _nodes(nodes: Optional[Iterable[Mapping[str, Any]]]) -> Tuple[Tuple[Tuple[str, ...], float], ...]:
    # Not asked (None) is no sample at all, as _flag: no series claims that no node is down.
    if nodes is None:
        return ()
    counts = {(state, reason): 0 for state in NODE_STATES for reason in NODE_REASONS}
    for node in nodes:
        counts[(node["state"], node_reason_class(node.get("reason")))] += 1
    return tuple((key, float(value)) for key, value in sorted(counts.items()))


def _flag(value: Optional[bool]) -> Tuple[Tuple[Tuple[str, ...], float], ...]:
    # Unknown (None) is no sample at all: absent() then tells it from a known 0.
    return () if value is None else (((), 1.0 if value else 0.0),)


def reconcile_metrics(
    result: Mapping[str, Any],
    duration_seconds: float,
    finished_at: float,
    dispatcher_active: Optional[bool],
    nodes: Optional[Sequence[Mapping[str, Any]]] = None,
) -> List[Metric]:
    """The gauges of one successful read.

    `result` is what arvados_reconcile_info returns; `dispatcher_active` whether the
    dispatcher's systemd unit is active (None when not known, e.g. no systemd); `nodes`
    Slurm's nodes that are down or drained: {"state": "down"|"drain", "reason": ...}, or
    None when they were not asked (the family then has no sample).
    """
    dispatcher = result.get("dispatcher") or {}
    lock_held = bool(dispatcher.get("lock_held"))
    # False on releases before 2.5.0, whose dispatchers take no Dispatch lock
    # (2.5.0:lib/controller/dblock/dblock.go:24); None when the release is unknown.
    expected = dispatcher.get("lock_expected")
    without_lock = None if dispatcher_active is None else dispatcher_active and not lock_held and expected is not False
    return [
        Metric(
            "stray_slurm_jobs",
            "Slurm jobs of the cluster that Arvados no longer wants queued, by kind and state.",
            ("kind", "state"),
            _slurm_jobs_by_kind_and_class(result.get("stray_slurm_jobs") or ()),
        ),
        Metric(
            "slurm_jobs_missing_from_database",
            "Slurm jobs named after a UUID of the cluster that the database lacks (left alone).",
            ("kind", "state"),
            _slurm_jobs_by_kind_and_class(result.get("missing_from_database") or ()),
        ),
        Metric(
            "orphans",
            "Live Arvados records without a Slurm job in two listings, by kind and record state.",
            ("kind", "state"),
            _orphans(result),
        ),
        Metric(
            "orphans_withheld",
            "1 when a kind's orphans were not judged for lack of evidence (see the JSON output).",
            ("kind",),
            _withheld(result),
        ),
        Metric(
            "jobs_awaiting_retry",
            "Crunch v1 jobs Running without a Slurm job that crunch-dispatch.rb may still retry.",
            (),
            (((), float(len(result.get("jobs_awaiting_retry") or ()))),),
        ),
        Metric(
            "jobs_retry_overdue",
            "Crunch v1 jobs awaiting crunch-dispatch.rb's retry longer than retry_overdue_after "
            "(a restarted crunch-dispatch.rb has forgotten them).",
            (),
            (((), float(sum(1 for entry in result.get("jobs_awaiting_retry") or () if entry.get("overdue")))),),
        ),
        Metric(
            "slurm_jobs_ending",
            "Stray Slurm jobs left out because Slurm is already ending them.",
            (),
            (((), float(result.get("ending_slurm_jobs") or 0)),),
        ),
        Metric(
            "dispatcher_lock_held",
            "1 when a session holds the dispatchers' Dispatch advisory lock.",
            (),
            _flag(lock_held),
        ),
        Metric(
            "dispatcher_lock_expected",
            "1 when the cluster's Arvados release (2.5 and later) has dispatchers take the Dispatch lock, "
            "0 before 2.5; no sample when the release is unknown (arvados_version unset).",
            (),
            _flag(expected),
        ),
        Metric(
            "dispatcher_unit_active",
            "1 when the dispatcher's systemd unit is active on this host.",
            (),
            _flag(dispatcher_active),
        ),
        Metric(
            "dispatcher_running_without_lock",
            "1 when the dispatcher's unit is active but no session holds the Dispatch lock it should hold "
            "(always 0 where dispatcher_lock_expected is 0).",
            (),
            _flag(without_lock),
        ),
        Metric(
            "slurm_nodes",
            "Slurm nodes down or drained, by state and whether Slurm's reason is an unexpected reboot.",
            ("state", "reason"),
            _nodes(nodes),
        ),
        Metric(
            "watch_read_duration_seconds",
            "How long the last successful read of Slurm and the database took.",
            (),
            (((), float(duration_seconds)),),
        ),
        Metric(
            "watch_last_success_timestamp_seconds",
            "When the last successful read finished, in seconds since the epoch.",
            (),
            (((), float(finished_at)),),
        ),
    ]


def build_info() -> Metric:
    """Which code wrote the file. Written with the status on every run, failed or not, so that
    after an upgrade Prometheus tells which hosts still run an older watch."""
    return Metric(
        "build_info",
        "Always 1: the arvados_ops.recovery version and the Python of the watch that wrote this file.",
        ("version", "python_version"),
        (((COLLECTION_VERSION, platform.python_version()), 1.0),),
    )


def status_metrics(failed: bool, attempted_at: float) -> List[Metric]:
    return [
        build_info(),
        Metric(
            "watch_read_failed",
            "1 when the last read failed; the other gauges then hold the last good read.",
            (),
            (((), 1.0 if failed else 0.0),),
        ),
        Metric(
            "watch_last_attempt_timestamp_seconds",
            "When the last read, failed or not, ended, in seconds since the epoch.",
            (),
            (((), float(attempted_at)),),
        ),
    ]


def _escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value == int(value) and abs(value) < 2**53 else repr(value)


def render(metrics: Iterable[Metric]) -> str:
    """The text exposition format, version 0.0.4 (what the textfile collector reads)."""
    lines = []
    for metric in metrics:
        name = PREFIX + metric.name
        lines.append("# HELP %s %s" % (name, metric.help.replace("\\", "\\\\").replace("\n", "\\n")))
        lines.append("# TYPE %s gauge" % name)
        for values, value in metric.samples:
            labels = ",".join('%s="%s"' % (label, _escape_label_value(v)) for label, v in zip(metric.labels, values))
            lines.append("%s%s %s" % (name, "{%s}" % labels if labels else "", _format_value(value)))
    return "\n".join(lines) + "\n"


def kept_blocks(previous_text: str, dropped: Sequence[str]) -> str:
    """`previous_text` without the metric families named in `dropped` (full names).

    A failed read rewrites only the watch's status: the families of the last good read are
    kept as they were, HELP and TYPE lines included.
    """
    kept: List[str] = []
    current: Optional[str] = None
    for line in previous_text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            current = line.split(" ", 3)[2]
        elif line and not line.startswith("#"):
            current = line.split("{", 1)[0].split(" ", 1)[0]
        if current not in dropped:
            kept.append(line)
    return "\n".join(kept) + ("\n" if kept else "")


class OutputPathError(RecoveryError):
    """An output path that is neither a regular file nor absent: nothing is written there."""


def check_output_path(path: str, what: str = "output") -> None:
    """Refuse `path` unless it is a regular file or absent, naming `what` (the option).

    The write replaces `path` by a rename, which replaces whatever the name is: run as root
    with ``/dev/null`` it would put a regular file where the device node was, with a symlink
    it would replace the link (not its target), with a directory it fails only once the
    read is done. So a symlink, a device, a FIFO, a socket or a directory is refused, by
    its lstat (a symlink is not followed), before anything is written."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as failure:
        raise OutputPathError("%s %s cannot be looked at: %s" % (what, cut(path), failure.strerror)) from None
    if stat.S_ISREG(status.st_mode):
        return
    if stat.S_ISLNK(status.st_mode):
        try:
            target = " to '%s'" % cut(os.readlink(path))
        except OSError:
            target = ""
        found = "a symlink%s" % target
    else:
        found = kind_of(status.st_mode)
    raise OutputPathError(
        "%s %s is %s: refused, the file is replaced whole by a rename, so it must be a regular "
        "file or absent (nothing was written)" % (what, cut(path), found)
    )


def write_atomically(path: str, text: str, mode: int = 0o644, what: str = "output") -> None:
    """Replaces `path` whole: a reader (node_exporter scraping) sees the old file or the
    new one, never a part."""
    write_pieces_atomically(path, (text,), mode, what)


def write_pieces_atomically(path: str, pieces: Iterable[str], mode: int = 0o644, what: str = "output") -> None:
    """Replaces `path` whole with the pieces' concatenation, written as they come (a big
    text need not be held whole: json_stream). The temporary file is in the same directory
    so that the rename stays on one file system; node_exporter ignores names not ending in
    ``.prom``. Whatever fails, a piece included, leaves the old file and no temporary one.

    `path` must be a regular file or absent (check_output_path, `what` naming it): looked
    at before the temporary file is made and again just before the rename, so that a link
    or a device put there meanwhile is not replaced either."""
    check_output_path(path, what)
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), suffix=".tmp", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            for piece in pieces:
                stream.write(piece)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        check_output_path(path, what)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# How the write names the path in a refusal: the watch's option.
METRICS_FILE = "option metrics_file"


def write_success(path: str, metrics: Sequence[Metric], attempted_at: float) -> None:
    write_atomically(path, render(list(metrics) + status_metrics(False, attempted_at)), what=METRICS_FILE)


def write_failure(path: str, attempted_at: float) -> Optional[str]:
    """Keeps the last good read's gauges and marks the read failed. Returns why the last
    gauges could not be kept (the file was not UTF-8 text), the failure gauge then written
    alone; None when they were kept or there were none."""
    # Looked at before it is opened for reading too: a FIFO would block the open for ever.
    check_output_path(path, METRICS_FILE)
    previous, dropped = read_previous(path)
    status = status_metrics(True, attempted_at)
    kept = kept_blocks(previous, [PREFIX + metric.name for metric in status])
    write_atomically(path, kept + render(status), what=METRICS_FILE)
    return dropped


def read_previous(path: str) -> Tuple[str, Optional[str]]:
    """(the text of the file the last read wrote, or '' with why it cannot be kept).

    A file that is not UTF-8 text (another program's, or a torn disk block) is no state
    this watch can keep: node_exporter would refuse it whole, the failure gauge with it,
    so it is treated as no previous state and replaced, and the caller says so."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        return "", None
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return "", "%s %s was not UTF-8 text (byte %d), so its last gauges could not be kept" % (
            METRICS_FILE,
            cut(path),
            error.start,
        )
