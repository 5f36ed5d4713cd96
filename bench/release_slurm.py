"""The lab's Slurm (munged, slurmctld, slurmd) on another Debian release's packages, in a
container, for the benchmarks and tests that need a newer Slurm than this host's (issue 23).

The container is the cluster scenario's image of that release
(`scripts/build-molecule-image.sh`, e.g. localhost/arvados-recovery-molecule-cluster:trixie
with Slurm 24.11), run without systemd: on the host's network, with this checkout mounted at
the same path, and with the host's static `catatonit` as the subreaper slurmd runs under,
as in the lab. The daemons are the lab's own (lab/slurm.py, lab/slurm_conf/, the same
settings), with their files under --lab-dir and their own ports, so they run beside the
host's lab and never touch it. Every Slurm command then runs inside the container
(`run`), with the lab's environment (SLURM_CONF, LAB_*).

    python3 -m bench.release_slurm start          # ~10 s
    python3 -m bench.release_slurm run -- scancel --version
    python3 -m bench.release_slurm run -- python3 -m bench.slurm_cancel_bench --sizes \\
        --no-ansible --stop-sizes 1000 --stop-contenders term ctld engine --stop-timeout 1200
    python3 -m bench.release_slurm stop

Inside the container `python3` is the release's (3.13 on Debian 13): the engine and the
benchmark need only the standard library.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_IMAGE = "localhost/arvados-recovery-molecule-cluster:trixie"
DEFAULT_LAB_DIR = REPO / ".build" / "release-slurm" / "trixie"
DEFAULT_SLURMCTLD_PORT = 17017
DEFAULT_SLURMD_PORT = 17018
CONTAINERS_CONF = REPO / "extensions" / "molecule" / "containers.conf"
CATATONIT = "/usr/bin/catatonit"
SLURM_SERVICES = ("munged", "slurmctld", "slurmd")


def container_name(lab_dir: Path) -> str:
    return "arvados-recovery-release-slurm-" + lab_dir.name


def lab_environment(arguments: argparse.Namespace) -> dict[str, str]:
    return {
        "LAB_DIR": str(arguments.lab_dir),
        "LAB_SLURMCTLD_PORT": str(arguments.slurmctld_port),
        "LAB_SLURMD_PORT": str(arguments.slurmd_port),
    }


def podman(argv: Sequence[str], check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    return subprocess.run(["podman", *argv], env=env, check=check, text=True, capture_output=capture)


def exec_argv(arguments: argparse.Namespace, command: Sequence[str]) -> list[str]:
    env_flags = [flag for key, value in lab_environment(arguments).items() for flag in ("-e", "%s=%s" % (key, value))]
    settings_conf = arguments.lab_dir / "slurm" / "slurm.conf"
    return [
        "exec",
        "-w",
        str(REPO),
        *env_flags,
        "-e",
        "SLURM_CONF=%s" % settings_conf,
        "-e",
        "LC_ALL=C",
        container_name(arguments.lab_dir),
        *command,
    ]


def start(arguments: argparse.Namespace) -> int:
    arguments.lab_dir.mkdir(parents=True, exist_ok=True)
    name = container_name(arguments.lab_dir)
    running = podman(["container", "exists", name], check=False).returncode == 0
    if not running:
        podman(
            [
                "run",
                "--detach",
                "--name",
                name,
                "--network=host",
                # 1,000 jobs are as many slurmstepd with their threads: the project's
                # containers.conf allows 4,096 processes of root (counted with the host's),
                # podman 2,048 in the container; slurmctld dies at pthread_create beyond.
                # runc here refuses 65,536 (and the host's own hard limit) but takes this.
                # Given --ulimit, podman forgets containers.conf's nofile: said again.
                "--ulimit",
                "nofile=1024:4096",
                "--ulimit",
                "nproc=32768:32768",
                "--pids-limit",
                "0",
                "--volume",
                "%s:%s" % (REPO, REPO),
                "--volume",
                "%s:%s" % (arguments.lab_dir, arguments.lab_dir),
                "--volume",
                "%s:%s:ro" % (CATATONIT, CATATONIT),
                "--entrypoint",
                CATATONIT,
                arguments.image,
                "--",
                "sleep",
                "infinity",
            ]
        )
    return podman(
        exec_argv(arguments, ["python3", "-m", "bench.release_slurm", "inside-start"]), check=False
    ).returncode


def inside_start() -> int:
    """In the container: the lab's Slurm services only (no PostgreSQL)."""
    from lab import labctl  # noqa: PLC0415 - only inside the container, from the checkout

    settings = labctl.lab_settings()
    labctl.start_lab(settings, services=SLURM_SERVICES)
    version = subprocess.run(["scancel", "--version"], env=settings.slurm_env(), capture_output=True, text=True)
    print("release-slurm: up in %s (%s)" % (settings.lab_dir, version.stdout.strip() or version.stderr.strip()))
    return 0


def stop(arguments: argparse.Namespace) -> int:
    name = container_name(arguments.lab_dir)
    if podman(["container", "exists", name], check=False).returncode != 0:
        return 0
    podman(exec_argv(arguments, ["python3", "lab/labctl.py", "stop"]), check=False)
    podman(["rm", "--force", "--time", "10", name], check=False)
    return 0


def run(arguments: argparse.Namespace) -> int:
    command = list(arguments.command)
    if command[:1] == ["--"]:
        command = command[1:]
    return podman(exec_argv(arguments, command), check=False).returncode


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    parser.add_argument("--lab-dir", type=Path, default=DEFAULT_LAB_DIR)
    parser.add_argument("--slurmctld-port", type=int, default=DEFAULT_SLURMCTLD_PORT)
    parser.add_argument("--slurmd-port", type=int, default=DEFAULT_SLURMD_PORT)
    commands = parser.add_subparsers(dest="action", required=True)
    commands.add_parser("start", help="start the container and its Slurm daemons")
    commands.add_parser("stop", help="cancel the jobs, stop the daemons, remove the container")
    runner = commands.add_parser("run", help="run a command in the container with the lab's environment")
    runner.add_argument("command", nargs=argparse.REMAINDER)
    commands.add_parser("inside-start", help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    arguments.lab_dir = arguments.lab_dir.resolve()
    if arguments.action == "inside-start":
        return inside_start()
    return {"start": start, "stop": stop, "run": run}[arguments.action](arguments)


if __name__ == "__main__":
    sys.exit(main())
