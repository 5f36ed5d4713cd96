"""dispatcher_config writes, for each Arvados release, only keys that release reads, with
the types it reads them as: held against the keys and types read from Arvados' own source
at the tags (tests/data/arvados_config/<tag>.json, made by extract.py there)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.errors import ConfigError
from ansible_collections.arvados_ops.recovery.plugins.module_utils._dispatcher import config as dc

# The code runs on the controller (the dispatcher_config role's filter), which has
# ruamel.yaml; the versions stage's managed-host Pythons (3.8) need not.
pytest.importorskip("ruamel.yaml", reason="the controller's ruamel.yaml edits config.yml")

DATA = Path(__file__).resolve().parents[4] / "data" / "arvados_config"
SCHEMAS = {path.stem: json.loads(path.read_text()) for path in sorted(DATA.glob("*.json"))}
REQUIRED_TAGS = {"1.4.3", "2.7.4", "3.1.2", "3.2.1"}
DURATION = re.compile(r"^(0|([0-9]+(\.[0-9]*)?(ns|us|ms|s|m|h))+)$")
OPERATOR_FILE = (DATA / "operator-config.yml").read_text()

UNSET = {name: None for name in dc.SETTINGS}


def every_setting(release):
    """Every setting the role has, each set to a value, for the ones this release has."""
    values = {
        "api_host": "zzzzz.example.org:443",
        "auth_token": "dispatcher-token",
        "insecure": True,
        "keep_service_uris": ["http://keep0:25107"],
        "sbatch_arguments": ["--partition=compute"],
        "poll_period": "1m30s",
        "crunch_run_command": "/usr/bin/crunch-run",
        "crunch_run_arguments": ["-cgroup-parent-subsystem=cpu"],
        "min_retry_period": "30s",
        "priority_spread": 10,
        "reserve_extra_ram": 268435456,
        "batch_size": 100,
        "system_root_token": "root-token",
        "controller_url": "https://zzzzz.example.org",
        "internal_urls": ["http://localhost:9006"],
        "postgresql_connection": {"host": "db", "user": "arvados", "password": "pw", "dbname": "arvados"},
        "sbatch_environment": {"SLURM_CONF": "/etc/slurm/slurm.conf"},
        "sbatch_gpu_arguments": ["--gpus=%G"],
        "runtime_engine": "singularity",
    }
    kept = {}
    for name, value in values.items():
        spec = dc.SETTINGS[name]
        key = dc.release_format(release)
        since = spec.get(key + "_since", (0, 0, 0))
        kept[name] = value if key in spec and release >= since else None
    return kept


def flat(mapping, prefix=()):
    for key, value in mapping.items():
        if (
            isinstance(value, dict)
            and value
            and key not in ("InternalURLs", "Connection", "SbatchEnvironmentVariables")
        ):
            yield from flat(value, prefix + (key,))
        else:
            yield ".".join(prefix + (key,)), value


def fits(kind, value):
    if kind == "duration":
        return isinstance(value, str) and DURATION.match(value)
    if kind == "bytesize":
        return isinstance(value, int) or isinstance(value, str)
    if kind == "list":
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if kind == "map":
        return isinstance(value, dict)
    return type(value).__name__ == kind


def written_keys(tag):
    release = dc.known_release(tag)
    if dc.release_format(release) == "legacy":
        return dict(flat(dc.legacy_document(release, every_setting(release))))
    wanted = dc.cluster_settings(release, every_setting(release))
    text = dc.merge_cluster_text(None, "zzzzz", release, wanted)[0]
    return dict(flat(yaml.safe_load(text)["Clusters"]["zzzzz"]))


def test_the_schemas_cover_the_releases_the_role_claims():
    assert REQUIRED_TAGS <= set(SCHEMAS)
    for tag, schema in SCHEMAS.items():
        assert schema["tag"] == tag
        assert schema["format"] == dc.release_format(dc.known_release(tag))


@pytest.mark.parametrize("tag", sorted(SCHEMAS))
def test_every_key_written_exists_in_that_release_with_its_type(tag):
    schema = SCHEMAS[tag]["keys"]
    written = written_keys(tag)
    assert written
    for key, value in written.items():
        assert key in schema, "%s: Arvados %s has no %s" % (tag, tag, key)
        assert fits(schema[key], value), "%s: %s is %r, Arvados reads a %s" % (tag, key, value, schema[key])


@pytest.mark.parametrize("tag", sorted(SCHEMAS))
def test_the_release_default_of_sbatch_arguments_is_the_one_the_role_keeps(tag):
    if SCHEMAS[tag]["format"] == "cluster":
        assert dc.default_sbatch_arguments(dc.known_release(tag)) == SCHEMAS[tag]["sbatch_arguments_default"]


@pytest.mark.parametrize("tag", [tag for tag in sorted(SCHEMAS) if tag >= "3.2"])
def test_on_3_2_extra_arguments_come_after_the_release_template_which_names_the_job(tag):
    written = written_keys(tag)["Containers.SLURM.SbatchArgumentsList"]
    assert written[:5] == SCHEMAS[tag]["sbatch_arguments_default"]
    assert "--job-name=%U" in written
    assert written[-1] == "--partition=compute"


@pytest.mark.parametrize("tag", [tag for tag in sorted(SCHEMAS) if "2." < tag < "3.2"])
def test_before_3_2_the_extra_arguments_are_written_alone(tag):
    assert written_keys(tag)["Containers.SLURM.SbatchArgumentsList"] == ["--partition=compute"]


def required_only(release):
    return dict(
        UNSET,
        system_root_token="t",
        controller_url="https://c",
        internal_urls=["http://localhost:9006"],
        postgresql_connection={"host": "db"},
    )


def test_on_3_2_with_the_defaults_the_sbatch_list_is_not_written_and_the_release_default_names_the_job():
    release = dc.known_release("3.2.1")
    wanted = dc.cluster_settings(release, required_only(release))
    assert ("Containers", "SLURM", "SbatchArgumentsList") not in wanted
    text = dc.merge_cluster_text(None, "zzzzz", release, wanted)[0]
    assert "SbatchArgumentsList" not in text


@pytest.mark.parametrize(
    "arguments", [["--mem=%M"], [], ["--job-name=%U", "--job-name=other"], ["--job-name=%U", "-Jx"]]
)
def test_on_3_2_a_result_whose_jobs_would_be_unnamed_is_refused(arguments):
    release = dc.known_release("3.2")
    text = "Clusters:\n  zzzzz:\n    Containers:\n      SLURM:\n        SbatchArgumentsList: %s\n" % json.dumps(
        arguments
    )
    with pytest.raises(ConfigError, match="SbatchArgumentsList"):
        dc.merge_cluster_text(text, "zzzzz", release, dc.cluster_settings(release, required_only(release)))


def test_on_3_2_extra_arguments_that_rename_the_job_are_refused():
    release = dc.known_release("3.2.0")
    wanted = dc.cluster_settings(release, dict(required_only(release), sbatch_arguments=["--job-name=mine"]))
    with pytest.raises(ConfigError, match="names the job again"):
        dc.merge_cluster_text(None, "zzzzz", release, wanted)


def test_before_3_2_the_dispatcher_names_the_job_itself_so_any_list_is_accepted():
    release = dc.known_release("3.1.2")
    text = "Clusters:\n  zzzzz:\n    Containers:\n      SLURM:\n        SbatchArgumentsList: [--mem=100]\n"
    dc.merge_cluster_text(text, "zzzzz", release, dc.cluster_settings(release, required_only(release)))


@pytest.mark.parametrize(
    "tag, name, value",
    [
        ("1.1.0", "priority_spread", 1),
        ("1.1.4", "batch_size", 10),
        ("1.4.3", "system_root_token", "t"),
        ("2.4.4", "internal_urls", ["http://localhost:9006"]),
        ("3.1.2", "sbatch_gpu_arguments", ["--gpus=%G"]),
        ("2.2.0", "runtime_engine", "docker"),
        ("3.2.1", "api_host", "h:443"),
        ("2.7.4", "batch_size", 5),
    ],
)
def test_a_setting_the_release_does_not_have_is_refused_naming_it(tag, name, value):
    release = dc.known_release(tag)
    legacy = dc.release_format(release) == "legacy"
    settings = dict(UNSET, **({"api_host": "h", "auth_token": "t"} if legacy else {}))
    settings[name] = value
    with pytest.raises(ConfigError, match="dispatcher_config_%s" % name):
        if legacy:
            dc.legacy_document(release, settings)
        else:
            dc.cluster_settings(release, settings)


@pytest.mark.parametrize(
    "tag, missing",
    [
        ("2.0.0", ["SystemRootToken", "Services.Controller.ExternalURL"]),
        # The last release before the advisory lock and InternalURLs became required.
        ("2.4.4", ["SystemRootToken", "Services.Controller.ExternalURL"]),
        (
            "2.5.0",
            [
                "SystemRootToken",
                "Services.Controller.ExternalURL",
                "Services.DispatchSLURM.InternalURLs",
                "PostgreSQL.Connection",
            ],
        ),
        (
            "2.7.4",
            [
                "SystemRootToken",
                "Services.Controller.ExternalURL",
                "Services.DispatchSLURM.InternalURLs",
                "PostgreSQL.Connection",
            ],
        ),
    ],
)
def test_a_required_key_set_nowhere_is_named(tag, missing):
    release = dc.known_release(tag)
    with pytest.raises(ConfigError) as error:
        dc.merge_cluster_text("Clusters: {zzzzz: {}}\n", "zzzzz", release, dc.cluster_settings(release, UNSET))
    for key in missing:
        assert key in str(error.value)
    assert ("DispatchSLURM" in str(error.value)) == (release >= (2, 5, 0))
    assert ("PostgreSQL.Connection" in str(error.value)) == (release >= (2, 5, 0))


def test_required_keys_already_in_config_yml_need_no_variable():
    release = dc.known_release("3.2.1")
    text = dc.merge_cluster_text(OPERATOR_FILE, "zzzzz", release, dc.cluster_settings(release, UNSET))[0]
    assert text is OPERATOR_FILE


def test_the_legacy_file_for_1_4_has_only_the_keys_set():
    release = dc.known_release("1.4")
    document = dc.legacy_document(release, dict(UNSET, api_host="h:443", auth_token="t", sbatch_arguments=[]))
    assert document == {"Client": {"APIHost": "h:443", "AuthToken": "t"}}


@pytest.mark.parametrize("text", ["", "1.0", "0.1.20171102", "3.3", "4.0.0", "two"])
def test_a_release_the_role_does_not_know_is_refused(text):
    with pytest.raises(ConfigError, match="dispatcher_config_arvados_version"):
        dc.known_release(text)


def test_a_package_version_gives_the_release():
    assert dc.known_release("2.7.4-1") == (2, 7, 4)
    assert dc.known_release("3.2") == (3, 2, 0)


def test_config_yml_changes_only_on_the_dispatchers_lines_byte_for_byte():
    release = dc.known_release("3.2.1")
    settings = dict(
        UNSET,
        sbatch_arguments=["--partition=compute"],
        poll_period="30s",
        insecure=False,
        system_root_token="operator-root-token",
    )
    text, cluster_id, before, after, warnings = dc.merge_cluster_text(
        OPERATOR_FILE, "zzzzz", release, dc.cluster_settings(release, settings)
    )
    expected = OPERATOR_FILE.replace(
        "          SLURM_CONF: /etc/slurm/slurm.conf\n",
        "          SLURM_CONF: /etc/slurm/slurm.conf\n"
        "        SbatchArgumentsList:\n"
        "          - --job-name=%U\n          - --mem=%M\n          - --cpus-per-task=%C\n          - --tmp=%T\n"
        "          - --partition=%P\n          - --partition=compute\n",
    ).replace(
        "        PollInterval: 1m\n  yyyyy:", "        PollInterval: 30s\n    TLS:\n      Insecure: false\n  yyyyy:"
    )
    assert cluster_id == "zzzzz"
    assert warnings == []
    assert text == expected
    assert before["SystemRootToken"] == after["SystemRootToken"] == dc.HIDDEN
    assert after["Containers.CloudVMs.PollInterval"] == "30s"
    again = dc.merge_cluster_text(text, "zzzzz", release, dc.cluster_settings(release, settings))[0]
    assert again is text


def test_a_flow_list_is_replaced_by_a_flow_list():
    release = dc.known_release("3.2.1")
    text = (
        "Clusters:\n  zzzzz:\n    SystemRootToken: t\n    Services: {Controller: {ExternalURL: 'https://c'}, "
        "DispatchSLURM: {InternalURLs: {'http://x:9006': {}}}}\n    PostgreSQL: {Connection: {host: db}}\n"
        '    Containers:\n      SLURM:\n        SbatchArgumentsList: ["--job-name=%U"]\n'
    )
    wanted = dc.cluster_settings(release, dict(UNSET, sbatch_arguments=["--exclusive"]))
    new_text = dc.merge_cluster_text(text, "zzzzz", release, wanted)[0]
    assert new_text.splitlines()[-1].strip().startswith("SbatchArgumentsList: [")
    assert new_text.splitlines()[:-1] == text.splitlines()[:-1]


def test_no_secret_is_shown_in_the_keys_before_and_after():
    release = dc.known_release("2.7.4")
    settings = dict(
        UNSET,
        system_root_token="new-root",
        postgresql_connection={"host": "db", "password": "pw"},
        controller_url="https://c",
        internal_urls=["http://localhost:9006"],
    )
    before, after = dc.merge_cluster_text(OPERATOR_FILE, "zzzzz", release, dc.cluster_settings(release, settings))[2:4]
    shown = json.dumps([before, after])
    for secret in ("new-root", "operator-root-token", "pw", "secret"):
        assert secret not in shown


def test_a_secret_passed_as_an_extra_setting_is_hidden_by_its_name():
    release = dc.known_release("3.2.1")
    extra = {"DispatchPrivateKey": "-----BEGIN OPENSSH PRIVATE KEY-----xyz", "SLURM": {"PrioritySpread": 7}}
    wanted = dc.cluster_settings(release, dict(UNSET, system_root_token="new-root"), extra)
    before, after = dc.merge_cluster_text(OPERATOR_FILE, "zzzzz", release, wanted)[2:4]
    assert after["Containers.DispatchPrivateKey"] == dc.HIDDEN
    assert after["Containers.SLURM.PrioritySpread"] == 7
    assert "PRIVATE KEY" not in json.dumps([before, after])


def test_several_clusters_need_the_cluster_id():
    release = dc.known_release("3.2.1")
    with pytest.raises(ConfigError, match="defines 2 clusters"):
        dc.merge_cluster_text(OPERATOR_FILE, "", release, dc.cluster_settings(release, dict(UNSET, poll_period="5s")))


@pytest.mark.parametrize(
    "extra, named",
    [
        ({"CloudVMs": {"PollInterval": 10}}, "Containers.CloudVMs.PollInterval: must be a duration"),
        ({"MinRetryPeriod": "soon"}, "Containers.MinRetryPeriod: must be a duration"),
        ({"ReserveExtraRAM": "lots"}, "Containers.ReserveExtraRAM: must be a number of bytes"),
        ({"SLURM": {"PrioritySpread": -1}}, "Containers.SLURM.PrioritySpread: must be a whole number"),
    ],
)
def test_a_value_arvados_would_not_read_is_refused_naming_its_key(extra, named):
    release = dc.known_release("3.2.1")
    with pytest.raises(ConfigError, match=re.escape(named)):
        dc.merge_cluster_text(OPERATOR_FILE, "zzzzz", release, dc.cluster_settings(release, UNSET, extra))


def test_a_bad_value_in_the_1_x_file_is_refused_naming_its_key():
    with pytest.raises(ConfigError, match="PollPeriod: must be a duration"):
        dc.legacy_document(
            dc.known_release("1.4"), dict(UNSET, api_host="h", auth_token="t"), {"PollPeriod": "10 parsecs"}
        )


# Instance types. Facts from crunch-dispatch-slurm.go at each tag (extract.py:
# instance_type_placement, sbatch_substitutions): 1.2.0 to 3.1.2 send
# --constraint=instancetype=<type> in place of --mem/--cpus-per-task/--tmp; from 3.2.0 only
# a template with %I does (3.2.1 doc/admin/upgrading.html.textile.liquid).
INSTANCE_TYPES = "    InstanceTypes:\n      a1.medium: {Price: 0.08, RAM: 512MiB, VCPUs: 4}\n"
WITH_INSTANCE_TYPES = OPERATOR_FILE.replace(
    "    Containers:\n      # Keep", INSTANCE_TYPES + "    Containers:\n      # Keep"
)
TEMPLATE_TAGS = [tag for tag in sorted(SCHEMAS) if SCHEMAS[tag]["instance_type_placement"] == "template"]


def test_up_to_3_1_the_dispatcher_placed_by_instance_type_in_place_of_mem_cpus_and_tmp():
    assert TEMPLATE_TAGS == ["3.2.0", "3.2.1"]
    placements = {tag: SCHEMAS[tag]["instance_type_placement"] for tag in SCHEMAS}
    assert placements["1.1.0"] == "none" and placements["1.1.4"] == "adds"
    assert {placements[tag] for tag in ("1.2.0", "1.4.3", "2.0.0", "2.7.4", "3.1.2")} == {"replaces"}


@pytest.mark.parametrize("tag", TEMPLATE_TAGS)
def test_from_3_2_the_instance_type_template_is_the_release_default_with_the_constraint_for_mem_cpus_and_tmp(tag):
    release = dc.known_release(tag)
    default = SCHEMAS[tag]["sbatch_arguments_default"]
    settings = dict(required_only(release), instance_type_constraint=True, sbatch_arguments=["--exclusive"])
    text = dc.merge_cluster_text(WITH_INSTANCE_TYPES, "zzzzz", release, dc.cluster_settings(release, settings))[0]
    written = yaml.safe_load(text)["Clusters"]["zzzzz"]["Containers"]["SLURM"]["SbatchArgumentsList"]
    replaced = [argument for argument in default if argument.split("=")[0] in ("--mem", "--cpus-per-task", "--tmp")]
    assert replaced == ["--mem=%M", "--cpus-per-task=%C", "--tmp=%T"]
    assert written == ["--job-name=%U", "--constraint=instancetype=%I", "--partition=%P", "--exclusive"]
    assert [argument for argument in default if argument not in replaced] == [
        argument for argument in written if "instancetype" not in argument and argument != "--exclusive"
    ]
    # Every substitution the template uses is one the release's dispatcher knows.
    used = set(re.findall(r"%.", " ".join(written)))
    assert used <= set(SCHEMAS[tag]["sbatch_substitutions"]) and "%I" in used
    # The key the role reads the instance types from is that release's.
    assert SCHEMAS[tag]["keys"]["InstanceTypes"] == "map"


def test_the_instance_type_template_is_written_without_extra_arguments_and_stays_as_written():
    release = dc.known_release("3.2.1")
    wanted = dc.cluster_settings(release, dict(UNSET, instance_type_constraint=True))
    text, _changes, before, after, warnings = dc.merge_cluster_text(WITH_INSTANCE_TYPES, "zzzzz", release, wanted)
    assert after["Containers.SLURM.SbatchArgumentsList"] == [
        "--job-name=%U",
        "--constraint=instancetype=%I",
        "--partition=%P",
    ]
    assert before["Containers.SLURM.SbatchArgumentsList"] is None
    assert warnings == []
    assert dc.merge_cluster_text(text, "zzzzz", release, wanted)[0] is text


@pytest.mark.parametrize("tag", [tag for tag in sorted(SCHEMAS) if tag not in TEMPLATE_TAGS])
def test_before_3_2_the_setting_is_refused_since_the_dispatcher_places_by_instance_type_itself(tag):
    release = dc.known_release(tag)
    legacy = dc.release_format(release) == "legacy"
    settings = dict(UNSET, instance_type_constraint=True, **({"api_host": "h", "auth_token": "t"} if legacy else {}))
    with pytest.raises(ConfigError, match="dispatcher_config_instance_type_constraint is set.*places containers"):
        if legacy:
            dc.legacy_document(release, settings)
        else:
            dc.cluster_settings(release, settings)
    unset = dict(settings, instance_type_constraint=False)
    if legacy:
        assert "SbatchArguments" not in dc.legacy_document(release, unset)
    else:
        assert dc.cluster_settings(release, unset) == {}


def test_the_template_with_an_empty_instance_type_is_refused():
    release = dc.known_release("3.2.1")
    wanted = dc.cluster_settings(release, dict(UNSET, instance_type_constraint=True))
    with pytest.raises(ConfigError, match="Clusters.zzzzz.InstanceTypes is empty"):
        dc.merge_cluster_text(OPERATOR_FILE, "zzzzz", release, wanted)
    # The same for an operator's own list.
    own = OPERATOR_FILE.replace(
        "          SLURM_CONF: /etc/slurm/slurm.conf\n",
        '          SLURM_CONF: /etc/slurm/slurm.conf\n        SbatchArgumentsList: ["--job-name=%U", '
        '"--constraint=instancetype=%I"]\n',
    )
    with pytest.raises(ConfigError, match="InstanceTypes is empty"):
        dc.merge_cluster_text(own, "zzzzz", release, dc.cluster_settings(release, UNSET))


@pytest.mark.parametrize("extra", [["--constraint=gpu"], ["-Cbig"]])
def test_a_constraint_after_the_instance_types_one_is_refused(extra):
    release = dc.known_release("3.2.1")
    wanted = dc.cluster_settings(release, dict(UNSET, instance_type_constraint=True, sbatch_arguments=extra))
    with pytest.raises(ConfigError, match="sets a constraint again"):
        dc.merge_cluster_text(WITH_INSTANCE_TYPES, "zzzzz", release, wanted)


def test_instance_types_without_percent_i_on_3_2_are_warned_about_not_refused():
    release = dc.known_release("3.2.1")
    text, _changes, _before, _after, warnings = dc.merge_cluster_text(
        WITH_INSTANCE_TYPES, "zzzzz", release, dc.cluster_settings(release, UNSET)
    )
    assert text is WITH_INSTANCE_TYPES
    assert len(warnings) == 1
    assert "Clusters.zzzzz.InstanceTypes" in warnings[0] and "dispatcher_config_instance_type_constraint" in warnings[0]
    # Before 3.2 the dispatcher does it itself: nothing to say.
    older = dc.known_release("3.1.2")
    assert dc.merge_cluster_text(WITH_INSTANCE_TYPES, "zzzzz", older, dc.cluster_settings(older, UNSET))[4] == []


def test_the_setting_must_be_a_boolean():
    with pytest.raises(ConfigError, match="must be true or false"):
        dc.cluster_settings(dc.known_release("3.2.1"), dict(UNSET, instance_type_constraint="yes"))
