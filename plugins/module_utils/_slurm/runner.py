# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How the Slurm engine starts commands and tells time.

The engine only talks to the two small interfaces below, so that tests can
replace them with a fake clock and scripted commands and never really wait.
Pure Python (3.8+), standard library only.
"""

from __future__ import annotations

import errno
import math
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
from typing import IO, Any, Mapping, Optional, Protocol, Sequence, Tuple, Type

from .._common.errors import ConfigError, RecoveryError
from .._common.option_bounds import MAX_SLEEP_SECONDS
from .._common.options import Option, optional_match, seconds


class CommandNotFoundError(RecoveryError):
    """A Slurm client program is missing or cannot be executed."""


# Where a program named without a directory is looked for after PATH: Ansible's
# get_bin_path looks there too (ansible.module_utils.common.process), and some Slurm
# packages put their clients there. require_program is the one lookup of every module
# (the Slurm modules' too, not get_bin_path) and command of the collection, so that one
# host gives all of them the same answer, and a missing program the same message.
SBIN_DIRECTORIES = ("/sbin", "/usr/sbin", "/usr/local/sbin")
SEARCHED = "PATH, " + ", ".join(SBIN_DIRECTORIES)

# A Slurm cluster's name, as the collection passes it to --clusters (-M); scancel's and
# squeue's take a list of them, separated by commas: nothing a shell or Slurm's own list
# syntax could read otherwise.
_CLUSTER_NAME = r"[A-Za-z0-9_.-]+"
SLURM_CLUSTER_NAME = re.compile(_CLUSTER_NAME, re.ASCII)
SLURM_CLUSTER_LIST = re.compile(r"%s(?:,%s)*" % (_CLUSTER_NAME, _CLUSTER_NAME), re.ASCII)
SLURM_CLUSTER_LIST_TEXT = "Slurm cluster names ([A-Za-z0-9_.-]) separated by commas"


def cluster_list(option: str, value: Any, error: Type[ConfigError] = ConfigError) -> Optional[str]:
    """`value`, the option `option`'s list of clusters for --clusters, checked: None stays
    None; anything but such a list is `error`, with the option layer's one message. Every
    option that names the clusters of squeue or scancel is checked here: slurm_job_cancel's
    `clusters`, arvados_reconcile_info's `slurm_clusters`."""
    return optional_match(option, value, SLURM_CLUSTER_LIST, "must be " + SLURM_CLUSTER_LIST_TEXT, error)


# The bound of one Slurm client's run (finish_command), the same option in every table that
# runs one (slurm_job_cancel, slurm_node_resume, arvados_reconcile_info): one definition,
# so that their defaults and bounds cannot drift apart.
DEFAULT_COMMAND_TIMEOUT = 10.0
COMMAND_TIMEOUT_OPTION = Option("float", DEFAULT_COMMAND_TIMEOUT, check=seconds(MAX_SLEEP_SECONDS, above=True))


def find_program(name: str) -> Optional[str]:
    """The path of the executable `name` in PATH, else in SBIN_DIRECTORIES; None if none."""
    directories = os.environ.get("PATH", "").split(os.pathsep)
    directories += [directory for directory in SBIN_DIRECTORIES if directory not in directories]
    return shutil.which(name, path=os.pathsep.join(directory for directory in directories if directory))


def require_program(path: str) -> str:
    """``path`` resolved, or CommandNotFoundError: checked before any work, so a wrong path
    fails at once and not only the first time something needs cancelling. The reason is
    the one ``execve`` would give."""
    if os.sep not in path:
        resolved = find_program(path)
        if resolved is None:
            raise CommandNotFoundError("%s: not found in %s" % (path, SEARCHED))
        return resolved
    if not os.path.exists(path):
        reason = os.strerror(errno.ENOENT)
    elif os.path.isdir(path) or not os.access(path, os.X_OK):
        reason = os.strerror(errno.EACCES)
    else:
        return path
    raise CommandNotFoundError("%s: cannot be run: %s" % (path, reason))


def finish_command(handle: ProcessHandle, what: str, timeout: float) -> str:
    """The standard output of a started Slurm client, or a RecoveryError saying why not."""
    returncode = handle.wait(timeout)
    if returncode is None:
        handle.kill()
        raise RecoveryError(
            "%s did not answer within %g s (command_timeout) and was killed: is slurmctld up?" % (what, timeout)
        )
    stdout, stderr = handle.output()
    if returncode != 0:
        raise RecoveryError("%s failed (exit %d): %s" % (what, returncode, " ".join(stderr.split()) or "no message"))
    return stdout


