# -*- coding: utf-8 -*-
# Copyright: contributors to arvados_ops.recovery
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What crunch-dispatch-slurm's configuration must hold, per Arvados release.

The ``dispatcher_config`` role asks this module, on the controller, what to write:

- Arvados 1.1 to 1.4 read the dispatcher's own file
  (``/etc/arvados/crunch-dispatch-slurm/crunch-dispatch-slurm.yml``) into a Go struct
  (``Config`` up to 1.1.3, ``Dispatcher`` from 1.1.4): :func:`legacy_document` builds
  it with only the keys that release's struct has.
- Arvados 2.0 and later read ``/etc/arvados/config.yml``: :func:`cluster_settings`
  says which keys of ``Clusters.<id>`` to set, and :func:`merge_cluster_text` sets
  them in the operator's file with a round-trip YAML parser (ruamel.yaml), so that
  comments, order and every other key stay byte for byte as they were.

Since 3.2.0 ``SbatchArgumentsList`` is the whole sbatch template, and a template
without ``--job-name=%U`` leaves Slurm jobs unnamed: the dispatcher then loses every
container it submits. Before 3.2 the dispatcher added ``--job-name`` after the
operator's arguments itself. :func:`job_name_problem` refuses such a result. Likewise
the instance type constraint the dispatcher added by itself up to 3.1 is sent from 3.2
only where the template says ``%I``: :func:`instance_type_template` writes it,
:func:`instance_type_problem` and :func:`instance_type_warnings` check the result.

