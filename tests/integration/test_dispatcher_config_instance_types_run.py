"""dispatcher_config_instance_type_constraint in real runs of the role on an operator's
config.yml in a temporary directory: on 3.2 the instance type template is written (check
mode first writes nothing), a second run changes nothing; instance types without %I are
warned about; before 3.2 the setting is refused before anything is written.
Rules: 2.7.4 services/crunch-dispatch-slurm/crunch-dispatch-slurm.go (the constraint in
place of --mem/--cpus-per-task/--tmp), 3.2.1 the same file (%I), 3.2.1
doc/admin/upgrading.html.textile.liquid."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.unit.roles.playbook_runs import DISPATCHER_PLAY, dispatcher_variables, run

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes config.yml as root")

CONFIG = (
    "# The operator's own.\nClusters:\n  zzzzz:\n    InstanceTypes:\n"
    "      a1.medium: {ProviderType: a1.medium, Price: 0.08, RAM: 512MiB, VCPUs: 4}\n"
)
TEMPLATE = ["--job-name=%U", "--constraint=instancetype=%I", "--partition=%P", "--exclusive"]
TAGS = ("--tags", "dispatcher_config_settings")


def sbatch_list(config):
    return yaml.safe_load(config.read_text())["Clusters"]["zzzzz"].get("Containers", {}).get("SLURM", {})


def test_on_3_2_the_instance_type_template_is_written_once(collections, tmp_path):
    config = tmp_path / "config.yml"
    config.write_text(CONFIG)
    config.chmod(0o600)
    variables = dict(
        dispatcher_variables(tmp_path, "3.2"),
        dispatcher_config_instance_type_constraint=True,
        dispatcher_config_sbatch_arguments=["--exclusive"],
    )
    predicted, changed = run(collections, tmp_path, DISPATCHER_PLAY, variables, "--check", "--diff", *TAGS)
    assert changed > 0 and config.read_text() == CONFIG
    assert "--constraint=instancetype=%I" in predicted and "WARNING" not in predicted

    run(collections, tmp_path, DISPATCHER_PLAY, variables, *TAGS)
    assert sbatch_list(config)["SbatchArgumentsList"] == TEMPLATE
    assert config.read_text().startswith(CONFIG.split("\n", maxsplit=1)[0])
    assert run(collections, tmp_path, DISPATCHER_PLAY, variables, *TAGS)[1] == 0


def test_on_3_2_instance_types_without_percent_i_are_warned_about(collections, tmp_path):
    config = tmp_path / "config.yml"
    config.write_text(CONFIG)
    config.chmod(0o600)
    done = run(collections, tmp_path, DISPATCHER_PLAY, dispatcher_variables(tmp_path, "3.2"), *TAGS)[0]
    assert "WARNING: dispatcher_config: Clusters.zzzzz.InstanceTypes is configured" in done
    assert "dispatcher_config_instance_type_constraint: true" in done
    assert "SbatchArgumentsList" not in sbatch_list(config)


@pytest.mark.parametrize("release, config_text", [("2.7.4", CONFIG), ("3.2", "Clusters:\n  zzzzz: {}\n")])
def test_where_it_does_not_apply_it_is_refused_and_nothing_is_written(collections, tmp_path, release, config_text):
    config = tmp_path / "config.yml"
    config.write_text(config_text)
    config.chmod(0o600)
    variables = dict(dispatcher_variables(tmp_path, release), dispatcher_config_instance_type_constraint=True)
    failed = run(collections, tmp_path, DISPATCHER_PLAY, variables, *TAGS, succeeds=False)[0]
    reason = "places containers by instance type itself" if release == "2.7.4" else "InstanceTypes is empty"
    assert reason in failed
    assert config.read_text() == config_text
    assert "secret-root-token" not in failed


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_config_yml_that_is_no_regular_file_is_refused_saying_what_it_is(collections, tmp_path, kind):
    """A symlinked config.yml (issue 34) was refused as "not a regular file" without a word
    of the link: the message names the target to give instead; nothing is written."""
    real = tmp_path / "real" / "config.yml"
    real.parent.mkdir()
    real.write_text(CONFIG)
    real.chmod(0o600)
    config = tmp_path / "config.yml"
    if kind == "symlink":
        config.symlink_to(real)
    else:
        os.mkfifo(config)
    failed = run(collections, tmp_path, DISPATCHER_PLAY, dispatcher_variables(tmp_path, "3.2"), *TAGS, succeeds=False)[
        0
    ]
    if kind == "symlink":
        expected = (
            "dispatcher_config: %s is a symlink to %s, not a regular file: writing config.yml would replace the "
            "link with a file; set dispatcher_config_cluster_file to %s to edit the file it points at"
            % (config, real, real)
        )
        assert config.is_symlink() and real.read_text() == CONFIG
    else:
        expected = "dispatcher_config: %s is a FIFO, not a regular file." % config
    assert expected in " ".join(failed.split())
