"""Slurm jobs for a loaded cluster's Running jobs (named after them, as the dispatcher names them)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common import uuids
from lab.settings import LabError


def lab_conninfo() -> str:
    """Where to load: libpq's PG* variables if they name a server, else the local lab.

    The lab (lab/labctl.py) is reached as Arvados reaches it: the ``arvados``
    role over TCP, database ``arvados_production``.
    """
    if os.environ.get("PGHOST") or os.environ.get("PGSERVICE"):
        return ""
    import psycopg

    from lab import labctl

    return psycopg.conninfo.make_conninfo(**labctl.lab_settings().connection())


def slurm_environment() -> dict[str, str]:
    """The environment for Slurm's clients: ``LC_ALL=C``, the lab's slurm.conf by default."""
    env = dict(os.environ, LC_ALL="C")
    if "SLURM_CONF" not in env:
        from lab import labctl

        lab_conf = labctl.lab_settings().slurm_conf
        if lab_conf.exists():
            env["SLURM_CONF"] = str(lab_conf)
    return env


def sbatch_command(job_uuid: str, sleep_seconds: int, sbatch: str = "sbatch") -> list[str]:
    if not uuids.is_uuid_of("job", job_uuid):
        raise ValueError("not a job uuid: %r" % (job_uuid,))
    return [
        sbatch,
        "--parsable",
        "--job-name=%s" % job_uuid,
        "--output=/dev/null",
        "--chdir=/tmp",
        "--wrap",
        "exec sleep %d" % int(sleep_seconds),
    ]


def submit_slurm_jobs(
    job_uuids: Sequence[str],
    limit: int,
    sleep_seconds: int = 3600,
    sbatch: str = "sbatch",
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
) -> dict[str, str]:
    """One ``sbatch`` per job, for at most ``limit`` jobs; returns uuid -> Slurm job id."""
    env = slurm_environment()
    submitted = {}
    for job_uuid in list(job_uuids)[: max(0, limit)]:
        result = run(
            sbatch_command(job_uuid, sleep_seconds, sbatch),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0:
            raise LabError("sbatch for %s failed (exit %d): %s" % (job_uuid, result.returncode, result.stderr.strip()))
        submitted[job_uuid] = result.stdout.strip().split(";")[0]
    return submitted