The facts come from Arvados' source at the release tags (see the role's README);
``tests/data/arvados_config/`` keeps the keys and types read from each tag.
"""

from __future__ import annotations

import io
import re
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    MutableMapping,
    NoReturn,
    Optional,
    Set,
    Tuple,
    TypedDict,
)

from .._common.arvados_release import Release, parse_release
from .._common.errors import ConfigError

NEWEST_KNOWN = (3, 2)
OLDEST_KNOWN = (1, 1, 0)
# lib/config/config.default.yml at 3.2.0 and 3.2.1.
SBATCH_TEMPLATE_SINCE = (3, 2, 0)
SBATCH_TEMPLATE_DEFAULT = ("--job-name=%U", "--mem=%M", "--cpus-per-task=%C", "--tmp=%T", "--partition=%P")
JOB_NAME = "--job-name=%U"
# Instance types: from 1.2.0 to 3.1.2, with Clusters.<id>.InstanceTypes configured, the
# dispatcher sent --constraint=instancetype=<the cheapest type that fits> in place of
# --mem, --cpus-per-task and --tmp (services/crunch-dispatch-slurm/crunch-dispatch-slurm.go,
# sbatchArgs: "use instancetype constraint instead of slurm mem/cpu/tmp specs"; 1.1.4 added
# it after them). From 3.2.0 it is sent only where the template says %I (3.2.1
# crunch-dispatch-slurm.go, sbatchArgs' "%I"; doc/admin/upgrading.html.textile.liquid at
# 3.2.1 tells such sites to add "--constraint=instancetype=%I").
INSTANCE_TYPE_SETTING = "instance_type_constraint"
INSTANCE_TYPE_CONSTRAINT = "--constraint=instancetype=%I"
INSTANCE_TYPE_REPLACES = ("--mem=%M", "--cpus-per-task=%C", "--tmp=%T")
HIDDEN = "<hidden>"
# Comments and blank lines up to a `---` line: ruamel.yaml drops comments before the
# document start, so they are kept aside and put back as they were.
PREAMBLE = re.compile(r"\A(?:[ \t]*(?:#[^\n]*)?\n)*---[^\n]*\n")

# A key's place in a document: ("Containers", "SLURM", "SbatchArgumentsList").
KeyPath = Tuple[str, ...]
# ruamel.yaml's round-trip parser and the documents it loads: the package has no type
# information (mypy.ini).
RoundTripParser = Any


class Setting(TypedDict, total=False):
    """Where a role setting goes (see SETTINGS)."""

    legacy: KeyPath
    legacy_since: Release
    cluster: KeyPath
    cluster_since: Release
    required_since: Release
    secret: bool


# The role's settings (dispatcher_config_<name>): where each one goes, from which
# release on, and whether it is a secret. legacy: the key path in the dispatcher's
# own file (1.x); cluster: the key path under Clusters.<id> (2.0 and later).
SETTINGS: Dict[str, Setting] = {
    "api_host": {"legacy": ("Client", "APIHost")},
    "auth_token": {"legacy": ("Client", "AuthToken"), "secret": True},
    "insecure": {"legacy": ("Client", "Insecure"), "cluster": ("TLS", "Insecure")},
    "keep_service_uris": {"legacy": ("Client", "KeepServiceURIs")},
    "sbatch_arguments": {"legacy": ("SbatchArguments",), "cluster": ("Containers", "SLURM", "SbatchArgumentsList")},
    "poll_period": {"legacy": ("PollPeriod",), "cluster": ("Containers", "CloudVMs", "PollInterval")},
    "crunch_run_command": {"legacy": ("CrunchRunCommand",), "cluster": ("Containers", "CrunchRunCommand")},
    "crunch_run_arguments": {"legacy": ("CrunchRunCommand",), "cluster": ("Containers", "CrunchRunArgumentsList")},
    "min_retry_period": {"legacy": ("MinRetryPeriod",), "cluster": ("Containers", "MinRetryPeriod")},
    "priority_spread": {
        "legacy": ("PrioritySpread",),
        "legacy_since": (1, 1, 4),
        "cluster": ("Containers", "SLURM", "PrioritySpread"),
    },
    "reserve_extra_ram": {
        "legacy": ("ReserveExtraRAM",),
        "legacy_since": (1, 1, 4),
        "cluster": ("Containers", "ReserveExtraRAM"),
    },
    "batch_size": {"legacy": ("BatchSize",), "legacy_since": (1, 2, 0)},
    "system_root_token": {"cluster": ("SystemRootToken",), "secret": True, "required_since": (2, 0, 0)},
    "controller_url": {"cluster": ("Services", "Controller", "ExternalURL"), "required_since": (2, 0, 0)},
    "internal_urls": {
        "cluster": ("Services", "DispatchSLURM", "InternalURLs"),
        "cluster_since": (2, 5, 0),
        "required_since": (2, 5, 0),
    },
    "postgresql_connection": {"cluster": ("PostgreSQL", "Connection"), "secret": True, "required_since": (2, 5, 0)},
    "sbatch_environment": {"cluster": ("Containers", "SLURM", "SbatchEnvironmentVariables")},
    "sbatch_gpu_arguments": {"cluster": ("Containers", "SLURM", "SbatchGPUArgumentsList"), "cluster_since": (3, 2, 0)},
    "runtime_engine": {"cluster": ("Containers", "RuntimeEngine"), "cluster_since": (2, 3, 0)},
}
# What Arvados reads each key as (the types in tests/data/arvados_config/), checked on the
# controller so that a bad value is named before anything is written.
DURATION = re.compile(r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h))+)$")
BYTE_SIZE = re.compile(r"^[0-9]+(\.[0-9]+)?\s*([KMGTPE]i?B?|B)?$", re.IGNORECASE)
LEGACY_KINDS: Dict[KeyPath, str] = {
    ("Client", "APIHost"): "text",
    ("Client", "AuthToken"): "text",
    ("Client", "Insecure"): "bool",
    ("Client", "KeepServiceURIs"): "list",
    ("SbatchArguments",): "list",
    ("PollPeriod",): "duration",
    ("CrunchRunCommand",): "list",
    ("MinRetryPeriod",): "duration",
    ("PrioritySpread",): "count",
    ("ReserveExtraRAM",): "count",
    ("BatchSize",): "count",
}
CLUSTER_KINDS: Dict[KeyPath, str] = {
    ("SystemRootToken",): "text",
    ("Services", "Controller", "ExternalURL"): "text",
    ("Services", "DispatchSLURM", "InternalURLs"): "mapping",
    ("PostgreSQL", "Connection"): "mapping",
    ("TLS", "Insecure"): "bool",
    ("Containers", "CrunchRunCommand"): "text",
    ("Containers", "CrunchRunArgumentsList"): "list",
    ("Containers", "MinRetryPeriod"): "duration",
    ("Containers", "ReserveExtraRAM"): "bytesize",
    ("Containers", "RuntimeEngine"): "text",
    ("Containers", "CloudVMs", "PollInterval"): "duration",
    ("Containers", "SLURM", "PrioritySpread"): "count",
    ("Containers", "SLURM", "SbatchArgumentsList"): "list",
    ("Containers", "SLURM", "SbatchGPUArgumentsList"): "list",
    ("Containers", "SLURM", "SbatchEnvironmentVariables"): "mapping",
}
KIND_PROBLEMS = {
    "text": "must be a non-empty string",
    "bool": "must be true or false",
    "list": "must be a list of strings",
    "duration": "must be a duration such as '10s' or '1m30s'",
    "count": "must be a whole number, 0 or more",
    "bytesize": "must be a number of bytes or a size such as '550MiB'",
    "mapping": "must be a mapping",
}


def _fits(kind: str, value: object) -> bool:
    if kind == "text":
        return isinstance(value, str) and bool(value.strip())
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "list":
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if kind == "duration":
        return isinstance(value, str) and bool(DURATION.match(value.strip()))
    if kind == "count":
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0
    if kind == "bytesize":
        return _fits("count", value) or (isinstance(value, str) and bool(BYTE_SIZE.match(value.strip())))
    return isinstance(value, dict)


def type_problems(document: Mapping[str, Any], kinds: Mapping[KeyPath, str]) -> List[str]:
    """'<key>: must be ...' for each key of the document Arvados would not read as its type."""
    problems = []
    for path, kind in sorted(kinds.items()):
        value = _get_path(document, path)
        if value is not None and not _fits(kind, value):
            problems.append("%s: %s" % (".".join(path), KIND_PROBLEMS[kind]))
    return problems


def _refuse_types(document: Mapping[str, Any], kinds: Mapping[KeyPath, str], where: str) -> None:
    problems = type_problems(document, kinds)
    if problems:
        raise ConfigError("%s: %s" % (where, "; ".join(problems)))


# The legacy file cannot work without them (the role never falls back on the
# dispatcher's deprecated ARVADOS_API_* environment).
LEGACY_REQUIRED = ("api_host", "auth_token")


def known_release(text: object) -> Release:
    """(major, minor, patch) of a release this role knows, such as '3.2', '2.7.4' or a
    package's '2.7.4-1'."""
    release = parse_release(
        text,
        "dispatcher_config_arvados_version is %r: give the Arvados release the host runs, "
        "such as '1.4', '2.7.4' or '3.2'",
    )
    if release < OLDEST_KNOWN or release[:2] > NEWEST_KNOWN:
        raise ConfigError(
            "dispatcher_config_arvados_version is %r: this role knows Arvados 1.1 to %d.%d "
            "(a 2017 dispatcher older than 1.1 reads the keys of 1.1: say '1.1')"
            % (text, NEWEST_KNOWN[0], NEWEST_KNOWN[1])
        )
    return release


