"""playbooks/site.yml on a real host where systemd is not running (a container of the
Molecule base image running `sleep infinity`, as in an image build): `--check` on the
fresh host writes nothing and fails nowhere, the real run installs both roles and enables
the boot unit for the next boot, then `--check` and a second run change nothing.
Two hosts in one inventory, so that each ansible-playbook run serves both at once: 3.2
(config.yml) named in the inventory, and 1.4 (the dispatcher's own file) told by the
installed packages' versions alone, the path a release named in the inventory skips.
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
from tests.unit.roles.playbook_runs import run_ansible_playbook

REPO_ROOT = helpers.REPO_ROOT
IMAGE = "localhost/arvados-recovery-molecule:bookworm"
SITE = REPO_ROOT / "playbooks" / "site.yml"
WANTS_LINK = "/etc/systemd/system/multi-user.target.wants/arvados-fail-jobs.service"
# containers.podman.podman cannot pipeline: four podman processes a module task, against one.
CONNECTION_PLUGINS = REPO_ROOT / "extensions" / "molecule" / "connection_plugins"
COLLECTIONS = [REPO_ROOT / ".build" / "collections", REPO_ROOT / ".build" / "molecule-collections"]

# The image has no Slurm clients, as an API host may not: the boot cleanup is told that
# another step cancels the jobs' Slurm jobs (without it the role refuses, see below).
NO_SLURM_HERE = {"cancel_slurm_jobs": False}
RELEASES = {
    "1.4": {
        "boot_recovery_arvados_version": "1.4",
        "boot_recovery_options": NO_SLURM_HERE,
        "dispatcher_config_arvados_version": "1.4",
        "dispatcher_config_api_host": "zzzzz.example:443",
        "dispatcher_config_auth_token": "check-mode-token",
        "dispatcher_config_sbatch_arguments": ["--partition=compute"],
        "dispatcher_config_batch_size": 100,
    },
    "3.2": {
        "boot_recovery_arvados_version": "3.2",
        # 3.x runs no crunch v1 job: the role installs nothing there unless told to.
        "boot_recovery_without_crunch_v1": True,
        "boot_recovery_options": NO_SLURM_HERE,
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


# Host -> (its variables, the release whose files it gets). A third host, 1.4 named in the
# inventory, cost a third of each run (a podman exec per task and host on 2 cores) and
# took no path the other two do not (Molecule's release_1_4 names 1.4 on a real host).
HOSTS = {
    "3.2": (RELEASES["3.2"], "3.2"),
    # No *_arvados_version: the roles read the release from dpkg (stand-in packages).
    "packages": ({k: v for k, v in RELEASES["1.4"].items() if not k.endswith("_arvados_version")}, "1.4"),
}
UNIT_BEFORE = {
    "1.4": "Before=nginx.service arvados-controller.service arvados-ws.service runit.service "
    "crunch-dispatch-slurm.service",
    "3.2": "Before=arvados-railsapi.service arvados-controller.service arvados-ws.service "
    "crunch-dispatch-slurm.service",
}


def start_container() -> str:
    """A container without systemd (PID 1 is sleep)."""
    name = "arvados-recovery-check-mode-%s" % uuid.uuid4().hex[:8]
    subprocess.run(
        ["podman", "run", "--detach", "--name", name, "--network", "none", IMAGE, "sleep", "infinity"],
        env=podman_env(),
        check=True,
        capture_output=True,
        timeout=120,
    )
    return name


def remove_containers(names):
    if names:
        subprocess.run(
            ["podman", "rm", "--force", "--time", "0", *names],
            env=podman_env(),
            capture_output=True,
            timeout=120,
            check=False,
        )


def write_inventory(path, containers: dict[str, str]):
    """`containers`: {host key of HOSTS: container name}."""
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        name: dict(
                            HOSTS[key][0],
                            # Molecule's pipelining podman connection: one podman exec a task.
                            ansible_connection="podman",
                            ansible_python_interpreter="/usr/bin/python3",
                            # site.yml becomes root; in the container the connection already is.
                            ansible_become=False,
                        )
                        for key, name in containers.items()
                    },
                    "children": {
                        "arvados_api": {"hosts": {name: {} for name in containers.values()}},
                        "slurm_controllers": {"hosts": {name: {} for name in containers.values()}},
                    },
                }
            }
        )
    )


def run_site(inventory, *options, succeeds=True):
    env = dict(
        podman_env(),
        ANSIBLE_COLLECTIONS_PATH=":".join(map(str, COLLECTIONS)),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_PIPELINING="1",
        ANSIBLE_CONNECTION_PLUGINS=str(CONNECTION_PLUGINS),
    )
    completed = run_ansible_playbook(["-i", inventory, SITE, *options], env=env, timeout=1800)
    run = Run(completed)
    ran_clean = completed.returncode == 0 and all(c["failed"] == 0 for c in run.recap.values())
    assert ran_clean == succeeds, completed.stdout[-4000:]
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


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """site.yml on the three fresh hosts: --check --diff, the real run, then both again.
    Yields ({host key: container}, {step: Run}, {host key: files before any run})."""
    if not shutil.which("podman"):
        pytest.skip("podman is not installed")
    if subprocess.run(["podman", "image", "exists", IMAGE], env=podman_env(), check=False).returncode != 0:
        pytest.skip("%s is not built (scripts/build-molecule-image.sh)" % IMAGE)
    containers: dict[str, str] = {}
    try:
        for key in HOSTS:
            containers[key] = start_container()
        install_stand_in_package(containers["packages"], "crunch-dispatch-slurm", "1.4.3-1")
        install_stand_in_package(containers["packages"], "arvados-api-server", "1.4.3-1")
        before = {key: existing(name, COMMON + WRITTEN["1.4"] + WRITTEN["3.2"]) for key, name in containers.items()}
        inventory = tmp_path_factory.mktemp("site") / "inventory.yml"
        write_inventory(inventory, containers)
        runs = {"predicted": run_site(inventory, "--check", "--diff")}
        runs["written"] = {
            key: existing(name, COMMON + WRITTEN["1.4"] + WRITTEN["3.2"]) for key, name in containers.items()
        }
        runs["done"] = run_site(inventory)
        runs["predicted again"] = run_site(inventory, "--check", "--diff")
        runs["done again"] = run_site(inventory)
        yield containers, runs, before
    finally:
        remove_containers(list(containers.values()))


@pytest.mark.parametrize("key", sorted(HOSTS))
def test_check_mode_on_a_fresh_host_predicts_changes_and_writes_nothing(site, key):
    containers, runs, before = site
    assert before[key] == []
    assert runs["predicted"].recap[containers[key]]["changed"] > 0
    assert runs["written"][key] == [], "check mode wrote files"
    assert "check-mode-token" not in runs["predicted"].stdout
    assert "check-mode-root-token" not in runs["predicted"].stdout


@pytest.mark.parametrize("key", sorted(HOSTS))
def test_the_real_run_installs_both_roles_for_the_hosts_release(site, key):
    containers, runs, _before = site
    host, release = containers[key], HOSTS[key][1]
    assert runs["done"].recap[host]["changed"] > 0
    # Only the release's own dispatcher file: 1.4.3 from dpkg gets the 1.4 one.
    assert existing(host, COMMON + WRITTEN["1.4"] + WRITTEN["3.2"]) == sorted(COMMON + WRITTEN[release])
    assert read(host, "/proc/1/comm").strip() == "sleep"
    assert podman_exec(host, ["readlink", WANTS_LINK]).stdout.strip() == "/etc/systemd/system/arvados-fail-jobs.service"
    unit = read(host, "/etc/systemd/system/arvados-fail-jobs.service")
    assert UNIT_BEFORE[release] in unit.splitlines()
    # The one-file command imports its carried package (the database is not there).
    usage = podman_exec(host, ["/usr/local/bin/arvados-fail-jobs", "--help"], check=False)
    assert usage.returncode == 0 and "--options-file" in usage.stdout, usage.stderr
    if release == "3.2":
        cluster = yaml.safe_load(read(host, "/etc/arvados/config.yml"))["Clusters"]["zzzzz"]
        assert cluster["Containers"]["SLURM"]["SbatchArgumentsList"][0] == "--job-name=%U"
    else:
        assert sorted(yaml.safe_load(read(host, WRITTEN["1.4"][0]))) == ["BatchSize", "Client", "SbatchArguments"]


@pytest.mark.parametrize("key", sorted(HOSTS))
def test_a_second_check_and_run_change_nothing(site, key):
    containers, runs, _before = site
    assert runs["predicted again"].recap[containers[key]]["changed"] == 0
    assert runs["done again"].recap[containers[key]]["changed"] == 0


def test_site_refuses_a_boot_cleanup_that_would_find_no_squeue_and_writes_nothing(tmp_path):
    """Issue 34: cancel_slurm_jobs unset (auto) on a host without Slurm's clients. The
    command would refuse at every boot; the role refuses now, --check and real alike."""
    if not shutil.which("podman"):
        pytest.skip("podman is not installed")
    if subprocess.run(["podman", "image", "exists", IMAGE], env=podman_env(), check=False).returncode != 0:
        pytest.skip("%s is not built (scripts/build-molecule-image.sh)" % IMAGE)
    host = start_container()
    try:
        inventory = tmp_path / "inventory.yml"
        write_inventory(inventory, {"3.2": host})
        # The inventory's boot_recovery_options dropped: the role's default, {}.
        written = yaml.safe_load(inventory.read_text())
        del written["all"]["hosts"][host]["boot_recovery_options"]
        inventory.write_text(yaml.safe_dump(written))
        assert podman_exec(host, ["sh", "-c", "command -v squeue"], check=False).returncode != 0

        for options in (("--check",), ()):
            run = run_site(inventory, *options, succeeds=False)
            assert run.recap[host]["failed"] == 1 and run.recap[host]["changed"] == 0
            said = " ".join(run.stdout.split())
            assert (
                "boot_recovery: boot_recovery_options.cancel_slurm_jobs is auto (unset) but squeue is not on this "
                "host (/usr/local/sbin/squeue, /usr/local/bin/squeue, /usr/sbin/squeue, /usr/bin/squeue, "
                "/sbin/squeue, /bin/squeue), so the cleanup would refuse at every boot" in said
            ), run.stdout[-4000:]
            assert existing(host, COMMON + WRITTEN["3.2"] + ["/usr/local/bin/arvados-fail-jobs"]) == []
    finally:
        remove_containers([host])
