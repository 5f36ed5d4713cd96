"""scancel --ctld on a real Slurm 24.11: Debian 13's packages in a container beside the lab
(bench/release_slurm.py, the cluster scenario's trixie image), driven by
release_engine_run.py inside it (issue 23).

The lab's own Slurm is Debian 12's 22.05, whose --ctld still sends one request per job
(test_slurm_job_cancel.py checks that `ctld: auto` leaves it off there). Skipped when podman
or the image is missing (a failure under CI=true); build the image with
`scripts/build-molecule-image.sh` for trixie.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.integration.module_playbook import REPO_ROOT

IMAGE = "localhost/arvados-recovery-molecule-cluster:trixie"
RELEASE_SLURM = [sys.executable, "-m", "bench.release_slurm"]
DRIVER = "tests/integration/release_engine_run.py"


def podman_has_image() -> bool:
    if shutil.which("podman") is None:
        return False
    env = dict(os.environ, CONTAINERS_CONF=str(REPO_ROOT / "extensions" / "molecule" / "containers.conf"))
    return subprocess.run(["podman", "image", "exists", IMAGE], env=env, check=False).returncode == 0


def release_slurm(*argv: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RELEASE_SLURM, *argv], cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=timeout
    )


def in_container(*argv: str) -> dict:
    completed = release_slurm("run", "--", *argv)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def slurm_24_11() -> Iterator[None]:
    if not podman_has_image():
        if os.environ.get("CI") == "true":
            pytest.fail("podman or %s is missing" % IMAGE)
        pytest.skip("podman or %s is missing (scripts/build-molecule-image.sh builds it)" % IMAGE)
    started = release_slurm("start")
    assert started.returncode == 0, started.stdout + started.stderr
    assert "24.11" in started.stdout, started.stdout
    yield
    release_slurm("stop")


@pytest.mark.own_lab
@pytest.mark.usefixtures("slurm_24_11")
def test_the_dispatchers_stop_is_one_kill_request_per_scancel_on_24_11():
    run = in_container("python3", DRIVER, "stop")
    result = run["result"]
    assert not result["failed"] and run["gone"], result
    assert (result["ctld"], result["scancel_version"]) == (True, "24.11")
    pending = sorted(job_id for job_id, state in run["states_before"].items() if state == "PENDING")
    running = sorted(job_id for job_id, state in run["states_before"].items() if state == "RUNNING")
    # One scancel per call shape although max_job_ids_per_scancel is 1 (release_engine_run).
    version, removal, term = run["scancel_argvs"]
    assert version == ["--version"]
    assert removal[:2] == ["--ctld", "--state=PENDING"] and sorted(removal[2:]) == pending
    assert term[:3] == ["--ctld", "--signal=TERM", "--batch"] and sorted(term[3:]) == running
    # slurmctld's own count: one REQUEST_KILL_JOBS per scancel, no REQUEST_KILL_JOB at all.
    assert run["rpcs"].get("REQUEST_KILL_JOBS") == result["scancel_calls"] == 2
    assert run["rpcs"].get("REQUEST_KILL_JOB", 0) == 0
    # One squeue per round: the listings are the only job reads.
    assert run["rpcs"].get("REQUEST_JOB_INFO") == result["squeue_calls"]


@pytest.mark.own_lab
@pytest.mark.usefixtures("slurm_24_11")
def test_another_users_job_never_reaches_scancel_ctld_and_slurmctld_stays_up():
    submitted = release_slurm(
        "run",
        "--",
        "sbatch",
        "--parsable",
        "--hold",
        "--job-name=zzzzz-dz642-000000000000777",
        "--output=/dev/null",
        "--wrap",
        "exec sleep 300",
    )
    job_id = submitted.stdout.strip().split(";")[0]
    assert submitted.returncode == 0 and job_id.isdigit(), submitted.stderr
    run = in_container("runuser", "-u", "nobody", "--", "python3", DRIVER, "guard", job_id)
    result = run["result"]
    assert run["uid"] != 0 and result["ctld"] is True
    assert run["scancel_argvs"] == [["--version"], ["--state=PENDING", job_id]]
    assert [job["job_id"] for job in result["permission_denied"]] == [job_id]
    assert any("without --ctld" in message for message in result["messages"])
    listed = release_slurm("run", "--", "squeue", "--noheader", "--format=%i", timeout=60)
    assert listed.returncode == 0 and job_id in listed.stdout.split(), listed.stderr
    release_slurm("run", "--", "scancel", job_id)


@pytest.mark.own_lab
@pytest.mark.usefixtures("slurm_24_11")
def test_what_scancel_ctld_answers_on_24_11():
    answers = in_container("python3", DRIVER, "exits")
    quiet = {"rc": 0, "stderr": ""}
    assert answers["unknown id"] == quiet and answers["finished job"] == quiet
    assert answers["state=PENDING on a pending job"] == quiet and answers["TERM to the batch step"] == quiet
    started = answers["state=PENDING on a running job"]
    assert started["rc"] == 0 and "Job state RUNNING != filter state PENDING" in started["stderr"]
    assert answers["not a job id"]["rc"] == 1
    assert answers["gone"]
