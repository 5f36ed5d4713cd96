"""The shipped alert rules, checked and unit-tested by Prometheus' own promtool; their texts
name what to run by its fully qualified name."""

import re
import subprocess
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
RULES = REPO_ROOT / "prometheus" / "arvados_recovery_rules.yml"
RULE_TESTS = REPO_ROOT / "tests" / "prometheus" / "arvados_recovery_rules_test.yml"


def promtool(*arguments, cwd=REPO_ROOT):
    # Debian's prometheus package (scripts/install-deps.sh) brings promtool.
    return subprocess.run(["promtool", *arguments], cwd=cwd, capture_output=True, text=True, check=False)


def test_the_rules_load_as_prometheus_would_load_them():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 9 rules found" in checked.stdout


def test_each_alert_fires_when_it_should_and_only_then():
    tested = promtool("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_alert_of_the_rules_has_a_test():
    alerts = [
        line.split(":", 1)[1].strip() for line in RULES.read_text().splitlines() if line.strip().startswith("- alert:")
    ]
    tested = RULE_TESTS.read_text()
    assert [alert for alert in alerts if "alertname: %s\n" % alert not in tested] == []


def test_the_alert_texts_name_the_collections_playbooks_modules_and_roles_by_fqcn():
    names = [path.stem for path in (REPO_ROOT / "playbooks").glob("*.yml")]
    names += [path.stem for path in (REPO_ROOT / "plugins" / "modules").glob("*.py")]
    names += [path.name for path in (REPO_ROOT / "roles").iterdir() if path.is_dir()]
    bare = re.compile(r"(?<![\w.])(%s)\b" % "|".join(sorted(names)))
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    texts = {rule["alert"]: " ".join(rule["annotations"].values()) for rule in rules}
    assert {alert: bare.findall(text) for alert, text in texts.items() if bare.search(text)} == {}
    # The ones they name are there, under the collection's name.
    named = {name for text in texts.values() for name in re.findall(r"arvados_ops\.recovery\.(\w+)", text)}
    assert named and named <= set(names)
