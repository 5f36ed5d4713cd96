#!/usr/bin/env python3
"""The watch's gauges as Prometheus would have scraped them through a compute node's
reboot, replayed through the collection's alert rules by `promtool test rules`.

    alert_replay.py --instance HOST BEFORE.prom REBOOTED.prom RECOVERED.prom

The three files are what arvados-recovery-watch wrote on the Slurm controller before
compute1's reboot, after Slurm ended its jobs, and after recover_after_node_reboot.yml.
Each is read by prometheus_client's parser (a file it rejects fails here, as node_exporter
would refuse it). promtool gets every series of the three, one sample a minute: the first
reading at 0m, the second for the next 15 minutes, the third for 10 more; it must find
ArvadosOrphans pending, not firing, at 5m, firing at 14m for the jobs the reboot orphaned
(its summary and description as the rules file renders them), and gone at 25m.

Prints JSON: the orphaned jobs each reading counted, and promtool's output; exits with
promtool's status. Run with the project virtualenv's Python (prometheus_client, PyYAML).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[3]
RULES = REPO_ROOT / "prometheus" / "arvados_recovery_rules.yml"
ALERT = "ArvadosOrphans"
# Minutes each reading stands for: the reboot's reading long enough for the rule's `for:`.
REBOOTED_MINUTES = 15
RECOVERED_MINUTES = 10
TEMPLATE = re.compile(r"\{\{ *\$(value|labels\.([a-z_]+)) *\}\}")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(name, sorted labels): value} of a textfile-collector file."""
    read = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            read[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return read


def series_selector(name: str, labels: tuple[tuple[str, str], ...], instance: str) -> str:
    pairs = sorted((*labels, ("instance", instance)))
    return "%s{%s}" % (name, ", ".join('%s="%s"' % (key, value.replace('"', '\\"')) for key, value in pairs))


def input_series(readings: list[dict], instance: str) -> list[dict]:
    """Each series of any reading over the replay's minutes; a reading without it is a gap
    (`_`), as a scrape that did not find the series."""
    keys = sorted(set().union(*readings))
    series = []
    for key in keys:
        before, rebooted, recovered = (reading.get(key) for reading in readings)
        values = [value_text(before), "%sx%d" % (value_text(rebooted), REBOOTED_MINUTES - 1)]
        values.append("%sx%d" % (value_text(recovered), RECOVERED_MINUTES - 1))
        series.append({"series": series_selector(key[0], key[1], instance), "values": " ".join(values)})
    return series


def value_text(value) -> str:
    if value is None:
        return "_"
    return repr(int(value)) if float(value).is_integer() else repr(value)


def orphaned_jobs(reading: dict) -> float:
    return sum(
        value
        for (name, labels), value in reading.items()
        if name == "arvados_recovery_orphans" and ("kind", "job") in labels
    )


def rendered_annotations(rule: dict, labels: dict[str, str], value: float) -> dict[str, str]:
    """The rule's annotations with $value and $labels.X filled in, as Prometheus renders
    them for these labels (nothing else of Go's templates is used in the rules file)."""

    def fill(match: re.Match) -> str:
        return value_text(value) if match.group(1) == "value" else labels[match.group(2)]

    rendered = {}
    for key, text in rule.get("annotations", {}).items():
        rendered[key] = TEMPLATE.sub(fill, text)
        if "{{" in rendered[key]:
            raise SystemExit("alert_replay: %s's %s has a template this script cannot fill" % (ALERT, key))
    return rendered


def rule_named(name: str) -> dict:
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return rule
    raise SystemExit("alert_replay: %s has no alert %s" % (RULES, name))


def promtool_test(readings: list[dict], instance: str) -> dict:
    rule = rule_named(ALERT)
    labels = {"instance": instance, "kind": "job", **rule.get("labels", {})}
    orphaned = orphaned_jobs(readings[1])
    firing = {"exp_labels": labels, "exp_annotations": rendered_annotations(rule, labels, orphaned)}
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "the gauges of a compute node's reboot, scraped in the cluster scenario",
                "interval": "1m",
                "input_series": input_series(readings, instance),
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": ALERT, "exp_alerts": []},
                    {"eval_time": "14m", "alertname": ALERT, "exp_alerts": [firing]},
                    {"eval_time": "%dm" % (REBOOTED_MINUTES + RECOVERED_MINUTES), "alertname": ALERT, "exp_alerts": []},
                ],
            }
        ],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance", required=True, help="the instance label Prometheus would give the host")
    parser.add_argument("readings", nargs=3, type=Path, metavar="FILE.prom")
    args = parser.parse_args(argv)
    readings = [samples(path.read_text()) for path in args.readings]
    with tempfile.TemporaryDirectory(prefix="alert-replay-") as directory:
        test_file = Path(directory) / "replay_test.yml"
        test_file.write_text(yaml.safe_dump(promtool_test(readings, args.instance), sort_keys=False))
        tested = subprocess.run(
            ["promtool", "test", "rules", test_file.name], cwd=directory, capture_output=True, text=True, check=False
        )
    print(
        json.dumps(
            {
                "orphaned_jobs": [orphaned_jobs(reading) for reading in readings],
                "promtool_rc": tested.returncode,
                "promtool": tested.stdout + tested.stderr,
            }
        )
    )
    return tested.returncode


if __name__ == "__main__":
    sys.exit(main())
