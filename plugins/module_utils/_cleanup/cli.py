# -*- coding: utf-8 -*-
# Copyright: Contributors to the arvados_ops.recovery collection
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``arvados-fail-jobs`` command: the module's cleanup, for boot time, without Ansible.

It needs Python 3 and psycopg 3 or psycopg2 on the host (and PyYAML to read Arvados' config
files).
The flags are the module's options (``--before reboot``, ``--retry``,
``--no-revoke-tokens``, ``--config``, ...). ``--options-file`` reads them from a YAML or
JSON mapping of option names, which is where the boot unit keeps them, so a database
password never has to be on a command line; flags win over the file. The file is read as
options only: a file that is not a mapping of known options is refused by its type or by
the count of its unknown keys, never quoted (behind a sudo rule the command could
otherwise show a file its caller cannot read). A file that holds the password must be
kept from other users as libpq wants ``~/.pgpass``: no permission for group or others
(``0600``), except that a file owned by root may be readable by its group (``0640``),
as the boot_recovery role writes it for a group and as PostgreSQL accepts its own key
file. Whatever it holds, the file must be a regular file (a symlink is followed) owned by
root or the caller and writable by neither its group nor others: its options name the
programs run (``squeue_path``) and the database written to. A flag and its ``--no-`` form
together are refused, not "the last wins".

