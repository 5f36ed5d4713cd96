"""The examples stage's closing report: how many blocks ran, with substitutions, skipped."""

from __future__ import annotations

from tests.examples import doc_examples


def pytest_terminal_summary(terminalreporter):
    ran = doc_examples.TALLY
    if any(ran.values()):
        terminalreporter.write_sep("=", "the docs' examples")
        blocks = len(ran["run"]) + len(ran["substituted"]) + len(ran["skipped"])
        files = len({where.split(":")[0] for where in ran["run"] + ran["substituted"] + [s[0] for s in ran["skipped"]]})
        terminalreporter.write_line(doc_examples.tally_report(blocks, files))
