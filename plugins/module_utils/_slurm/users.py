# -*- coding: utf-8 -*-
# Copyright (c) arvados_ops.recovery contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whose Slurm jobs recover_after_node_reboot.yml may stop, per kind of work.

Arvados submits its Slurm jobs as one user per kind, and a Slurm job of any other user
named like a finished job's or container's UUID is not Arvados' to stop:

- containers: crunch-dispatch-slurm runs ``sbatch`` (and ``scancel``) as the user it runs
  as, with no ``--uid`` and no sudo (``services/crunch-dispatch-slurm/slurm.go``, 1.4.3,
  2.7.4, 3.2.1); its unit has no ``User=`` (1.4.3
  ``services/crunch-dispatch-slurm/crunch-dispatch-slurm.service``, 2.7.4 and 3.2.1
  ``cmd/arvados-server/crunch-dispatch-slurm.service``), so it runs as root unless the
  site says otherwise;
- crunch v1 jobs: crunch-dispatch.rb runs ``salloc`` (and its own ``scancel``) under
  ``sudo -E -u CrunchJobUser`` (``sudo_preface``, ``services/api/lib/crunch_dispatch.rb``,
  1.4.3); ``Clusters.<id>.Containers.JobsAPI.CrunchJobUser`` in /etc/arvados/config.yml,
  or ``crunch_job_user`` in the API server's ``config/application.yml``, which wins
  (1.4.3 ``services/api/config/arvados_config.rb``); default ``crunch``
  (1.4.3 ``lib/config/config.default.yml``; ``application.default.yml`` before 1.4).
  ``false`` meant "no sudo" before 1.4 (the job then runs as crunch-dispatch.rb's own
  user) and becomes ``sudo -u ''`` at 1.4.3: either way the user cannot be read from
  the setting.

Evidence comes from the probes the playbook registers on the ``arvados_dispatchers`` and
``crunch_v1_dispatcher`` hosts (plain Ansible results, or None when the host was not
asked). Where the evidence disagrees or a host could not be asked, the kind's user is
unknown and the playbook refuses to go on until ``recover_slurm_user`` says it.

Pure Python (3.8+), no Ansible import: plugins/filter/dispatcher_state.py adapts it.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .._common.errors import ConfigError
from .._database.settings import cluster_ids_text
from .._dispatcher.state import host_has_systemd, why_unasked

JOBS = "jobs"
CONTAINERS = "containers"
KINDS = (JOBS, CONTAINERS)
KIND_NAMES = {JOBS: "crunch v1 jobs", CONTAINERS: "containers"}

# recover_slurm_user's explicit opt-in to every user's Slurm jobs.
EVERY_USER = "*"
# A user name as squeue prints it.
SLURM_USER_NAME = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.@-]*\Z", re.ASCII)
SLURM_USER_REQUIREMENT = "must be a Slurm user name ([A-Za-z0-9_.@-], not starting with @ or -)"

# crunch-dispatch-slurm.service sets no User= at 1.4.3, 2.7.4 and 3.2.1.
UNIT_DEFAULT_USER = "root"
UNIT_DEFAULT_NOTE = "root, as Arvados' crunch-dispatch-slurm.service runs it (no User=, 1.4.3 to 3.2.1)"
# 1.4.3 lib/config/config.default.yml: Containers.JobsAPI.CrunchJobUser: crunch.
CRUNCH_JOB_USER_DEFAULT = "crunch"
CRUNCH_JOB_USER_NOTE = "crunch, CrunchJobUser's default (1.4.3 lib/config/config.default.yml)"
# crunch-dispatch.rb runs with RAILS_ENV=production (1.4.3 install docs' runit script).
APPLICATION_SECTIONS = ("common", "production")

Probe = Optional[Mapping[str, Any]]


class _Answer:
    """What one host says of a kind's user: users seen (with why), or why it cannot tell."""

    def __init__(self) -> None:
        self.users: List[Tuple[str, str]] = []
        self.unknown: List[str] = []