class ProcessHandle(Protocol):
    """A started command."""

    def poll(self) -> Optional[int]:
        """The exit code if the command has ended, else None."""

    def wait(self, timeout: float) -> Optional[int]:
        """Wait at most ``timeout`` seconds; the exit code, or None if still running."""

    def kill(self) -> None:
        """Kill the command and reap it."""

    def output(self) -> Tuple[str, str]:
        """Standard output and error, once the command has ended."""


class Runner(Protocol):
    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> ProcessHandle:
        """Start ``argv`` (no shell) with exactly ``env``; CommandNotFoundError if argv[0] cannot run."""


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""

    def sleep(self, seconds: float) -> None:
        """Pause for ``seconds``."""


_FIRST_WAIT_PAUSE = 0.001
_LONGEST_WAIT_PAUSE = 0.01


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class _PopenHandle:
    # Output goes to temporary files, not pipes: an scancel given hundreds of
    # ids can print more errors than a pipe holds, and would then block
    # forever while we only poll it.
    def __init__(self, process: subprocess.Popen[bytes], stdout_file: IO[bytes], stderr_file: IO[bytes]) -> None:
        self._process = process
        self._stdout_file = stdout_file
        self._stderr_file = stderr_file

    def poll(self) -> Optional[int]:
        return self._process.poll()

    def wait(self, timeout: float) -> Optional[int]:
        returncode = self._process.poll()
        if returncode is not None:
            return returncode
        ended = _wait_for_exit(self._process.pid, timeout)
        if ended is None:
            return self._polled_wait(timeout)
        return self._process.poll() if ended else None

    def _polled_wait(self, timeout: float) -> Optional[int]:
        # Popen.wait(timeout) polls with sleeps growing to 50 ms, which can
        # double the time of a 10 ms squeue; this polls at most 10 ms apart.
        deadline = time.monotonic() + max(timeout, 0.0)
        pause = _FIRST_WAIT_PAUSE
        while True:
            returncode = self._process.poll()
            if returncode is not None:
                return returncode
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(pause, left))
            pause = min(pause * 2, _LONGEST_WAIT_PAUSE)

    def kill(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()

    def output(self) -> Tuple[str, str]:
        return _read_and_close(self._stdout_file), _read_and_close(self._stderr_file)


def _wait_for_exit(pid: int, timeout: float) -> Optional[bool]:
    """Sleep until the child ``pid`` ends (True) or ``timeout`` passes (False).

    A pidfd (Linux 5.3, Python 3.9) wakes us the moment the child ends, where polling
    wakes up to 10 ms late: a third of a 30 ms squeue. The child is not reaped yet (only
    Popen reaps it), so its pid cannot name another process meanwhile. None where
    pidfds are missing or refused: the caller then polls.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return None
    try:
        descriptor = pidfd_open(pid)
    except OSError:
        return None
    try:
        watcher = select.poll()
        watcher.register(descriptor, select.POLLIN)
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            if watcher.poll(max(math.ceil((deadline - time.monotonic()) * 1000), 0)):
                return True
            if time.monotonic() >= deadline:
                return False
    finally:
        os.close(descriptor)


def _read_and_close(file: IO[bytes]) -> str:
    if file.closed:
        return ""
    file.seek(0)
    # Job names are arbitrary bytes to Slurm; one odd name must not break the listing.
    text = file.read().decode("utf-8", errors="replace")
    file.close()
    return text


class SubprocessRunner:
    def start(self, argv: Sequence[str], env: Mapping[str, str]) -> ProcessHandle:
        stdout_file = tempfile.TemporaryFile()
        stderr_file = tempfile.TemporaryFile()
        try:
            # stdin is /dev/null rather than a closed descriptor: a closed fd 0
            # would be reused by the child's next open() and read as its input.
            # Not AnsibleModule.run_command (ansible-core 2.21's pylint asks for it): that
            # blocks until the command ends, and the engine runs several scancel at once,
            # waits on its own deadline and kills on timeout; module_utils here import
            # nothing from Ansible.
            process = subprocess.Popen(  # pylint: disable=ansible-bad-function
                list(argv),
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=stdout_file,
                stderr=stderr_file,
                close_fds=True,
            )
        except OSError as error:
            stdout_file.close()
            stderr_file.close()
            raise CommandNotFoundError("cannot run %s: %s" % (argv[0], error.strerror or error)) from error
        return _PopenHandle(process, stdout_file, stderr_file)