def release_format(release: Release) -> str:
    """'legacy' (the dispatcher's own file, 1.x) or 'cluster' (config.yml, 2.0 and later)."""
    return "legacy" if release < (2, 0, 0) else "cluster"


def release_text(release: Release) -> str:
    return "%d.%d.%d" % release


def default_sbatch_arguments(release: Release) -> List[str]:
    """The release's own SbatchArgumentsList default (empty before 3.2: extras only)."""
    return list(SBATCH_TEMPLATE_DEFAULT) if release >= SBATCH_TEMPLATE_SINCE else []


def instance_type_template(release: Release) -> List[str]:
    """The release's template placing containers as 1.2.0 to 3.1.2 did with instance types:
    the instance type constraint where --mem, --cpus-per-task and --tmp were."""
    template = []
    for argument in default_sbatch_arguments(release):
        if argument in INSTANCE_TYPE_REPLACES:
            if INSTANCE_TYPE_CONSTRAINT not in template:
                template.append(INSTANCE_TYPE_CONSTRAINT)
        else:
            template.append(argument)
    return template


def sbatch_arguments(release: Release, extras: Iterable[str], by_instance_type: bool = False) -> List[str]:
    """The list to write for the operator's extra arguments: from 3.2 the release's
    template first (the operator's arguments after it win in sbatch), before 3.2 the
    extras alone (the dispatcher appends its own). by_instance_type: the template that
    places containers by instance type (3.2 and later)."""
    base = instance_type_template(release) if by_instance_type else default_sbatch_arguments(release)
    return base + [argument for argument in extras if argument not in base]


