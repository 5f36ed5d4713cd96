"""The examples stage's reading of the docs (tests/examples/doc_examples.py), on fixture docs,
and the docs' tables of the test stages against scripts/run-tests.sh, their one source."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.examples import doc_examples
from tests.examples.doc_examples import REPO_ROOT

FIXTURE_DOC = """# A doc

<!-- example: skip: needs a registry -->
```yaml
version: 3
```

<!-- example: skip 2: stops the lab -->
<!-- example: expect 1: /^hello$/ -->
```sh
echo hello   # prints hello
make lab-stop
```

```console
$ echo one \\
    two
one two
$ true
```

- name: a task list
```yaml
- name: Look
  ansible.builtin.debug:
    msg: hi
```
"""


def write(tmp_path: Path, text: str, name: str = "DOC.md") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_blocks_markers_and_kinds(tmp_path):
    collected = doc_examples.extract(write(tmp_path, FIXTURE_DOC), tmp_path)
    assert collected.problems == []
    skip, shell, console, tasks = collected.blocks
    assert (skip.line, skip.markers.skip, skip.kind) == (4, "needs a registry", None)
    assert shell.commands() == ["echo hello   # prints hello", "make lab-stop"]
    assert shell.markers.skip_commands == {2: "stops the lab"}
    assert shell.markers.expects == [doc_examples.Expect("/^hello$/", 1)]
    assert console.commands() == ["echo one \\\n    two", "true"]
    assert tasks.kind == "tasks"


@pytest.mark.parametrize(
    "doc, problem",
    [
        ("```text\nsome output\n```\n", "DOC.md:1: a ```text block, which the examples stage cannot run"),
        ("```\nplain\n```\n", "DOC.md:1: a block without a language"),
        ("```yaml\nrecover_db:\n  db_host: x\n```\n", "DOC.md:1: a YAML block that is neither plays nor tasks"),
        ("<!-- example: skip: why -->\n\nprose\n\n```sh\ntrue\n```\n", "DOC.md:1: example marker(s) not followed"),
        ("<!-- example: skipp: why -->\n```sh\ntrue\n```\n", "unknown marker 'skipp: why'"),
        ("<!-- example: expect 2: x -->\n```sh\ntrue\n```\n", "a marker names command 2, and the block has 1"),
        ("<!-- example: skip 1: x -->\n```sh\ntrue\n```\n", "every command is skipped"),
        ("<!-- example: check -->\n```sh\ntrue\n```\n", "`check` is for plays and tasks"),
        ("<!-- example: skip:\n  why -->\n```sh\ntrue\n```\n", "an example marker must be one line"),
    ],
)
def test_what_the_stage_refuses(tmp_path, doc, problem):
    problems = doc_examples.extract(write(tmp_path, doc), tmp_path).problems
    assert any(problem in line for line in problems), problems


def run_stage(files, *selection):
    """The examples stage itself (pytest on tests/examples) over these docs."""
    env = dict(os.environ, DOC_EXAMPLES_FILES=":".join(str(path) for path in files))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/examples", *selection],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_an_unmarked_block_fails_the_stage(tmp_path):
    doc = write(tmp_path, "# New\n\n<!-- example: skip: fine -->\n```yaml\na: 1\n```\n\n```ini\n[x]\n```\n")
    completed = run_stage([doc], "-k", "every_block or ini or DOC")
    assert completed.returncode == 1, completed.stdout
    assert "DOC.md:8: a ```ini block, which the examples stage cannot run" in completed.stdout


def test_skipped_blocks_are_counted_with_their_reason(tmp_path):
    doc = write(tmp_path, "# New\n\n<!-- example: skip: needs systemd as PID 1 -->\n```sh\nsystemctl start x\n```\n")
    completed = run_stage([doc])
    assert completed.returncode == 0, completed.stdout
    assert "1 passed, 2 skipped" in completed.stdout  # this doc's block, and the lab's self-test
    assert "DOC.md:4: needs systemd as PID 1" in completed.stdout
    assert "skipped: 1" in completed.stdout


def test_the_docs_blocks_are_all_runnable_or_marked():
    """The stage's first test, here too: an unmarked block fails `make unit` already."""
    collected = doc_examples.collect(doc_examples.doc_files())
    assert collected.problems == []
    assert {block.path for block in collected.blocks} >= {"README.md", "playbooks/README.md"}


def test_claims_regex_and_text():
    assert doc_examples.Expect("/changed=0 /", 1).holds("localhost : ok=3 changed=0 unreachable=0")
    assert not doc_examples.Expect("/changed=0 /", 1).holds("localhost : ok=3 changed=10 unreachable=0")
    assert doc_examples.Expect("0.1.0 (x)").holds("cmd 0.1.0 (x)\n")