Output: a summary a person reads at a glance on stdout (``--json``: the module's result
as JSON, a failure too, as the module reports it: ``failed``, ``changed``, ``msg``),
progress and errors on stderr with syslog priority prefixes when journald captures the
output (so ``journalctl -p err`` finds the failures). Exit status 0 on success, also when
there was nothing to do; 1 with a one-line reason otherwise, a bad option value included
(in a flag as in the file: the option layer checks both, with the modules' message); 2 for
a command line that cannot be understood (an unknown flag, a flag without its value).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Any, Callable, Dict, List, Optional, Sequence

from .._common import command_output, options_file
from .._common.errors import RecoveryError
from .._common.version import COLLECTION, COLLECTION_VERSION
from .result import CleanupResult
from .run import ALL_OPTIONS, run_fail_jobs

PROGRAM = "arvados-fail-jobs"
_FLAG_ALIASES = {"config_file": ["--config"], "uuids": ["--uuid"], "log_message": ["--message"]}
_METAVARS = {"uuids": "UUID"}
# The password flag would show in `ps` to every user of the host; the options file,
# PGPASSWORD, ~/.pgpass or Arvados' own config are the ways to give it.
_NO_FLAG = ("db_password",)
_PROGRESS_EVERY = 5.0
# --json: the module's result, indented for a person (the watch's large results go on one line).
JSON_INDENT = 2


class Reporter(command_output.Reporter):
    """Writes progress and problems to stderr (command_output.Reporter: journald keeps the
    priority prefixes)."""

    def __init__(
        self,
        stream: Optional[IO[str]] = None,
        journald: Optional[bool] = None,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(PROGRAM, stream, journald, quiet)
        self.clock = clock
        self.next_progress = clock() + _PROGRESS_EVERY

    def progress(self, result: CleanupResult) -> None:
        """Called after each batch and while locked jobs are waited for: says the run's
        notes (locked jobs) at once, the counts at most every few seconds."""
        for note in result.notes:
            self.say("info", note)
        now = self.clock()
        if now < self.next_progress:
            return
        self.next_progress = now + _PROGRESS_EVERY
        pace = "" if result.pace is None else "; " + pace_text(result.pace.report())
        self.say(
            "info",
            "%d batch(es): %d job(s) done, %d token(s) revoked so far%s"
            % (result.batches, len(result.done_jobs), len(result.revoked_tokens), pace),
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Fail (or requeue) the Arvados jobs a reboot left Running, directly in "
        "PostgreSQL, revoking their tokens and cancelling their Slurm jobs first. Live, the "
        "batches are paced by what the database says of them (see --batch-size and "
        "--batch-pause); the progress and summary lines say the pace chosen ('pace:').",
    )
    parser.add_argument(
        "--options-file",
        metavar="FILE",
        help="YAML or JSON mapping of option names (as the Ansible module takes them) to values; flags win over it",
    )
    parser.add_argument("--check", action="store_true", help="report what would be done and change nothing")
    parser.add_argument("--diff", action="store_true", help="list each job with its state before and after")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress messages")
    parser.add_argument("--version", action="version", version="%s %s (%s)" % (PROGRAM, COLLECTION_VERSION, COLLECTION))
    for name, option in ALL_OPTIONS.items():
        if name not in _NO_FLAG:
            options_file.add_option_flag(
                parser, name, option, aliases=_FLAG_ALIASES.get(name, ()), metavar=_METAVARS.get(name)
            )
    return parser


def gather_params(args: argparse.Namespace) -> Dict[str, Any]:
    return options_file.file_and_flags(args, ALL_OPTIONS, PROGRAM)


def _count(value: Any) -> int:
    return len(value) if isinstance(value, list) else int(value or 0)


def pace_text(pace: Dict[str, Any]) -> str:
    """The pace a run chose (RV(pace)) in a few words, for the progress and summary lines."""
    low_high = pace["batch_size_range"]
    sizes = "%d-%d" % tuple(low_high) if low_high and low_high[0] != low_high[1] else ""
    rate = pace["jobs_per_second"]
    commit = pace["commit_ms"]
    return "pace: %s, batches of %d%s, %s jobs/s, commits %s ms, %.1f s paused, %d back-off(s)" % (
        pace["mode"],
        pace["batch_size"],
        " (%s)" % sizes if sizes else "",
        "-" if rate is None else "%g" % rate,
        "-" if commit is None else "%g" % commit,
        pace["pause_seconds"],
        pace["backoffs"],
    )


def summary_lines(result: Dict[str, Any], check_mode: bool) -> List[str]:
    would = "would be " if check_mode else ""
    verb = "requeued" if "requeued_jobs" in result else "failed"
    counts = result["counts"]
    lines = []
    if result["threshold"]:
        lines.append("threshold: %s (%s)" % (result["threshold"], result["threshold_source"]))
    else:
        lines.append("threshold: none (every Running job qualifies)")
    lines.append("jobs %s%s: %d" % (would, verb, counts["jobs"]))
    lines.append("tokens %srevoked: %d" % (would, counts["revoked_tokens"]))
    left_alone = result.get("tokens_left_alone") or []
    if left_alone:
        lines.append(
            "tokens left valid (another job or pipeline of their user could own them): %d (%s)"
            % (len(left_alone), ", ".join("%s: %s" % (t["uuid"], t["could_belong_to"]) for t in left_alone[:5]))
        )
    if result.get("not_requeued"):
        lines.append(
            "%sfailed, not requeued (no user to run them as): %d (%s)"
            % (would, len(result["not_requeued"]), ", ".join(result["not_requeued"][:5]))
        )
    lines.append("exempt (started after the threshold): %d" % result["exempt"]["count"])
    if result["no_started_at"]:
        lines.append(
            "Running without started_at: %d (%s)"
            % (len(result["no_started_at"]), ", ".join(result["no_started_at"][:5]))
        )
    if counts["skipped_jobs"]:
        lines.append("skipped (changed under us): %d" % counts["skipped_jobs"])
    for key, text in (
        ("locked_jobs", "locked by another transaction, left for a rerun"),
        ("running_with_finished_at", "Running with finished_at set"),
    ):
        if result.get(key):
            lines.append("%s: %d (%s)" % (text, len(result[key]), ", ".join(result[key][:5])))
    held = result.get("held_by_other_users") or []
    if held:
        lines.append(
            "left Running (Slurm jobs of another user than slurm_user): %d (%s)"
            % (len({job["uuid"] for job in held}), ", ".join("%s: %s" % (j["uuid"], j["user"]) for j in held[:5]))
        )
    slurm = result.get("slurm") or {}
    if slurm.get("skipped"):
        lines.append("slurm: not asked (%s)" % slurm["skipped"])
    elif slurm:
        lines.append(
            "slurm jobs %scancelled: %d (squeue %d, scancel %d calls)"
            % (would, _count(slurm.get("cancelled")), slurm.get("squeue_calls", 0), slurm.get("scancel_calls", 0))
        )
    audit_logs = result.get("audit_logs") or {}
    if audit_logs.get("written") is False:
        # Only when off: the `dispatch` rows alone tell websocket clients less.
        lines.append("update audit rows: not written (%s)" % audit_logs.get("source"))
    if result.get("pace") and result["batches"]:
        lines.append(pace_text(result["pace"]))
    lines.append("changed: %s" % ("yes" if result["changed"] else "no"))
    return lines


def main(
    argv: Optional[Sequence[str]] = None, stdout: Optional[IO[str]] = None, reporter: Optional[Reporter] = None
) -> int:
    args = build_parser().parse_args(argv)
    stdout = stdout or sys.stdout
    reporter = reporter or Reporter(quiet=args.quiet)
    try:
        params = gather_params(args)
        result = run_fail_jobs(
            params, check_mode=args.check, diff=args.diff, keep_uuids=args.json, progress=reporter.progress
        )
    except RecoveryError as error:
        reporter.say("error", str(error))
        if args.json:
            command_output.write_json(command_output.failure_result(str(error)), stdout, JSON_INDENT)
        return 1
    for warning in result.get("warnings", []):
        reporter.say("warning", warning)
    # Work the run could not finish (jobs left Running, say), reported with what it did.
    failed = bool(result.get("failed"))
    if failed:
        reporter.say("error", str(result.get("msg") or "the run failed"))
    if args.json:
        command_output.write_json(result, stdout, JSON_INDENT)
    else:
        command_output.write_text(summary_lines(result, args.check), stdout)
        if args.diff and result.get("diff"):
            stdout.write(result["diff"]["after"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
