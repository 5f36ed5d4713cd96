"""playbooks/site.yml on a real host where systemd is not running (a container of the
Molecule base image running `sleep infinity`, as in an image build): `--check` on the
fresh host writes nothing and fails nowhere, the real run installs both roles and enables
the boot unit for the next boot, then `--check` and a second run change nothing.
One host per Arvados release format: 1.4 (the dispatcher's own file) and 3.2 (config.yml).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid

import pytest
import yaml

from tests.integration import fail_jobs_helpers as helpers
from tests.integration.test_playbooks import Run

REPO_ROOT = helpers.REPO_ROOT
IMAGE = "localhost/arvados-recovery-molecule:bookworm"
SITE = REPO_ROOT / "playbooks" / "site.yml"
WANTS_LINK = "/etc/systemd/system/multi-user.target.wants/arvados-fail-jobs.service"
COLLECTIONS = [REPO_ROOT / ".build" / "collections", REPO_ROOT / ".build" / "molecule-collections"]

RELEASES = {
    "1.4": {
        "boot_recovery_arvados_version": "1.4",
        "dispatcher_config_arvados_version": "1.4",
        "dispatcher_config_api_host": "zzzzz.example:443",
        "dispatcher_config_auth_token": "check-mode-token",
        "dispatcher_config_sbatch_arguments": ["--partition=compute"],
        "dispatcher_config_batch_size": 100,
    },
    "3.2": {
        "boot_recovery_arvados_version": "3.2",
        "dispatcher_config_arvados_version": "3.2",
        "dispatcher_config_cluster_id": "zzzzz",
        "dispatcher_config_system_root_token": "check-mode-root-token",
        "dispatcher_config_controller_url": "https://zzzzz.example:443",
        "dispatcher_config_internal_urls": ["http://localhost:9006"],
        "dispatcher_config_postgresql_connection": {
            "host": "db",
            "user": "arvados",
            "password": "pw",
            "dbname": "arvados",
        },
        "dispatcher_config_sbatch_arguments": ["--partition=compute"],
    },
}
WRITTEN = {
    "1.4": ["/etc/arvados/crunch-dispatch-slurm/crunch-dispatch-slurm.yml"],
    "3.2": ["/etc/arvados/config.yml"],
}
COMMON = [
    "/etc/arvados/fail-jobs.yml",
    "/etc/systemd/system/arvados-fail-jobs.service",
    WANTS_LINK,
    "/etc/systemd/system/crunch-dispatch-slurm.service.d/50-arvados-recovery.conf",
]


def podman_env():
    return dict(os.environ, CONTAINERS_CONF=str(REPO_ROOT / "extensions" / "molecule" / "containers.conf"))


@pytest.fixture
def host():
    """A container without systemd (PID 1 is sleep); removed afterwards by its name."""
    if not shutil.which("podman"):
        pytest.skip("podman is not installed")
    if subprocess.run(["podman", "image", "exists", IMAGE], env=podman_env(), check=False).returncode != 0:
        pytest.skip("%s is not built (scripts/build-molecule-image.sh)" % IMAGE)
    name = "arvados-recovery-check-mode-%s" % uuid.uuid4().hex[:8]
    subprocess.run(
        ["podman", "run", "--detach", "--name", name, "--network", "none", IMAGE, "sleep", "infinity"],
        env=podman_env(),
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        yield name
    finally:
        subprocess.run(
            ["podman", "rm", "--force", "--time", "0", name],
            env=podman_env(),
            capture_output=True,
            timeout=120,
            check=False,
        )


def run_site(host, variables, tmp_path, *options):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        host: {
                            "ansible_connection": "containers.podman.podman",
                            "ansible_python_interpreter": "/usr/bin/python3",
                            # site.yml becomes root; in the container the connection already is.
                            "ansible_become": False,
                        }
                    },
                    "children": {"arvados_api": {"hosts": {host: {}}}, "slurm_controllers": {"hosts": {host: {}}}},
                    "vars": variables,
                }
            }
        )
    )
    env = dict(
        podman_env(),
        ANSIBLE_COLLECTIONS_PATH=":".join(map(str, COLLECTIONS)),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PIPELINING="1",
    )
    completed = subprocess.run(
        [str(REPO_ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory), str(SITE)] + list(options),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    run = Run(completed)
    assert completed.returncode == 0 and run.recap[host]["failed"] == 0, completed.stdout[-4000:]
    return run


def podman_exec(host, argv, check=True, timeout=60):
    return subprocess.run(
        ["podman", "exec", host] + list(argv),
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


def existing(host, paths):
    # ls exits 2 when some are missing: the listing says which exist.
    return sorted(podman_exec(host, ["ls", "-d"] + paths, check=False).stdout.split())


def read(host, path):
    return podman_exec(host, ["cat", path]).stdout


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_site_in_check_mode_then_for_real_without_systemd(host, release, tmp_path):
    paths = COMMON + WRITTEN[release]
    assert existing(host, paths) == []

    predicted = run_site(host, RELEASES[release], tmp_path, "--check", "--diff")
    assert predicted.changed > 0
    assert existing(host, paths) == [], "check mode wrote files"
    assert "check-mode-token" not in predicted.stdout and "check-mode-root-token" not in predicted.stdout

    done = run_site(host, RELEASES[release], tmp_path)
    assert done.changed > 0
    assert existing(host, paths) == sorted(paths)
    assert read(host, "/proc/1/comm").strip() == "sleep"
    link = podman_exec(host, ["readlink", WANTS_LINK]).stdout.strip()
    assert link == "/etc/systemd/system/arvados-fail-jobs.service"
    unit = read(host, "/etc/systemd/system/arvados-fail-jobs.service")
    before = {
        "1.4": "Before=nginx.service arvados-controller.service arvados-ws.service runit.service "
        "crunch-dispatch-slurm.service",
        "3.2": "Before=arvados-railsapi.service arvados-controller.service arvados-ws.service "
        "crunch-dispatch-slurm.service",
    }[release]
    assert before in unit.splitlines()
    # The one-file command imports its carried package (the database is not there).
    usage = podman_exec(host, ["/usr/local/bin/arvados-fail-jobs", "--help"], check=False)
    assert usage.returncode == 0 and "--options-file" in usage.stdout, usage.stderr
    if release == "3.2":
        cluster = yaml.safe_load(read(host, "/etc/arvados/config.yml"))["Clusters"]["zzzzz"]
        assert cluster["Containers"]["SLURM"]["SbatchArgumentsList"][0] == "--job-name=%U"
    else:
        legacy = yaml.safe_load(read(host, WRITTEN["1.4"][0]))
        assert sorted(legacy) == ["BatchSize", "Client", "SbatchArguments"]

    assert run_site(host, RELEASES[release], tmp_path, "--check", "--diff").changed == 0
    assert run_site(host, RELEASES[release], tmp_path).changed == 0


def install_stand_in_package(host, package, version):
    """An empty Debian package of this name and version, installed with dpkg: what the
    roles read to tell the release when no *_arvados_version is set."""
    script = (
        'set -e; root=$(mktemp -d); mkdir "$root/DEBIAN"; '
        "printf 'Package: %s\\nVersion: %s\\nArchitecture: all\\nMaintainer: tests <t@example>\\n"
        'Description: stand-in for the Arvados package\\n\' > "$root/DEBIAN/control"; '
        'dpkg-deb --build "$root" /tmp/stand-in.deb >/dev/null; dpkg --install /tmp/stand-in.deb >/dev/null'
    ) % (package, version)
    podman_exec(host, ["sh", "-c", script], timeout=120)


def test_the_release_is_read_from_the_installed_packages(host, tmp_path):
    install_stand_in_package(host, "crunch-dispatch-slurm", "1.4.3-1")
    install_stand_in_package(host, "arvados-api-server", "1.4.3-1")
    variables = {name: value for name, value in RELEASES["1.4"].items() if not name.endswith("_arvados_version")}

    predicted = run_site(host, variables, tmp_path, "--check")
    assert predicted.changed > 0
    assert existing(host, COMMON + WRITTEN["1.4"]) == []
    done = run_site(host, variables, tmp_path)
    assert done.changed > 0

    # 1.4.3 from dpkg: the dispatcher's own file with the keys 1.4 reads, and the 1.x units held back.
    assert existing(host, WRITTEN["1.4"] + WRITTEN["3.2"]) == WRITTEN["1.4"]
    assert sorted(yaml.safe_load(read(host, WRITTEN["1.4"][0]))) == ["BatchSize", "Client", "SbatchArguments"]
    unit = read(host, "/etc/systemd/system/arvados-fail-jobs.service")
    assert (
        "Before=nginx.service arvados-controller.service arvados-ws.service runit.service "
        "crunch-dispatch-slurm.service" in unit.splitlines()
    )
    assert run_site(host, variables, tmp_path).changed == 0
