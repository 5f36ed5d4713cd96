"""boot_recovery installs the psycopg the host's release packages: psycopg 3 (python3-psycopg)
where the release has it, else psycopg2 (python3-psycopg2). The role's own expression is
evaluated by ansible-playbook for each release, and once with this host's real facts."""

from __future__ import annotations

import json

import yaml

from tests.unit.roles.playbook_runs import REPO_ROOT, run_on_localhost

ROLE_VARS = REPO_ROOT / "roles" / "boot_recovery" / "vars" / "main.yml"
# (distribution, distribution_major_version, os_family) as setup reports them -> package.
RELEASES = [
    (("Debian", "11", "Debian"), "python3-psycopg2"),
    (("Debian", "12", "Debian"), "python3-psycopg"),
    (("Debian", "13", "Debian"), "python3-psycopg"),
    # Debian testing and unstable report no number: they are newer than any release.
    (("Debian", "n/a", "Debian"), "python3-psycopg"),
    (("Ubuntu", "22", "Debian"), "python3-psycopg2"),
    (("Ubuntu", "24", "Debian"), "python3-psycopg"),
    (("Rocky", "8", "RedHat"), "python3-psycopg2"),
    (("AlmaLinux", "9", "RedHat"), "python3-psycopg2"),
    (("RedHat", "9", "RedHat"), "python3-psycopg2"),
]


def test_each_release_gets_the_psycopg_it_packages(tmp_path):
    tasks = [
        {
            "name": "release %d" % number,
            "ansible.builtin.set_fact": {"package_%d" % number: "{{ __boot_recovery_psycopg_package }}"},
            "vars": {
                "__boot_recovery_distribution": distribution,
                "__boot_recovery_distribution_major_fact": major,
                "__boot_recovery_os_family": family,
            },
        }
        for number, ((distribution, major, family), _package) in enumerate(RELEASES)
    ]
    # The role's own fact gathering (tasks/command.yml), then its expression on this host.
    tasks.append({"name": "facts", "ansible.builtin.setup": {"gather_subset": ["!all", "!min", "distribution"]}})
    tasks.append(
        {"name": "this host", "ansible.builtin.set_fact": {"package_here": "{{ __boot_recovery_psycopg_package }}"}}
    )
    release = "ansible_facts['distribution'] ~ ' ' ~ ansible_facts['distribution_major_version']"
    chosen = ", ".join("package_%d" % number for number in range(len(RELEASES)))
    tasks.append(
        {
            "name": "keep",
            "ansible.builtin.copy": {
                "content": "{{ {'chosen': [%s], 'here': package_here, 'release': %s} | to_json }}" % (chosen, release),
                "dest": str(tmp_path / "chosen.json"),
                "mode": "0600",
            },
        }
    )
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "vars_files": [str(ROLE_VARS)], "tasks": tasks}])
    )
    run_on_localhost(playbook)
    chosen = json.loads((tmp_path / "chosen.json").read_text())
    assert chosen["chosen"] == [package for _release, package in RELEASES]
    # This machine is Debian 12 (bookworm), which packages psycopg 3.1.7.
    assert chosen["release"] == "Debian 12"
    assert chosen["here"] == "python3-psycopg"


def test_the_default_packages_are_the_chosen_psycopg_and_pyyaml():
    defaults = yaml.safe_load((REPO_ROOT / "roles" / "boot_recovery" / "defaults" / "main.yml").read_text())
    assert defaults["boot_recovery_packages"] == ["{{ __boot_recovery_psycopg_package }}", "python3-yaml"]
