"""Run inside the container of another Debian release's Slurm (bench/release_slurm.py), by
test_slurm_release_ctld.py: the cancel engine and scancel against that release's real
clients and slurmctld, with nothing but the release's Python 3 and this checkout.

    python3 tests/integration/release_engine_run.py stop      # as root: the dispatcher's stop
    python3 tests/integration/release_engine_run.py guard ID  # as another user: job ID is root's
    python3 tests/integration/release_engine_run.py exits     # scancel --ctld's answers

Each prints one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

import lab  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position
from ansible_collections.arvados_ops.recovery.plugins.module_utils._cancel.engine import (  # noqa: E402
    CancelRequest,
    cancel_jobs,
)
from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.uuids import (  # noqa: E402
    CONTAINER_INFIX,
    new_uuid,
)

SDIAG_RPC = re.compile(r"^\s+([A-Z][A-Z0-9_]+)\s*\(\s*[0-9]+\)\s+count:([0-9]+)")
RUNNING = 2
PENDING = 4


def run(argv, **extra):
    return subprocess.run(argv, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, **extra)


def rpc_counts() -> dict:
    text = run(["sdiag"]).stdout.split("by message type", 1)[-1].split("by user", 1)[0]
    return {match.group(1): int(match.group(2)) for match in map(SDIAG_RPC.match, text.splitlines()) if match}


def logging_scancel(directory: Path) -> tuple:
    log = directory / "scancel.log"
    wrapper = directory / "scancel"
    wrapper.write_text('#!/bin/sh\nprintf "%%s\\n" "$*" >> %s\nexec scancel "$@"\n' % log)
    wrapper.chmod(0o755)
    return str(wrapper), log


def logged(log: Path) -> list:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def submit(name: str, hold: bool = False) -> str:
    argv = ["sbatch", "--parsable", "--job-name=" + name, "--output=/dev/null", "--chdir=/tmp"]
    argv += ["--hold"] if hold else []
    result = run(argv + ["--wrap", "exec sleep 600"])
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(";")[0]


def queue(job_ids) -> dict:
    # Not --jobs: one id no longer known makes squeue exit 1 and list nothing.
    result = run(["squeue", "--noheader", "--all", "--format=%i %T"])
    rows = (line.split() for line in result.stdout.splitlines() if line.strip())
    return {job_id: state for job_id, state in rows if job_id in job_ids}


def wait_for(condition, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    return condition()


def stop() -> dict:
    """The dispatcher's stop of 2 running and 4 pending containers' jobs, as root, with
    max_job_ids_per_scancel 1, which a scancel that is one request does not follow."""
    names = [new_uuid("zzzzz", CONTAINER_INFIX) for _number in range(RUNNING + PENDING)]
    ids = {name: submit(name) for name in names[:RUNNING]}
    wait_for(lambda: list(queue(list(ids.values())).values()) == ["RUNNING"] * RUNNING, 30)
    ids.update({name: submit(name) for name in names[RUNNING:]})
    before = queue(list(ids.values()))
    wrapper, log = logging_scancel(Path(tempfile.mkdtemp()))
    counted = rpc_counts()
    result = cancel_jobs(CancelRequest(names=tuple(names), scancel_path=wrapper, max_job_ids_per_scancel=1))
    after = rpc_counts()
    gone = wait_for(lambda: not queue(list(ids.values())), 60)
    return {
        "ids": ids,
        "states_before": before,
        "result": result.to_dict(),
        "scancel_argvs": logged(log),
        "rpcs": {name: after.get(name, 0) - counted.get(name, 0) for name in after},
        "gone": bool(gone),
    }


def guard(job_id: str) -> dict:
    """As a user who neither owns job_id nor is root: the engine must not send --ctld."""
    listed = run(["squeue", "--noheader", "--all", "--format=%i %j"]).stdout.split("\n")
    name = next(line.split()[1] for line in listed if line.split()[:1] == [job_id])
    wrapper, log = logging_scancel(Path(tempfile.mkdtemp()))
    result = cancel_jobs(CancelRequest(names=(name,), scancel_path=wrapper, timeout=20, command_timeout=5))
    return {"result": result.to_dict(), "scancel_argvs": logged(log), "uid": os.geteuid()}


def exits() -> dict:
    """What scancel --ctld prints and returns for the cases shared/LAB.md lists."""
    running = submit(new_uuid("zzzzz", CONTAINER_INFIX))
    wait_for(lambda: queue([running]).get(running) == "RUNNING", 30)
    pending = submit(new_uuid("zzzzz", CONTAINER_INFIX), hold=True)
    finished = submit(new_uuid("zzzzz", CONTAINER_INFIX), hold=True)
    run(["scancel", finished])
    wait_for(lambda: finished not in queue([finished]), 30)
    cases = {
        "unknown id": ["scancel", "--ctld", "99999999"],
        "finished job": ["scancel", "--ctld", finished],
        "state=PENDING on a running job": ["scancel", "--ctld", "--state=PENDING", running],
        "state=PENDING on a pending job": ["scancel", "--ctld", "--state=PENDING", pending],
        "TERM to the batch step": ["scancel", "--ctld", "--batch", "--signal=TERM", running],
        "not a job id": ["scancel", "--ctld", "abc"],
    }
    answers = {}
    for case, argv in cases.items():
        answer = run(argv)
        answers[case] = {"rc": answer.returncode, "stderr": answer.stderr.strip()}
    answers["gone"] = bool(wait_for(lambda: not queue([running, pending]), 60))
    return answers


def main(argv) -> int:
    action = argv[0]
    if action == "stop":
        print(json.dumps(stop()))
    elif action == "guard":
        print(json.dumps(guard(argv[1])))
    elif action == "exits":
        print(json.dumps(exits()))
    else:
        raise SystemExit("unknown action %s" % action)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