def stated_users(value: Any, kinds: Sequence[str]) -> Dict[str, str]:
    """recover_slurm_user as {kind: user or "*"}: one value for every kind, or one per kind."""
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        return {kind: _checked_user("recover_slurm_user", value) for kind in kinds}
    if isinstance(value, Mapping):
        unknown = sorted(str(kind) for kind in value if kind not in KINDS)
        if unknown:
            raise ConfigError(
                "recover_slurm_user: unknown kind(s) %s; known: %s" % (", ".join(map(repr, unknown)), ", ".join(KINDS))
            )
        return {
            str(kind): _checked_user("recover_slurm_user.%s" % kind, user)
            for kind, user in value.items()
            if kind in kinds and user not in (None, "")
        }
    raise ConfigError(
        'recover_slurm_user must be a Slurm user, "%s" (every user) or a dict of kind (%s) to either, got %r'
        % (EVERY_USER, ", ".join(KINDS), value)
    )


def _checked_user(name: str, value: Any) -> str:
    if value == EVERY_USER:
        return EVERY_USER
    if not isinstance(value, str) or not SLURM_USER_NAME.match(value):
        raise ConfigError('%s must be a Slurm user name or "%s" (every user), got %r' % (name, EVERY_USER, value))
    return value


# -- containers: the arvados_dispatchers hosts ----------------------------------------------


