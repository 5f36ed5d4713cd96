"""The examples stage: every fenced example of the user-facing docs, run on the lab.

Each block is run as written, or through the declared substitutions of doc_examples.py
(each printed where it applies), on a lab seeded as `make demo` seeds it (a cluster whose
API server just rebooted), and fails on a non-zero exit or an `expect` marker its output
contradicts. Blocks marked `skip` are skipped with their reason; a block neither runnable
nor marked fails `test_every_block_is_run_or_marked`. The docs read are DOC_GLOBS, or the
files in $DOC_EXAMPLES_FILES (colon-separated; the unit tests point it at fixture docs).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from lab import labctl
from tests.examples import doc_examples
from tests.examples.doc_examples import REPO_ROOT

PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
EXAMPLE_TIMEOUT = 900
TALLY = doc_examples.TALLY


def _files() -> list[Path]:
    given = os.environ.get("DOC_EXAMPLES_FILES")
    if given:
        return [Path(name).resolve() for name in given.split(":") if name]
    return doc_examples.doc_files()


COLLECTED = doc_examples.collect(_files())


def test_every_block_is_run_or_marked():
    """A block the stage cannot run must say why in a marker; markers must mean something."""
    assert not COLLECTED.problems, "\n".join(COLLECTED.problems)


@pytest.fixture(scope="session")
def lab() -> labctl.LabSettings:
    settings = labctl.lab_settings()
    down = {name: status for name, status in labctl.service_status(settings).items() if not status.startswith("up")}
    if down:
        pytest.fail("the lab in %s is not up (%s): lab/labctl.py start" % (settings.lab_dir, down), pytrace=False)
    return settings


@pytest.fixture(scope="session")
def scratch(tmp_path_factory, lab: labctl.LabSettings) -> Path:
    """bin/ with the commands as the lab runs them, etc/ with their options files, var/lib/."""
    root = tmp_path_factory.mktemp("examples")
    lab_config = lab.lab_dir / "arvados" / "config.yml"
    (root / "bin").mkdir()
    for name, module in (("arvados-fail-jobs", "_cleanup.cli"), ("arvados-recovery-watch", "_reconcile.watch_cli")):
        shim = root / "bin" / name
        # The checkout's command (README: "From a checkout"); the lab's config.yml where a
        # host has /etc/arvados/config.yml. A flag or options file given still wins.
        shim.write_text(
            '#!/bin/sh\ncd %s || exit 1\nexec %s -m plugins.module_utils.%s --config-file %s "$@"\n'
            % (REPO_ROOT, PYTHON, module, lab_config)
        )
        shim.chmod(0o755)
    (root / "etc").mkdir(mode=0o700)
    for name in ("fail-jobs.yml", "recovery-watch.yml"):
        options = root / "etc" / name
        options.write_text(yaml.safe_dump({"config_file": str(lab_config)}))
        options.chmod(0o600)
    (root / "fresh-etc").mkdir()
    for directory in ("prometheus/node-exporter", "arvados-recovery-watch"):
        (root / "var" / "lib" / directory).mkdir(parents=True)
    return root


@pytest.fixture(scope="session")
def example_env(lab: labctl.LabSettings, scratch: Path) -> dict[str, str]:
    """The environment of a user's shell on the lab host: the lab's Slurm is this host's
    (SLURM_CONF for /etc/slurm/slurm.conf); PG* are not set (the lab's block sets them)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PG", "SLURM_", "LAB_"))}
    env.update({key: value for key, value in lab.exports().items() if key.startswith("LAB_")})
    env["SLURM_CONF"] = lab.exports()["SLURM_CONF"]
    env["PATH"] = "%s:%s:%s" % (scratch / "bin", REPO_ROOT / ".venv" / "bin", env.get("PATH", "/usr/bin:/bin"))
    env["LC_ALL"] = "C.UTF-8"  # ansible-core refuses another locale
    env["TZ"] = "UTC"  # the lab's jobs and the examples' times are UTC
    env["ANSIBLE_LOCALHOST_WARNING"] = "false"
    return env


@pytest.fixture
def seeded(lab: labctl.LabSettings, example_env: dict[str, str]):
    """A cluster whose API server just rebooted, as `make demo` seeds it; the Slurm jobs
    that appeared during the example are cancelled after it, by id."""
    env = dict(example_env, **lab.exports())
    before = set(_queue(env))
    subprocess.run(
        [str(PYTHON), "-m", "lab.demo", "seed-rebooted"],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    yield
    leftovers = [job for job in _queue(env) if job not in before]
    if leftovers:
        subprocess.run(["scancel", *leftovers], env=env, check=False)


def _queue(env: dict[str, str]) -> list[str]:
    result = subprocess.run(
        ["squeue", "--noheader", "--format=%i"], env=env, capture_output=True, text=True, check=False
    )
    return result.stdout.split()


def _values(scratch: Path, lab: labctl.LabSettings) -> dict[str, str]:
    return {"scratch": str(scratch), "lab_config": str(lab.lab_dir / "arvados" / "config.yml")}


def _block_id(block: doc_examples.Block) -> str:
    return block.where


@pytest.mark.parametrize("block", COLLECTED.blocks, ids=_block_id)
def test_example(block: doc_examples.Block, request: pytest.FixtureRequest) -> None:
    if block.markers.skip is not None:
        TALLY["skipped"].append((block.where, block.markers.skip))
        pytest.skip("%s: %s" % (block.where, block.markers.skip))
    if block.kind is None:
        pytest.fail("%s: neither runnable nor marked (see test_every_block_is_run_or_marked)" % block.where)
    request.getfixturevalue("seeded")
    scratch = request.getfixturevalue("scratch")
    lab = request.getfixturevalue("lab")
    env = request.getfixturevalue("example_env")
    if block.kind == "commands":
        output, pieces, applied = _run_commands(block, scratch, lab, env)
    else:
        output, applied = _run_play(block, scratch, lab, env)
        pieces = {}
    TALLY["substituted" if applied else "run"].append(block.where)
    print("%s: substitutions: %s" % (block.where, "; ".join(applied) or "none"))
    for expect in block.markers.expects:
        text = pieces.get(expect.command, "") if expect.command else output
        assert expect.holds(text), "%s: the prose claims %s; it printed:\n%s" % (
            block.where,
            expect.describe(),
            text[-6000:],
        )


def _run_in_checkout(argv, env) -> subprocess.CompletedProcess:
    """An example's command run as a user runs it in the checkout: no input, its output and
    errors as one text, within EXAMPLE_TIMEOUT."""
    return subprocess.run(
        argv,
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=EXAMPLE_TIMEOUT,
        check=False,
    )


def _run_commands(block, scratch, lab, env):
    commands = block.commands()
    ran = []
    applied: list[str] = []
    for number, command in enumerate(commands, 1):
        if number in block.markers.skip_commands:
            TALLY["skipped_commands"].append(("%s #%d" % (block.where, number), block.markers.skip_commands[number]))
            print("%s command %d skipped: %s" % (block.where, number, block.markers.skip_commands[number]))
        new, names = doc_examples.substitute(command, _values(scratch, lab))
        applied.extend(name for name in names if name not in applied)
        ran.append(new)
    script = doc_examples.command_script(ran, block.markers.skip_commands)
    print("%s runs:\n%s" % (block.where, script))
    completed = _run_in_checkout(["bash", "-c", script], env)
    output = completed.stdout
    statuses = doc_examples.exit_statuses(output)
    failed = {number: status for number, status in statuses.items() if status != 0}
    assert completed.returncode == 0 and not failed, "%s: command %s exited %s:\n%s" % (
        block.where,
        ", ".join(map(str, failed)) or "?",
        ", ".join(map(str, failed.values())) or completed.returncode,
        output[-6000:],
    )
    return output, doc_examples.output_of_commands(output, len(commands)), applied


def _run_play(block, scratch, lab, env):
    data = yaml.safe_load(block.text)
    applied = [doc_examples.PLAY_SUBSTITUTIONS[0]]
    if block.kind == "tasks":
        data = doc_examples.wrap_tasks(data)
        applied.append(doc_examples.PLAY_SUBSTITUTIONS[1])
        for play in data:
            play["module_defaults"] = {
                "group/arvados_ops.recovery.database": {"config_file": _values(scratch, lab)["lab_config"]}
            }
    extra = {}
    for name in doc_examples.vault_names(block.text):
        extra[name] = lab.db_password() if name == "vault_arvados_db_password" else "example-" + name
    if extra:
        applied.append(doc_examples.PLAY_SUBSTITUTIONS[2])
    roles = [role for play in data for role in play.get("roles", [])]
    if roles:
        fresh = scratch / "fresh-etc" / block.where.replace("/", "_").replace(":", "_")
        fresh.mkdir()
        extra.update({name: str(fresh / path) for name, path in doc_examples.ROLE_FILE_VARIABLES.items()})
        applied.append(doc_examples.PLAY_SUBSTITUTIONS[3])
    playbook = scratch / ("play-%s.yml" % block.where.replace("/", "_").replace(":", "_"))
    playbook.write_text(yaml.safe_dump(data, sort_keys=False))
    variables = scratch / (playbook.stem + "-vars.json")
    variables.write_text(json.dumps(extra))
    command = ["ansible-playbook", "-i", "playbooks/inventory/lab.yml", str(playbook), "-e", "@%s" % variables]
    if block.markers.check:
        command.append("--check")
    print("%s runs: %s\n%s" % (block.where, " ".join(command), playbook.read_text()))
    completed = _run_in_checkout(command, env)
    assert completed.returncode == 0, "%s: ansible-playbook exited %d:\n%s" % (
        block.where,
        completed.returncode,
        completed.stdout[-6000:],
    )
    return completed.stdout, applied


FAILING_DOC = """# Examples that tell lies

<!-- example: expect 1: /^nothing to do$/ -->
```sh
echo "3 jobs failed"
```

```sh
echo first
squeue --noheader --name=no-such-job; false
echo never
```

<!-- example: check -->
```yaml
- hosts: arvados_api
  tasks:
    - name: Fail
      ansible.builtin.fail:
        msg: as the doc never said
```
"""


@pytest.mark.skipif(bool(os.environ.get("DOC_EXAMPLES_FILES")), reason="the stage run over other docs")
def test_the_stage_fails_on_a_failing_example(tmp_path, lab):
    """The stage itself, on the lab, over a fixture doc: a claim the output contradicts, a
    command that exits non-zero and a play that fails each fail their test."""
    doc = tmp_path / "LIES.md"
    doc.write_text(FAILING_DOC)
    completed = subprocess.run(
        [
            str(PYTHON),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/examples/test_doc_examples.py::test_example",
        ],
        cwd=REPO_ROOT,
        env=dict(os.environ, DOC_EXAMPLES_FILES=str(doc)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 1, completed.stdout[-4000:]
    assert "3 failed" in completed.stdout, completed.stdout[-4000:]
    assert "LIES.md:4: the prose claims command 1 prints /^nothing to do$/" in completed.stdout
    assert "LIES.md:8: command 2 exited 1" in completed.stdout
    # The first failure ends the block: its third command never ran.
    assert "@@example 2 exit 1" in completed.stdout and "@@example 3 exit" not in completed.stdout.replace(
        "@@example 3 exit %d", ""
    )
    assert "LIES.md:15: ansible-playbook exited 2" in completed.stdout