def _instance_type_constraint(release: Release, value: object) -> bool:
    """Whether to write the instance type template; refused where it does not apply."""
    if value is None or value is False:
        return False
    if not isinstance(value, bool):
        raise ConfigError("dispatcher_config_%s is %r: it must be true or false" % (INSTANCE_TYPE_SETTING, value))
    if release < SBATCH_TEMPLATE_SINCE:
        raise ConfigError(
            "dispatcher_config_%s is set, but Arvados %s's dispatcher places containers by instance "
            "type itself: with Clusters.<id>.InstanceTypes configured it sends "
            "--constraint=instancetype=<type> (in place of --mem, --cpus-per-task and --tmp from 1.2.0; "
            "from 1.1.4). Only from 3.2.0, where SbatchArgumentsList is the whole template, must the "
            "template say so: unset it here" % (INSTANCE_TYPE_SETTING, release_text(release))
        )
    return True


def instance_type_problem(release: Release, arguments: Iterable[str], instance_types: object) -> Optional[str]:
    """Why the instance type constraint in these arguments would not place containers, or None.

    From 3.2 %I is empty without InstanceTypes (3.2.1 crunch-dispatch-slurm_test.go,
    TestSbatchInstanceTypeConstraint: "--constraint=instancetype="), a feature no node
    offers: sbatch refuses every container. A --constraint after it replaces it (sbatch
    keeps the last one).
    """
    if release < SBATCH_TEMPLATE_SINCE:
        return None
    arguments = list(arguments)
    placing = [index for index, argument in enumerate(arguments) if "instancetype=%I" in argument]
    if not placing:
        return None
    if not instance_types:
        return (
            "Containers.SLURM.SbatchArgumentsList has %s but Clusters.<id>.InstanceTypes is empty: "
            "%%I would be empty and sbatch would refuse every container (no node offers the "
            "feature 'instancetype=')" % arguments[placing[-1]]
        )
    replacing = [arg for arg in arguments[placing[-1] + 1 :] if arg.startswith(("--constraint", "-C"))]
    if replacing:
        return (
            "Containers.SLURM.SbatchArgumentsList sets a constraint again after %s (%s): sbatch keeps "
            "the last one and containers would lose their instance type"
            % (arguments[placing[-1]], ", ".join(replacing))
        )
    return None


def instance_type_warnings(release: Release, arguments: Iterable[str], instance_types: object) -> List[str]:
    """What an operator must hear though nothing is refused: from 3.2, InstanceTypes
    configured and a template without %I, so containers are placed by --mem/--cpus/--tmp
    alone and no longer on a node of their instance type, as they were up to 3.1."""
    if release < SBATCH_TEMPLATE_SINCE or not instance_types or any("%I" in arg for arg in arguments):
        return []
    return [
        "Clusters.<id>.InstanceTypes is configured but Containers.SLURM.SbatchArgumentsList has no %%I: "
        "on Arvados %s the dispatcher no longer adds --constraint=instancetype=<type> itself (it did up to "
        "3.1), so containers may land on nodes of another type or stay pending; set "
        "dispatcher_config_%s: true to place them by instance type as before"
        % (release_text(release), INSTANCE_TYPE_SETTING)
    ]


def job_name_problem(release: Release, arguments: Iterable[str]) -> Optional[str]:
    """Why Slurm jobs would not be named after the container with these arguments, or None.

    Before 3.2 the dispatcher appends ``--job-name=<uuid>`` after them, so nothing the
    operator writes can unname a job. From 3.2 the list is the whole template: it must
    hold ``--job-name=%U`` and nothing after it may name the job otherwise (sbatch keeps
    the last one).
    """
    if release < SBATCH_TEMPLATE_SINCE:
        return None
    arguments = list(arguments)
    if JOB_NAME not in arguments:
        return (
            "Containers.SLURM.SbatchArgumentsList has no %s: on Arvados %s the list is the whole "
            "sbatch template and the dispatcher would lose every container it submits"
            % (JOB_NAME, release_text(release))
        )
    after = arguments[len(arguments) - arguments[::-1].index(JOB_NAME) :]
    renames = [arg for arg in after if arg.startswith(("--job-name", "-J"))]
    if renames:
        return (
            "Containers.SLURM.SbatchArgumentsList names the job again after %s (%s): sbatch keeps "
            "the last name and the dispatcher would lose the container" % (JOB_NAME, ", ".join(renames))
        )
    return None