def _show_properties(stdout: Any) -> Dict[str, str]:
    """`systemctl show --property=...`'s KEY=value lines."""
    pairs = (line.split("=", 1) for line in str(stdout or "").splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _unit_user(host: str, unit: str, systemd: Probe, show: Probe, answer: _Answer) -> None:
    """The unit's User= where systemd runs and has the unit; root when it sets none."""
    unasked = why_unasked(systemd)
    if unasked:
        answer.unknown.append("%s: unit %s: %s" % (host, unit, unasked))
        return
    if not host_has_systemd(systemd):
        return
    unasked = why_unasked(show)
    if unasked or show is None or show.get("rc") != 0:
        why = unasked or (show or {}).get("stderr") or (show or {}).get("msg") or "rc %s" % (show or {}).get("rc")
        answer.unknown.append("%s: unit %s: systemctl show: %s" % (host, unit, str(why).strip()))
        return
    properties = _show_properties(show.get("stdout"))
    if properties.get("LoadState") != "loaded":
        return
    user = properties.get("User") or UNIT_DEFAULT_USER
    note = "User=%s" % user if properties.get("User") else "no User=, so root"
    answer.users.append((user, "%s: unit %s: %s" % (host, unit, note)))


def _process_users(host: str, unit: str, process: Probe, owners: Probe, answer: _Answer) -> None:
    """The users its live processes run as (a dispatcher started by hand has no unit)."""
    unasked = why_unasked(process)
    if unasked or process is None or process.get("rc") not in (0, 1):
        why = unasked or "pgrep failed (rc %s)" % (process or {}).get("rc")
        answer.unknown.append("%s: %s process: %s" % (host, unit, why))
        return
    if process.get("rc") == 1:
        return
    unasked = why_unasked(owners)
    users = str((owners or {}).get("stdout") or "").split()
    if unasked or owners is None or owners.get("rc") != 0 or not users:
        why = unasked or "ps found no owner (rc %s)" % (owners or {}).get("rc")
        answer.unknown.append("%s: %s process: %s" % (host, unit, why))
        return
    pids = " ".join(str(process.get("stdout") or "").split())
    for user in sorted(set(users)):
        answer.users.append((user, "%s: %s process %s runs as %s" % (host, unit, pids, user)))


def _uid_argument(arguments: Any) -> Optional[str]:
    """The value of sbatch's --uid in an argument list (the last one wins, as in getopt)."""
    if not isinstance(arguments, (list, tuple)):
        return None
    found = None
    for index, argument in enumerate(arguments):
        text = str(argument)
        if text.startswith("--uid="):
            found = text[len("--uid=") :]
        elif text == "--uid" and index + 1 < len(arguments):
            found = str(arguments[index + 1])
    return found


class SeveralClusters(Exception):
    """config.yml defines more than one cluster: the dispatcher does not start with it."""


def _config_sbatch_arguments(document: Any) -> Any:
    """Clusters.<id>.Containers.SLURM.SbatchArgumentsList (2.0 and later) of the file's
    only cluster. crunch-dispatch-slurm takes its cluster with GetCluster(""), which
    refuses a file of several ("multiple clusters configured, cannot choose": 1.4.3
    crunch-dispatch-slurm.go, 2.7.4 and 3.2.1 lib/service/cmd.go), so no cluster of such a
    file says how it submits: SeveralClusters."""
    clusters = document.get("Clusters") if isinstance(document, Mapping) else None
    if not isinstance(clusters, Mapping) or not clusters:
        return None
    if len(clusters) > 1:
        raise SeveralClusters(cluster_ids_text(clusters))
    cluster = next(iter(clusters.values()))
    slurm = ((cluster or {}).get("Containers") or {}).get("SLURM") if isinstance(cluster, Mapping) else None
    return slurm.get("SbatchArgumentsList") if isinstance(slurm, Mapping) else None


def _sbatch_uid_user(host: str, probes: Mapping[str, Probe], paths: Mapping[str, str], answer: _Answer) -> bool:
    """True when the dispatcher's own settings decide its Slurm jobs' user: a --uid among its
    sbatch arguments (root may submit as another user), or settings that cannot be read.

    The legacy file's SbatchArguments replaces SbatchArgumentsList (1.x reads only it; 2.x
    and 3.x lib/config/deprecated.go, loadOldCrunchDispatchSlurmConfig)."""
    legacy, readable = _document(host, paths["legacy_config"], probes.get("legacy_config"), answer)
    if not readable:
        return True
    arguments = legacy.get("SbatchArguments") if isinstance(legacy, Mapping) else None
    where = "SbatchArguments in %s" % paths["legacy_config"]
    if arguments is None:
        config, readable = _document(host, paths["config"], probes.get("config"), answer)
        if not readable:
            return True
        try:
            arguments = _config_sbatch_arguments(config)
        except SeveralClusters as several:
            answer.unknown.append(
                "%s: %s defines several clusters (%s), which crunch-dispatch-slurm does not start with:"
                " how it submits cannot be told from it" % (host, paths["config"], several)
            )
            return True
        where = "Containers.SLURM.SbatchArgumentsList in %s" % paths["config"]
    user = _uid_argument(arguments)
    if user is None:
        return False
    if SLURM_USER_NAME.match(user) and not user.isdigit():
        answer.users.append((user, "%s: sbatch --uid=%s in %s" % (host, user, where)))
    else:
        answer.unknown.append("%s: sbatch --uid=%s in %s: squeue shows a user name, not this" % (host, user, where))
    return True


def _paths(probes: Mapping[str, Any], names: Mapping[str, str]) -> Dict[str, str]:
    """The files a host was asked for (its ``paths`` probe: the host's own settings), else
    their plain names, for the messages."""
    paths = dict(names)
    given = probes.get("paths")
    if isinstance(given, Mapping):
        paths.update({str(key): str(value) for key, value in given.items() if value})
    return paths


DISPATCHER_FILES = {"config": "config.yml", "legacy_config": "crunch-dispatch-slurm.yml"}
CRUNCH_V1_FILES = {"application": "application.yml", "config": "config.yml"}


def container_user(hosts: Sequence[Tuple[str, Mapping[str, Probe]]], unit: str) -> Dict[str, Any]:
    """The Slurm user of the containers' Slurm jobs, from each arvados_dispatchers host's
    probes ``systemd`` (stat of /run/systemd/system), ``unit_user`` (systemctl show
    --property=LoadState,User), ``process`` (pgrep -f) and ``owners`` (ps -o user=), and,
    where it has ``paths`` (the files it was asked for), ``config`` and ``legacy_config``
    (slurp of the dispatcher's settings files), whose sbatch --uid decides it."""
    answer = _Answer()
    for host, probes in hosts:
        if probes.get("paths") is not None and _sbatch_uid_user(host, probes, _paths(probes, DISPATCHER_FILES), answer):
            continue
        _unit_user(host, unit, probes.get("systemd"), probes.get("unit_user"), answer)
        _process_users(host, unit, probes.get("process"), probes.get("owners"), answer)
    if not hosts:
        return _decided(UNIT_DEFAULT_USER, "no arvados_dispatchers host in the inventory to ask; " + UNIT_DEFAULT_NOTE)
    if not answer.users and not answer.unknown:
        return _decided(
            UNIT_DEFAULT_USER,
            "no %s unit or process on %s; %s" % (unit, ", ".join(host for host, _probes in hosts), UNIT_DEFAULT_NOTE),
        )
    return _agreed(answer, "the arvados_dispatchers hosts")


# -- crunch v1: the crunch_v1_dispatcher hosts ----------------------------------------------


def _slurped_text(path: str, probe: Probe) -> Tuple[Optional[str], Optional[str]]:
    """(text, None), (None, None) for a missing file, or (None, why it cannot be read)."""
    unasked = why_unasked(probe)
    if unasked or probe is None:
        return None, "%s: %s" % (path, unasked or "not asked")
    if "content" not in probe:
        message = str(probe.get("msg") or "not read")
        # slurp says "File not found: PATH" (2.19); the case is not part of the message to rely on.
        if message.lower().startswith("file not found"):
            return None, None
        return None, "%s: %s" % (path, message)
    try:
        return base64.b64decode(str(probe["content"])).decode("utf-8"), None
    except (binascii.Error, UnicodeDecodeError) as error:
        return None, "%s: not UTF-8 text (%s)" % (path, error)


def _parse_yaml(text: str, path: str) -> Tuple[Any, Optional[str]]:
    import yaml  # pylint: disable=import-outside-toplevel  # the controller's, only when a file is read

    try:
        return yaml.safe_load(text), None
    except yaml.YAMLError as error:
        return None, "%s: not YAML (%s)" % (path, " ".join(str(error).split()))


_NOT_SET = object()


def _config_setting(document: Any) -> Any:
    """Clusters.<first>.Containers.JobsAPI.CrunchJobUser, as 1.4.3 takes the first cluster."""
    clusters = document.get("Clusters") if isinstance(document, Mapping) else None
    if not isinstance(clusters, Mapping) or not clusters:
        return _NOT_SET
    cluster = next(iter(clusters.values()))
    jobs_api = ((cluster or {}).get("Containers") or {}).get("JobsAPI") if isinstance(cluster, Mapping) else None
    if not isinstance(jobs_api, Mapping) or "CrunchJobUser" not in jobs_api:
        return _NOT_SET
    return jobs_api["CrunchJobUser"]


def _application_setting(document: Any) -> Tuple[Any, str]:
    """crunch_job_user of the common section, overridden by the production one."""
    value: Any = _NOT_SET
    section_used = ""
    for section in APPLICATION_SECTIONS:
        settings = document.get(section) if isinstance(document, Mapping) else None
        if isinstance(settings, Mapping) and "crunch_job_user" in settings:
            value, section_used = settings["crunch_job_user"], section
    return value, section_used


def _setting_user(host: str, where: str, value: Any, answer: _Answer) -> None:
    if isinstance(value, str) and SLURM_USER_NAME.match(value):
        answer.users.append((value, "%s: %s" % (host, where)))
    elif value in (False, None, ""):
        answer.unknown.append(
            "%s: %s is %r: crunch-dispatch.rb then runs salloc without sudo before 1.4 (as its own user) "
            "and with `sudo -u ''` at 1.4.3" % (host, where, value)
        )
    else:
        answer.unknown.append("%s: %s is %r, not a user name" % (host, where, value))


def _document(host: str, path: str, probe: Probe, answer: _Answer) -> Tuple[Any, bool]:
    """(the parsed file or None when it is missing, True), or (None, False) when it cannot be read."""
    text, why = _slurped_text(path, probe)
    if why is None and text is not None:
        document, why = _parse_yaml(text, path)
        if why is None:
            return document, True
    if why:
        answer.unknown.append("%s: %s" % (host, why))
        return None, False
    return None, True


def _v1_host_user(host: str, probes: Mapping[str, Probe], paths: Mapping[str, str], answer: _Answer) -> None:
    """application.yml's crunch_job_user wins over config.yml's CrunchJobUser (1.4.3)."""
    application, readable = _document(host, paths["application"], probes.get("application"), answer)
    if not readable:
        return
    value, section = _application_setting(application)
    if value is not _NOT_SET:
        _setting_user(host, "crunch_job_user in %s (%s)" % (paths["application"], section), value, answer)
        return
    config, readable = _document(host, paths["config"], probes.get("config"), answer)
    if not readable:
        return
    value = _config_setting(config)
    if value is not _NOT_SET:
        _setting_user(host, "Containers.JobsAPI.CrunchJobUser in %s" % paths["config"], value, answer)
        return
    answer.users.append(
        (
            CRUNCH_JOB_USER_DEFAULT,
            "%s: neither %s nor %s sets it; %s" % (host, paths["application"], paths["config"], CRUNCH_JOB_USER_NOTE),
        )
    )


def crunch_v1_user(hosts: Sequence[Tuple[str, Mapping[str, Probe]]]) -> Dict[str, Any]:
    """The Slurm user of crunch v1 jobs, from each crunch_v1_dispatcher host's probes
    ``application`` and ``config`` (slurp of application.yml and config.yml) and ``paths``
    (the files it was asked for)."""
    if not hosts:
        return _decided(
            CRUNCH_JOB_USER_DEFAULT, "no crunch_v1_dispatcher host in the inventory to ask; " + CRUNCH_JOB_USER_NOTE
        )
    answer = _Answer()
    for host, probes in hosts:
        _v1_host_user(host, probes, _paths(probes, CRUNCH_V1_FILES), answer)
    return _agreed(answer, "the crunch_v1_dispatcher hosts")


# -- the decision -----------------------------------------------------------------------------


def _decided(user: str, source: str) -> Dict[str, Any]:
    return {"user": user, "source": source, "unknown": None}


def _agreed(answer: _Answer, where: str) -> Dict[str, Any]:
    seen = "; ".join([why for _user, why in answer.users] + answer.unknown)
    if answer.unknown:
        return {"user": None, "source": seen, "unknown": "not every one of %s could tell (%s)" % (where, seen)}
    users = sorted({user for user, _why in answer.users})
    if len(users) > 1:
        return {"user": None, "source": seen, "unknown": "%s disagree (%s)" % (where, seen)}
    return _decided(users[0], seen)


def slurm_users(
    stated: Any,
    kinds: Sequence[str],
    containers: Mapping[str, Any],
    crunch_v1: Mapping[str, Any],
) -> Dict[str, Any]:
    """Per kind, the user whose Slurm jobs may be stopped ("*": every user's), why, and a
    refusal text when a kind's user cannot be told.

    stated: recover_slurm_user. containers, crunch_v1: container_user() and crunch_v1_user().
    """
    # As arvados_reconcile_info's kinds: one kind alone may be given as a string.
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or ())
    bad = [kind for kind in kinds if kind not in KINDS]
    if bad or not kinds:
        raise ConfigError("kinds must be a non-empty list of %s, got %r" % (", ".join(KINDS), kinds))
    given = stated_users(stated, kinds)
    found = {JOBS: crunch_v1, CONTAINERS: containers}
    users: Dict[str, Optional[str]] = {}
    sources: Dict[str, str] = {}
    unknown: Dict[str, str] = {}
    for kind in kinds:
        if kind in given:
            users[kind], sources[kind] = given[kind], "recover_slurm_user"
            continue
        users[kind], sources[kind] = found[kind].get("user"), str(found[kind].get("source"))
        if found[kind].get("unknown") or not users[kind]:
            unknown[kind] = str(found[kind].get("unknown") or "no user found")
    return {
        "users": users,
        "sources": sources,
        "unknown": unknown,
        # arvados_reconcile_info's slurm_users: a kind left out is every user's.
        "module_users": {kind: user for kind, user in users.items() if user and user != EVERY_USER},
        "refusal": _refusal(unknown),
    }


