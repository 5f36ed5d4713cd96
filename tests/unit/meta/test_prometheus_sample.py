"""The sample .prom file shipped beside the alert rules: what the watch wrote on the lab's
1M-job benchmark data (bench/README.md), kept in step with the gauges the code writes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.arvados_ops.recovery.plugins.module_utils._common.version import COLLECTION_VERSION
from ansible_collections.arvados_ops.recovery.plugins.module_utils._reconcile import watch_metrics
from ansible_collections.arvados_ops.recovery.plugins.module_utils._slurm.nodes import NODE_REASONS, NODE_STATES

REPO_ROOT = Path(__file__).resolve().parents[3]
SAMPLE = REPO_ROOT / "prometheus" / "arvados_recovery.sample.prom"
REGENERATE = (
    "the gauges changed: write the sample anew with "
    "`.venv/bin/python -m bench.reconcile_bench --watch --keep-prom prometheus/arvados_recovery.sample.prom`"
)
# Every value a label may take (watch_metrics): bounded sets, never a UUID or a job id.
LABEL_VALUES = {
    "kind": set(watch_metrics.KIND_LABELS),
    "state": set(watch_metrics.SLURM_STATE_CLASSES)
    | {state for _kind, state in watch_metrics.ORPHAN_STATES}
    | set(NODE_STATES),
    "reason": set(NODE_REASONS),
}
BUILD_INFO = watch_metrics.PREFIX + "build_info"


def families():
    return list(text_string_to_metric_families(SAMPLE.read_text(encoding="utf-8")))


def test_prometheus_parser_reads_the_sample_as_gauges():
    parsed = families()
    assert parsed, "no metric family in %s" % SAMPLE
    assert {family.type for family in parsed} == {"gauge"}


def test_promtool_accepts_the_sample_as_prometheus_would_scrape_it():
    # Debian's prometheus package (scripts/install-deps.sh) brings promtool.
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=SAMPLE.read_text(encoding="utf-8"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


def test_every_label_value_of_the_sample_is_from_a_bounded_set():
    unbounded = [
        (sample.name, label, value)
        for family in families()
        for sample in family.samples
        for label, value in sample.labels.items()
        if value not in LABEL_VALUES.get(label, ()) and sample.name != BUILD_INFO
    ]
    assert unbounded == []


def test_the_build_info_names_one_collection_version_and_one_python():
    # Its labels take one value per installed watch: bounded, though not by a list here.
    (info,) = [sample for family in families() for sample in family.samples if sample.name == BUILD_INFO]
    assert info.labels["version"] == COLLECTION_VERSION
    assert re.fullmatch(r"3\.\d+\.\d+", info.labels["python_version"])
    assert info.value == 1


def test_the_sample_has_the_families_and_labels_the_code_writes():
    written = watch_metrics.reconcile_metrics({}, 1.0, 0.0, dispatcher_active=True, nodes=[])
    written += watch_metrics.status_metrics(False, 0.0)
    expected = {watch_metrics.PREFIX + metric.name: set(metric.labels) for metric in written}
    in_sample = {family.name: {label for sample in family.samples for label in sample.labels} for family in families()}
    assert sorted(in_sample) == sorted(expected), REGENERATE
    # A family without samples (an unknown answer, such as the dispatcher's unit where
    # systemd does not run) has its HELP and TYPE lines alone: no labels to compare.
    with_samples = [name for name, labels in in_sample.items() if labels]
    assert {name: in_sample[name] for name in with_samples} == {name: expected[name] for name in with_samples}