# Other users get no access to a file that holds secrets; its owner and group keep theirs.
# Arvados' services read config.yml as root (arvados-controller, crunch-dispatch-slurm: no
# User= in cmd/arvados-server/*.service at 3.2.1) or through its group: 3.2.1
# build/rails-package-scripts/postinst.sh installs the API server's config files
# 0640 root:www-data (nginx on RHEL) and gives arvados-railsapi.service
# SupplementaryGroups=www-data, and doc/install/config.html.textile.liquid creates
# config.yml under umask 027 and chgrps it to the web server's user.
OTHERS_ACCESS = 0o007
FILE_MODE = re.compile(r"^0?[0-7]{3,4}$")


def private_mode(mode: object) -> str:
    """The mode of a file with secrets: its own mode (as stat gives it, '0644') without any
    access for other users ('0640')."""
    text = str(mode).strip()
    if not FILE_MODE.match(text):
        raise ConfigError("the file mode %r is not an octal mode such as '0644'" % (mode,))
    return "%04o" % (int(text, 8) & ~OTHERS_ACCESS)


def _not_for_release(name: str, release: Release, where: str) -> NoReturn:
    raise ConfigError(
        "dispatcher_config_%s is set, but Arvados %s has no such setting (%s)" % (name, release_text(release), where)
    )


def legacy_document(
    release: Release, settings: Mapping[str, Any], extra_settings: Optional[Mapping[str, Any]] = None
) -> Dict[str, Any]:
    """The dispatcher's own file for a 1.x release: only the keys that release reads."""
    settings = dict(settings)
    _instance_type_constraint(release, settings.pop(INSTANCE_TYPE_SETTING, None))
    document: Dict[str, Any] = {"Client": {}}
    for name in LEGACY_REQUIRED:
        if not settings.get(name):
            raise ConfigError(
                "dispatcher_config_%s is required on Arvados %s (Client.%s of the dispatcher's file)"
                % (name, release_text(release), SETTINGS[name]["legacy"][-1])
            )
    for name, value in settings.items():
        if _is_unset(value) or name == "crunch_run_arguments":
            continue
        spec = SETTINGS[name]
        if "legacy" not in spec:
            _not_for_release(name, release, "it belongs in /etc/arvados/config.yml from 2.0 on")
        if release < spec.get("legacy_since", OLDEST_KNOWN):
            came = "%s came in %s" % (".".join(spec["legacy"]), release_text(spec["legacy_since"]))
            _not_for_release(name, release, came)
        if name == "crunch_run_command":
            value = [value] + list(settings.get("crunch_run_arguments") or [])
        _set_path(document, spec["legacy"], value)
    if settings.get("crunch_run_arguments") and not settings.get("crunch_run_command"):
        _set_path(document, ("CrunchRunCommand",), ["crunch-run"] + list(settings["crunch_run_arguments"]))
    document = _merge(document, extra_settings or {})
    _refuse_types(document, LEGACY_KINDS, "the dispatcher's file")
    return document


def _is_unset(value: object) -> bool:
    return value is None or value == [] or value == {} or value == ""


def cluster_settings(
    release: Release, settings: Mapping[str, Any], extra_settings: Optional[Mapping[str, Any]] = None
) -> Dict[KeyPath, Any]:
    """{key path under Clusters.<id>: value} to set for a 2.0-or-later release."""
    settings = dict(settings)
    by_instance_type = _instance_type_constraint(release, settings.pop(INSTANCE_TYPE_SETTING, None))
    if by_instance_type and _is_unset(settings.get("sbatch_arguments")):
        # The release's default lacks the constraint: the template is written even without extras.
        wanted: Dict[KeyPath, Any] = {SETTINGS["sbatch_arguments"]["cluster"]: sbatch_arguments(release, [], True)}
    else:
        wanted = {}
    for name, value in settings.items():
        if _is_unset(value):
            continue
        spec = SETTINGS[name]
        if "cluster" not in spec:
            _not_for_release(name, release, "it is a key of the 1.x dispatcher's own file")
        if release < spec.get("cluster_since", (2, 0, 0)):
            came = "%s came in %s" % (".".join(spec["cluster"]), release_text(spec["cluster_since"]))
            _not_for_release(name, release, came)
        if name == "sbatch_arguments":
            value = sbatch_arguments(release, value, by_instance_type)
        elif name == "internal_urls":
            value = {url: {} for url in value} if isinstance(value, list) else value
        wanted[spec["cluster"]] = value
    for path, value in _leaves(extra_settings or {}, ("Containers",)):
        wanted[path] = value
    return wanted


