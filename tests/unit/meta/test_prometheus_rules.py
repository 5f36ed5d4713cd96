"""The shipped alert rules, checked and unit-tested by Prometheus' own promtool."""

import subprocess
from pathlib import Path

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
