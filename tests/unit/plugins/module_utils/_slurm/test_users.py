# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whose Slurm jobs recover_after_node_reboot.yml may stop, per kind.

Containers follow crunch-dispatch-slurm: sbatch as its own user, no --uid or sudo
(services/crunch-dispatch-slurm/slurm.go, 1.4.3, 2.7.4, 3.2.1), and a unit without User=
(1.4.3 services/crunch-dispatch-slurm/crunch-dispatch-slurm.service, 2.7.4 and 3.2.1
cmd/arvados-server/crunch-dispatch-slurm.service). Crunch v1 jobs follow crunch-dispatch.rb:
salloc under `sudo -E -u CrunchJobUser` (1.4.3 services/api/lib/crunch_dispatch.rb),
application.yml's crunch_job_user winning over config.yml (1.4.3
services/api/config/arvados_config.rb), default crunch (1.4.3 lib/config/config.default.yml).
"""

from __future__ import annotations

import base64

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm import users as su

UNIT = "crunch-dispatch-slurm"
PATHS = {"application": "/srv/api/config/application.yml", "config": "/etc/arvados/config.yml"}
SYSTEMD = {"changed": False, "stat": {"exists": True}}
NO_SYSTEMD = {"changed": False, "stat": {"exists": False}}
UNREACHABLE = {"unreachable": True, "msg": "ssh: connect to host d1 port 22: No route to host"}
SKIPPED = {"skipped": True, "changed": False}
MISSING = {"failed": False, "msg": "File not found: /srv/api/config/application.yml"}


def command(rc, stdout="", stderr=""):
    return {"rc": rc, "stdout": stdout, "stderr": stderr, "changed": False}


def shown(user="", load="loaded"):
    return command(0, "LoadState=%s\nUser=%s\n" % (load, user))


def slurped(document):
    return {"content": base64.b64encode(yaml.safe_dump(document).encode()).decode(), "encoding": "base64"}


def dispatcher_host(systemd=None, unit_user=None, process=None, owners=None):
    return {
        "systemd": systemd if systemd is not None else SYSTEMD,
        "unit_user": unit_user if unit_user is not None else shown(load="not-found"),
        "process": process if process is not None else command(1),
        "owners": owners if owners is not None else SKIPPED,
    }


def config_yml(user=None):
    jobs_api = {} if user is None else {"CrunchJobUser": user}
    return slurped({"Clusters": {"zzzzz": {"Containers": {"JobsAPI": jobs_api}}}})


# -- containers -----------------------------------------------------------------------------


def test_without_a_dispatcher_host_the_unit_as_arvados_ships_it_runs_as_root():
    decided = su.container_user([], UNIT)
    assert decided["user"] == "root" and decided["unknown"] is None
    assert decided["source"].startswith("no arvados_dispatchers host in the inventory to ask; root, as Arvados'")


@pytest.mark.parametrize(
    ("unit_user", "expected", "note"),
    [
        (shown(""), "root", "d1: unit crunch-dispatch-slurm: no User=, so root"),
        (shown("crunch"), "crunch", "d1: unit crunch-dispatch-slurm: User=crunch"),
    ],
)
def test_the_units_user_where_systemd_has_the_unit(unit_user, expected, note):
    decided = su.container_user([("d1", dispatcher_host(unit_user=unit_user))], UNIT)
    assert (decided["user"], decided["source"], decided["unknown"]) == (expected, note, None)


def test_a_host_without_the_unit_or_its_process_tells_nothing_and_root_stays():
    decided = su.container_user([("d1", dispatcher_host())], UNIT)
    assert decided["user"] == "root"
    assert decided["source"].startswith("no crunch-dispatch-slurm unit or process on d1; root")


def test_a_process_started_by_hand_names_its_user():
    host = dispatcher_host(
        systemd=NO_SYSTEMD, unit_user=SKIPPED, process=command(0, "77\n"), owners=command(0, "alice\n")
    )
    decided = su.container_user([("d1", host)], UNIT)
    assert decided["user"] == "alice"
    assert decided["source"] == "d1: crunch-dispatch-slurm process 77 runs as alice"


def test_a_unit_and_a_process_of_different_users_are_ambiguous():
    host = dispatcher_host(unit_user=shown(""), process=command(0, "77\n"), owners=command(0, "alice\n"))
    decided = su.container_user([("d1", host)], UNIT)
    assert decided["user"] is None
    assert decided["unknown"].startswith("the arvados_dispatchers hosts disagree (d1: unit crunch-dispatch-slurm:")


def test_hosts_that_disagree_are_ambiguous():
    hosts = [("d1", dispatcher_host(unit_user=shown("crunch"))), ("d2", dispatcher_host(unit_user=shown("")))]
    decided = su.container_user(hosts, UNIT)
    assert decided["user"] is None and "disagree" in decided["unknown"]


@pytest.mark.parametrize(
    "host",
    [
        dispatcher_host(systemd=UNREACHABLE, unit_user=UNREACHABLE, process=UNREACHABLE),
        dispatcher_host(unit_user=command(1, stderr="Failed to connect to bus")),
        dispatcher_host(process=command(2, stderr="pgrep: bad pattern")),
        dispatcher_host(process=command(0, "77\n"), owners=command(1)),
    ],
)
def test_a_host_that_cannot_tell_makes_the_user_unknown(host):
    decided = su.container_user([("d1", dispatcher_host(unit_user=shown(""))), ("d2", host)], UNIT)
    assert decided["user"] is None
    assert decided["unknown"].startswith("not every one of the arvados_dispatchers hosts could tell")
    assert "d2: " in decided["unknown"]


DISPATCHER_PATHS = {
    "config": "/etc/arvados/config.yml",
    "legacy_config": "/etc/arvados/crunch-dispatch-slurm/crunch-dispatch-slurm.yml",
}


def sbatch_list(arguments):
    return slurped({"Clusters": {"zzzzz": {"Containers": {"SLURM": {"SbatchArgumentsList": arguments}}}}})


@pytest.mark.parametrize(
    ("config", "legacy", "expected", "where"),
    [
        (sbatch_list(["--uid=crunch", "--partition=%P"]), MISSING, "crunch", "SLURM.SbatchArgumentsList in /etc"),
        (sbatch_list(["--uid", "alice"]), MISSING, "alice", "SLURM.SbatchArgumentsList in /etc"),
        # 2.x and 3.x lib/config/deprecated.go: the legacy file's SbatchArguments replaces the list.
        (sbatch_list(["--uid=crunch"]), slurped({"SbatchArguments": ["--uid=bob"]}), "bob", "SbatchArguments in /etc"),
    ],
)
def test_sbatch_uid_in_the_dispatchers_settings_names_its_jobs_user(config, legacy, expected, where):
    # Its process runs as root; sbatch --uid makes the Slurm jobs another user's.
    host = dict(dispatcher_host(unit_user=shown("")), config=config, legacy_config=legacy, paths=DISPATCHER_PATHS)
    decided = su.container_user([("d1", host)], UNIT)
    assert decided["user"] == expected
    assert decided["source"].startswith("d1: sbatch --uid=%s in " % expected)
    assert where in decided["source"]


def test_settings_without_uid_leave_the_unit_to_tell():
    host = dict(
        dispatcher_host(unit_user=shown("crunch")),
        config=sbatch_list(["--mem=%M"]),
        legacy_config=MISSING,
        paths=DISPATCHER_PATHS,
    )
    decided = su.container_user([("d1", host)], UNIT)
    assert decided["user"] == "crunch"


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (sbatch_list(["--uid=1001"]), "sbatch --uid=1001 in Containers.SLURM.SbatchArgumentsList"),
        ({"failed": False, "msg": "File is not readable: /etc/arvados/config.yml"}, "File is not readable"),
        # GetCluster("") refuses such a file: no cluster of it is the dispatcher's, the first
        # no more than the others (1.4.3 crunch-dispatch-slurm.go, 3.2.1 lib/service/cmd.go).
        (
            slurped(
                {
                    "Clusters": {
                        "aaaaa": {"Containers": {"SLURM": {"SbatchArgumentsList": ["--uid=crunch"]}}},
                        "bbbbb": {"Containers": {"SLURM": {"SbatchArgumentsList": []}}},
                    }
                }
            ),
            "d1: /etc/arvados/config.yml defines several clusters (aaaaa, bbbbb), which crunch-dispatch-slurm does"
            " not start with",
        ),
    ],
)
def test_settings_that_cannot_name_the_user_make_it_unknown(config, why):
    host = dict(dispatcher_host(unit_user=shown("")), config=config, legacy_config=MISSING, paths=DISPATCHER_PATHS)
    decided = su.container_user([("d1", host)], UNIT)
    assert decided["user"] is None
    assert why in decided["unknown"]


# -- crunch v1 ------------------------------------------------------------------------------


def test_without_a_crunch_v1_host_crunch_job_users_default():
    decided = su.crunch_v1_user([])
    assert decided["user"] == "crunch" and decided["unknown"] is None
    assert "CrunchJobUser's default (1.4.3 lib/config/config.default.yml)" in decided["source"]


def test_application_yml_wins_over_config_yml_and_production_over_common():
    application = slurped({"common": {"crunch_job_user": "alice"}, "production": {"crunch_job_user": "bob"}})
    decided = su.crunch_v1_user([("api", {"application": application, "config": config_yml("carol"), "paths": PATHS})])
    assert decided["user"] == "bob"
    assert decided["source"] == "api: crunch_job_user in %s (production)" % PATHS["application"]


def test_config_yml_where_application_yml_is_missing_or_silent():
    for application in (MISSING, slurped({"common": {"uuid_prefix": "zzzzz"}})):
        decided = su.crunch_v1_user(
            [("api", {"application": application, "config": config_yml("carol"), "paths": PATHS})]
        )
        assert decided["user"] == "carol"
        assert decided["source"] == "api: Containers.JobsAPI.CrunchJobUser in /etc/arvados/config.yml"


def test_neither_file_setting_it_means_the_default():
    decided = su.crunch_v1_user([("api", {"application": MISSING, "config": config_yml(), "paths": PATHS})])
    assert decided["user"] == "crunch"
    assert decided["source"].startswith("api: neither %s nor /etc/arvados/config.yml sets it" % PATHS["application"])


@pytest.mark.parametrize(
    ("probes", "why"),
    [
        ({"application": MISSING, "config": config_yml(False)}, "is False: crunch-dispatch.rb then runs salloc"),
        ({"application": MISSING, "config": config_yml("")}, "is '': crunch-dispatch.rb then runs salloc"),
        ({"application": MISSING, "config": config_yml(["a"])}, "is ['a'], not a user name"),
        (
            {"application": {"failed": False, "msg": "File is not readable: x"}, "config": MISSING},
            "File is not readable",
        ),
        ({"application": {"content": base64.b64encode(b"a: [").decode()}, "config": MISSING}, "not YAML"),
        ({"application": UNREACHABLE, "config": UNREACHABLE}, "unreachable: ssh: connect"),
        ({"application": None, "config": None}, "not asked"),
    ],
)
def test_a_setting_that_names_no_user_or_a_file_that_cannot_be_read_is_unknown(probes, why):
    decided = su.crunch_v1_user([("api", dict(probes, paths=PATHS))])
    assert decided["user"] is None
    assert why in decided["unknown"]


# -- the decision -----------------------------------------------------------------------------

ROOT = {"user": "root", "source": "unit", "unknown": None}
CRUNCH = {"user": "crunch", "source": "default", "unknown": None}
CANNOT_TELL = {"user": None, "source": "d2: unreachable", "unknown": "not every one could tell (d2: unreachable)"}
BOTH = ["jobs", "containers"]


def test_each_kind_takes_its_dispatchers_user():
    decision = su.slurm_users(None, BOTH, ROOT, CRUNCH)
    assert decision["users"] == {"jobs": "crunch", "containers": "root"}
    assert decision["module_users"] == {"jobs": "crunch", "containers": "root"}
    assert decision["refusal"] == ""
    assert su.touched_line(decision) == (
        "Slurm jobs touched: for crunch v1 jobs, those of user crunch (default); for containers, those of user root (unit)"
    )


def test_one_stated_user_for_every_kind():
    decision = su.slurm_users("alice", BOTH, CANNOT_TELL, CANNOT_TELL)
    assert decision["users"] == {"jobs": "alice", "containers": "alice"}
    assert decision["refusal"] == ""
    assert su.touched_line(decision, check_mode=True) == (
        "Slurm jobs that would be touched: those of user alice (crunch v1 jobs: recover_slurm_user;"
        " containers: recover_slurm_user)"
    )


def test_every_user_only_when_asked_with_a_star():
    decision = su.slurm_users("*", BOTH, ROOT, CRUNCH)
    assert decision["users"] == {"jobs": "*", "containers": "*"}
    assert decision["module_users"] == {}
    assert su.touched_line(decision) == 'Slurm jobs touched: those of every user (recover_slurm_user: "*")'


def test_a_stated_kind_decides_only_that_kind():
    decision = su.slurm_users({"containers": "*"}, BOTH, CANNOT_TELL, CRUNCH)
    assert decision["users"] == {"jobs": "crunch", "containers": "*"}
    assert decision["module_users"] == {"jobs": "crunch"}
    assert su.touched_line(decision) == (
        "Slurm jobs touched: for crunch v1 jobs, those of user crunch (default); for containers, every user's"
        " (recover_slurm_user)"
    )


def test_a_kind_that_cannot_be_told_is_refused_with_the_fix():
    decision = su.slurm_users(None, BOTH, CANNOT_TELL, CRUNCH)
    assert decision["unknown"] == {"containers": CANNOT_TELL["unknown"]}
    assert decision["refusal"].startswith(
        "Whose Slurm jobs to stop cannot be told, so nothing was changed: containers: not every one could tell"
    )
    assert 'or to "*" to stop matching Slurm jobs of every user.' in decision["refusal"]


@pytest.mark.parametrize("kinds", [["jobs"], "jobs"])
def test_a_kind_not_reconciled_is_not_asked_about(kinds):
    decision = su.slurm_users(None, kinds, CANNOT_TELL, CRUNCH)
    assert decision["users"] == {"jobs": "crunch"}
    assert decision["refusal"] == ""


def test_no_kind_is_refused():
    with pytest.raises(ConfigError, match="kinds must be a non-empty list"):
        su.slurm_users(None, [], ROOT, CRUNCH)


@pytest.mark.parametrize(
    ("stated", "message"),
    [
        ("a b", "recover_slurm_user must be a Slurm user name or \"*\" (every user), got 'a b'"),
        ({"jobs": "a;b"}, "recover_slurm_user.jobs must be a Slurm user name"),
        ({"tasks": "crunch"}, "recover_slurm_user: unknown kind(s) 'tasks'"),
        (["crunch"], "recover_slurm_user must be a Slurm user"),
        (7, "recover_slurm_user must be a Slurm user"),
    ],
)
def test_a_bad_recover_slurm_user_names_itself(stated, message):
    with pytest.raises(ConfigError) as raised:
        su.slurm_users(stated, BOTH, ROOT, CRUNCH)
    assert message in str(raised.value)


def test_a_host_not_asked_is_named_with_plain_file_names():
    decided = su.crunch_v1_user([("api", {"application": None, "config": None, "paths": None})])
    assert (
        decided["unknown"]
        == "not every one of the crunch_v1_dispatcher hosts could tell (api: application.yml: not asked (not in this run))"
    )