def secret_paths() -> Set[KeyPath]:
    return {spec["cluster"] for spec in SETTINGS.values() if spec.get("secret") and "cluster" in spec}


# Keys an operator may pass through extra settings that hold a secret (Arvados'
# Containers.DispatchPrivateKey, a token or password of a future key): hidden by their name.
SECRET_KEY_NAME = re.compile(r"(?i)(token|privatekey|password|secret)")


def is_secret(path: KeyPath, secrets: Set[KeyPath]) -> bool:
    return path in secrets or any(SECRET_KEY_NAME.search(str(part)) for part in path)


def required_problems(release: Release, cluster: Mapping[str, Any]) -> List[str]:
    """The keys this release's dispatcher cannot start without, missing from the result."""
    missing = []
    for name, spec in SETTINGS.items():
        since = spec.get("required_since")
        if since and release >= since and _is_unset(_get_path(cluster, spec["cluster"])):
            missing.append("%s (dispatcher_config_%s)" % (".".join(spec["cluster"]), name))
    return missing


def _leaves(mapping: Mapping[str, Any], prefix: KeyPath) -> Iterator[Tuple[KeyPath, Any]]:
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> Dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _get_path(mapping: Any, path: KeyPath) -> Any:
    for key in path:
        if not isinstance(mapping, dict) or key not in mapping:
            return None
        mapping = mapping[key]
    return mapping


def _set_path(
    mapping: MutableMapping[str, Any],
    path: KeyPath,
    value: Any,
    new_mapping: Callable[[], MutableMapping[str, Any]] = dict,
) -> None:
    for key in path[:-1]:
        if not isinstance(mapping.get(key), dict):
            mapping[key] = new_mapping()
        mapping = mapping[key]
    mapping[path[-1]] = value


def plain(value: Any) -> Any:
    """Plain dicts, lists, str, bool, int and float: out of ruamel's round-trip types and
    the tagged subclasses a caller may hand in, which a YAML dumper cannot represent."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    for kind in (str, bool, int, float):
        if isinstance(value, kind):
            return kind(value)
    return value


def shown(path: KeyPath, value: Any, secrets: Set[KeyPath]) -> Any:
    return HIDDEN if value is not None and is_secret(path, secrets) else value


def _round_trip_yaml() -> Callable[..., RoundTripParser]:
    try:
        from ruamel.yaml import YAML  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ConfigError(
            "editing config.yml needs ruamel.yaml on the Ansible controller (pip install ruamel.yaml)"
        ) from None
    return YAML


# (mapping, sequence, offset) indentations tried until one gives the file back unchanged.
LAYOUTS = ((2, 4, 2), (2, 2, 0), (4, 4, 0), (4, 6, 2), (2, 3, 1), (3, 3, 0), (4, 4, 2))


def _loader_for(text: str) -> Tuple[RoundTripParser, Any]:
    """A round-trip parser set to the file's own indentation, and the parsed file."""
    yaml_class = _round_trip_yaml()
    for mapping, sequence, offset in LAYOUTS:
        parser = yaml_class(typ="rt")
        parser.preserve_quotes = True
        parser.width = 1 << 16
        parser.indent(mapping=mapping, sequence=sequence, offset=offset)
        document = parser.load(text)
        if _dump(parser, document) == text:
            return parser, document
    raise ConfigError(
        "config.yml cannot be rewritten without changing lines this role does not own (mixed "
        "indentation, or a layout the round-trip parser does not keep); make its indentation "
        "uniform, or set the dispatcher's keys by hand"
    )


def _dump(parser: RoundTripParser, document: Any) -> str:
    stream = io.StringIO()
    parser.dump(document, stream)
    return stream.getvalue()