def _refusal(unknown: Mapping[str, str]) -> str:
    if not unknown:
        return ""
    what = "; ".join("%s: %s" % (KIND_NAMES[kind], why) for kind, why in unknown.items())
    return (
        "Whose Slurm jobs to stop cannot be told, so nothing was changed: %s. Set recover_slurm_user to the "
        'Slurm user that submits them (for example crunch), to one per kind ({jobs: crunch, containers: root}), or to "%s" '
        "to stop matching Slurm jobs of every user." % (what, EVERY_USER)
    )


def touched_line(decision: Mapping[str, Any], check_mode: bool = False) -> str:
    """The summary's line: whose Slurm jobs the run touched (or would touch)."""
    head = "Slurm jobs %s: " % ("that would be touched" if check_mode else "touched")
    users: Mapping[str, Optional[str]] = decision["users"]
    sources: Mapping[str, str] = decision["sources"]
    if set(users.values()) == {EVERY_USER}:
        return head + 'those of every user (recover_slurm_user: "%s")' % EVERY_USER
    distinct = set(users.values())
    if len(distinct) == 1:
        user = next(iter(distinct))
        return head + "those of user %s (%s)" % (
            user,
            "; ".join("%s: %s" % (KIND_NAMES[kind], sources[kind]) for kind in users),
        )
    parts = []
    for kind, user in users.items():
        whose = "every user's" if user == EVERY_USER else "those of user %s" % user
        parts.append("for %s, %s (%s)" % (KIND_NAMES[kind], whose, sources[kind]))
    return head + "; ".join(parts)