def test_substitutions_are_declared_and_reported():
    values = {"scratch": "/S", "lab_config": "/L"}
    command, applied = doc_examples.substitute(
        "arvados-fail-jobs --options-file /etc/arvados/fail-jobs.yml --before reboot", values
    )
    assert command == "/S/bin/arvados-fail-jobs --options-file /S/etc/fail-jobs.yml --before reboot"
    assert len(applied) == 2
    assert doc_examples.substitute("ansible-playbook -i inventory.yml x", values) == (
        "ansible-playbook -i playbooks/inventory/lab.yml x",
        ["your inventory -> the lab's"],
    )
    assert doc_examples.substitute("squeue", values) == ("squeue", [])


def test_a_script_reports_each_command_and_stops_at_the_first_failure():
    script = doc_examples.command_script(
        ["echo a", "echo skipped", "export X=b; echo $X", "false", "echo never"], {2: "x"}
    )
    output = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False).stdout
    assert doc_examples.exit_statuses(output) == {1: 0, 3: 0, 4: 1}
    pieces = doc_examples.output_of_commands(output, 5)
    assert pieces[1].strip() == "a" and pieces[3].strip() == "b"
    assert "never" not in output


FIXTURE_PAGE = """.. _ansible_collections.arvados_ops.recovery.docsite.page:

A page
======

.. example: skip 2: stops the lab
.. example: expect 1: /^hello$/

.. code-block:: sh

   echo hello   # prints hello

   make lab-stop

1. An item.

   .. example: check

   .. code-block:: yaml
      :caption: a play

      - name: A play
        hosts: localhost
        tasks: []

   Its text goes on.

.. code-block:: text

   not runnable
"""


def test_an_rst_pages_code_blocks_and_their_comment_markers(tmp_path):
    collected = doc_examples.extract(write(tmp_path, FIXTURE_PAGE, "page.rst"), tmp_path)
    shell, play, text = collected.blocks
    assert (shell.line, shell.kind, shell.commands()) == (
        9,
        "commands",
        ["echo hello   # prints hello", "make lab-stop"],
    )
    assert shell.markers.skip_commands == {2: "stops the lab"}
    assert shell.markers.expects == [doc_examples.Expect("/^hello$/", 1)]
    # Indented in a list item, with an option: the body dedented, the item's text left out.
    assert (play.kind, play.markers.check) == ("play", True)
    assert play.text == "- name: A play\n  hosts: localhost\n  tasks: []\n"
    assert collected.problems == [
        "page.rst:28: a ```text block, which the examples stage cannot run: "
        "mark it <!-- example: skip: REASON --> (CONTRIBUTING.md, The docs' examples)"
    ]


def test_an_rst_marker_with_no_code_block_after_it_is_a_problem(tmp_path):
    page = ".. example: skip: why\n\nA paragraph.\n"
    collected = doc_examples.extract(write(tmp_path, page, "page.rst"), tmp_path)
    assert collected.problems == ["page.rst:1: example marker(s) not followed by a code-block"]


def test_the_guide_pages_are_among_the_docs_the_stage_reads():
    files = doc_examples.doc_files()
    assert (REPO_ROOT / "docs" / "docsite" / "rst" / "guide_after_reboot.rst") in files


# ------------------------------------------------------------ the stage tables


def run_tests_stages(name: str) -> list[str]:
    text = (REPO_ROOT / "scripts" / "run-tests.sh").read_text()
    return re.search(r"^%s=\(([^)]*)\)" % name, text, re.M).group(1).split()


MAKE_TARGET = {"build": "build-check"}


def table_column(path: Path, header: str) -> list[str]:
    """The first column's code spans of the Markdown table whose header row starts so."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    cells = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells.append(line.split("|")[1].strip())
    return cells


def test_readme_stage_table_is_run_tests_stages():
    commands = table_column(REPO_ROOT / "README.md", "| command | what it runs |")
    assert sorted(commands) == sorted("`make %s`" % MAKE_TARGET.get(s, s) for s in run_tests_stages("ALL_STAGES"))


def test_contributing_stage_table_is_run_tests_stages():
    stages = [cell.split(" ")[0] for cell in table_column(REPO_ROOT / "CONTRIBUTING.md", "| Stage | Command |")]
    assert sorted(stages) == sorted(run_tests_stages("ALL_STAGES") + run_tests_stages("NAMED_STAGES"))


def test_makefile_has_a_target_and_help_for_every_stage():
    makefile = (REPO_ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY:((?:.*\\\n)*.*)", makefile, re.M).group(1).replace("\\\n", " ").split()
    helped = re.search(r'@echo "make (unit \|[^"]*)"', makefile).group(1).replace("|", " ").split()
    for stage in run_tests_stages("ALL_STAGES"):
        target = MAKE_TARGET.get(stage, stage)
        assert target in phony, target
        assert target in helped, target