def merge_cluster_text(
    text: Optional[str], cluster_id: Optional[str], release: Release, wanted: Mapping[KeyPath, Any]
) -> Tuple[Optional[str], str, Dict[str, Any], Dict[str, Any], List[str]]:
    """Sets the wanted keys of Clusters.<cluster_id> in config.yml's text.

    Returns (new_text, cluster_id, before, after, warnings): before/after map each of the
    dispatcher's key paths to its old/new value, secrets hidden, for a diff that shows only
    them; warnings, what the operator must hear though nothing is refused.
    When nothing changes the text is returned as it was, untouched by the parser.
    Raises ConfigError for a result the dispatcher could not run with.
    """
    preamble = ""
    if text is not None:
        match = PREAMBLE.match(text)
        preamble = match.group(0) if match else ""
    body = None if text is None else text[len(preamble) :]
    if body is not None and body.strip():
        parser, document = _loader_for(body)
    else:
        parser, document = _loader_for("{}\n")
        document = None
    if document is None:
        from ruamel.yaml.comments import CommentedMap  # pylint: disable=import-outside-toplevel

        document = CommentedMap()
    if not isinstance(document, dict) or not isinstance(document.get("Clusters", {}), dict):
        raise ConfigError("config.yml must be a mapping with a Clusters mapping")
    clusters = document.setdefault("Clusters", type(document)())
    if clusters is None:
        clusters = document["Clusters"] = type(document)()
    cluster_id = cluster_id or _only_cluster(clusters)
    if not re.match(r"^[a-z0-9]{5}$", cluster_id or ""):
        raise ConfigError(
            "dispatcher_config_cluster_id is %r: it must be the cluster's five-character id (a-z, 0-9)" % (cluster_id,)
        )
    cluster = clusters.get(cluster_id)
    if cluster is None:
        cluster = clusters[cluster_id] = type(document)()
    secrets = secret_paths()
    before: Dict[str, Any] = {}
    after: Dict[str, Any] = {}
    changed = False
    for path, value in sorted(wanted.items()):
        current = plain(_get_path(cluster, path))
        key = ".".join(path)
        before[key] = shown(path, current, secrets)
        after[key] = shown(path, value, secrets)
        if current != value:
            _set_path(cluster, path, _styled_like(_get_path(cluster, path), value), new_mapping=type(document))
            changed = True
    result = plain(cluster)
    _refuse_types(result, CLUSTER_KINDS, "Clusters.%s" % cluster_id)
    sbatch_list = _effective_sbatch_list(release, result)
    instance_types = result.get("InstanceTypes")
    problem = job_name_problem(release, sbatch_list) or instance_type_problem(release, sbatch_list, instance_types)
    if problem:
        raise ConfigError("refusing to write %s: %s" % ("config.yml", problem.replace("<id>", cluster_id)))
    missing = required_problems(release, result)
    if missing:
        raise ConfigError(
            "Arvados %s's dispatcher cannot start without %s, set neither in the role's variables nor in "
            "Clusters.%s of config.yml" % (release_text(release), ", ".join(missing), cluster_id)
        )
    new_text = preamble + _dump(parser, document) if changed else text
    warnings = [
        text.replace("<id>", cluster_id) for text in instance_type_warnings(release, sbatch_list, instance_types)
    ]
    return new_text, cluster_id, before, after, warnings


def _styled_like(current: Any, value: Any) -> Any:
    """A new list written in the style of the one it replaces: a flow list
    (``[a, b]``) stays on its line, as Arvados' own config.default.yml writes them."""
    style = getattr(current, "fa", None)
    if isinstance(value, list) and style is not None and style.flow_style():
        from ruamel.yaml.comments import CommentedSeq  # pylint: disable=import-outside-toplevel

        styled = CommentedSeq(value)
        styled.fa.set_flow_style()
        return styled
    return value


def _effective_sbatch_list(release: Release, cluster: Mapping[str, Any]) -> List[str]:
    configured = _get_path(cluster, SETTINGS["sbatch_arguments"]["cluster"])
    return default_sbatch_arguments(release) if configured is None else configured


def _only_cluster(clusters: Mapping[str, Any]) -> str:
    if len(clusters) == 1:
        return next(iter(clusters))
    raise ConfigError(
        "dispatcher_config_cluster_id is not set and config.yml defines %d clusters: "
        "name the one this dispatcher serves" % len(clusters)
    )
