"""The fenced examples of the user-facing docs, their markers, and what running one means.

Pure: no lab, no process. `tests/examples/test_doc_examples.py` runs what this plans (the
`examples` stage of `make test`); `tests/unit/meta/test_doc_examples.py` tests it on
fixture docs. The marker syntax is documented in CONTRIBUTING.md ("The docs' examples");
in short, HTML comments on the lines just above a fence (blank lines allowed between):

    <!-- example: skip: REASON -->        the block is not run (counted, REASON printed)
    <!-- example: skip 2,3: REASON -->    commands 2 and 3 of a shell block are not run
    <!-- example: check -->               a play or tasks block runs with --check
    <!-- example: expect: TEXT -->        the block's output contains TEXT
    <!-- example: expect 3: TEXT -->      command 3's output contains TEXT
    (TEXT written /like this/ is a regular expression, searched line by line)

The docs site's pages (docs/docsite/rst/*.rst) say the same in RST: a block is a
`.. code-block:: LANGUAGE` directive, and its markers are RST comments just above it,
`.. example: skip: REASON` and so on, which the site does not show.

Every block is run unless marked skip. A block the stage cannot run (a YAML mapping, a
```text block, a block without a language) must be marked, or the stage fails.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
# The user-facing docs, as globs from the repository root: the Markdown ones and the docs
# site's pages (RST).
DOC_GLOBS = ("README.md", "playbooks/README.md", "roles/*/README.md", "docs/docsite/rst/*.rst")

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
YAML_LANGUAGES = frozenset({"yaml", "yml"})

_MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<body>.*?)\s*-->\s*$")
_MARKER_START = re.compile(r"^\s*<!--\s*example\b")
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_SKIP = re.compile(r"^skip(?:\s+(?P<commands>\d+(?:\s*,\s*\d+)*))?\s*:\s*(?P<reason>\S.*)$")
_EXPECT = re.compile(r"^expect(?:\s+(?P<command>\d+))?\s*:\s*(?P<text>\S.*)$")
_CHECK = re.compile(r"^check(?:\s*:\s*(?P<why>.*))?$")
_RST_MARKER = re.compile(r"^\s*\.\.\s+example:\s*(?P<body>.*?)\s*$")
_RST_CODE_BLOCK = re.compile(r"^(?P<indent>\s*)\.\.\s+(?:code-block|code|sourcecode)::\s*(?P<language>\S*)\s*$")


@dataclasses.dataclass(frozen=True)
class Expect:
    """A claim of the prose: the output (of one command, or of the block) holds this."""

    text: str
    command: int | None = None  # 1-based; None: the block's whole output

    @property
    def is_regex(self) -> bool:
        return len(self.text) > 2 and self.text.startswith("/") and self.text.endswith("/")

    def holds(self, output: str) -> bool:
        if self.is_regex:
            return re.search(self.text[1:-1], output, re.MULTILINE) is not None
        return self.text in output

    def describe(self) -> str:
        where = "command %d" % self.command if self.command else "the block"
        return "%s prints %s" % (where, self.text if self.is_regex else repr(self.text))


@dataclasses.dataclass
class Markers:
    skip: str | None = None
    skip_commands: dict[int, str] = dataclasses.field(default_factory=dict)
    check: bool = False
    expects: list[Expect] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Block:
    """One fenced block: where it is, its language, its text and its markers."""

    path: str  # relative to the repository root
    line: int  # the opening fence's line, 1-based
    language: str
    text: str
    markers: Markers

    @property
    def where(self) -> str:
        return "%s:%d" % (self.path, self.line)

    @property
    def kind(self) -> str | None:
        """'commands', 'play', 'tasks', or None when the stage cannot run it."""
        if self.language in SHELL_LANGUAGES:
            return "commands"
        if self.language in YAML_LANGUAGES:
            return yaml_kind(self.text)
        return None

    def commands(self) -> list[str]:
        return shell_commands(self.text, console=self.language == "console")


@dataclasses.dataclass
class Collected:
    blocks: list[Block]
    problems: list[str]


def yaml_kind(text: str) -> str | None:
    """'play' for a list of plays, 'tasks' for a list of tasks, None for anything else
    (a mapping of variables, a file for another tool)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(data, list) or not data or not all(isinstance(item, dict) for item in data):
        return None
    if all("hosts" in item for item in data):
        return "play"
    if not any("hosts" in item for item in data) and all(_names_a_module(item) for item in data):
        return "tasks"
    return None


def _names_a_module(task: dict) -> bool:
    """A task has a module (a dotted name, as the docs write them) or a block."""
    return any("." in str(key) or key in ("block", "include_role", "import_role") for key in task)


def shell_commands(text: str, console: bool = False) -> list[str]:
    """The commands of a shell block: backslash continuations joined, comment-only and blank
    lines dropped; in a console block only the lines after a `$ ` prompt (and their
    continuations), the rest being output."""
    commands: list[str] = []
    pending: list[str] = []
    for raw in text.splitlines():
        if pending:
            pending.append(raw)
        else:
            line = raw.strip()
            if console:
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if not line or line.startswith("#"):
                continue
            pending = [line]
        if not pending[-1].rstrip().endswith("\\"):
            commands.append("\n".join(pending))
            pending = []
    if pending:
        commands.append("\n".join(pending))
    return commands


def parse_marker(body: str, markers: Markers) -> str | None:
    """Adds one marker's meaning to markers; returns a problem, or None."""
    skip = _SKIP.match(body)
    if skip:
        if skip.group("commands"):
            for number in skip.group("commands").split(","):
                markers.skip_commands[int(number)] = skip.group("reason")
        else:
            markers.skip = skip.group("reason")
        return None
    expect = _EXPECT.match(body)
    if expect:
        command = int(expect.group("command")) if expect.group("command") else None
        markers.expects.append(Expect(expect.group("text"), command))
        return None
    if _CHECK.match(body):
        markers.check = True
        return None
    return "unknown marker %r (known: skip[ N,M]: REASON, check, expect[ N]: TEXT)" % body


def extract(path: Path, root: Path = REPO_ROOT) -> Collected:
    """Every fenced block of one Markdown file (or code-block of an RST page), with the
    markers just above it."""
    relative = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".rst":
        return _extract(relative, lines, (_RST_MARKER, None), _read_code_block, "code-block")
    return _extract(relative, lines, (_MARKER, _MARKER_START), _read_fence, "fenced block")


# A block read at a line: its language, its text and the index of the line after it.
# Only for the annotations: Python 3.8 (the version stage's) cannot subscript Callable.
if TYPE_CHECKING:
    ReadBlock = Callable[[list[str], int], tuple[str, str, int] | None]


def _read_fence(lines: list[str], index: int) -> tuple[str, str, int] | None:
    """The Markdown fenced block opening at lines[index], if one does."""
    fence = _FENCE.match(lines[index])
    if not fence:
        return None
    closing = re.compile(r"^\s*" + re.escape(fence.group("fence")[0]) + "{%d,}\\s*$" % len(fence.group("fence")))
    end = index + 1
    while end < len(lines) and not closing.match(lines[end]):
        end += 1
    body = [line[len(fence.group("indent")) :] for line in lines[index + 1 : end]]
    language = fence.group("info").strip().split(" ")[0].lower() if fence.group("info").strip() else ""
    return language, "\n".join(body) + "\n", end + 1


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _read_code_block(lines: list[str], index: int) -> tuple[str, str, int] | None:
    """The RST code-block directive at lines[index], if there is one: its options
    (`:caption:`), then its body, every line indented deeper than the directive, blank
    ones included, up to the first line that is not."""
    directive = _RST_CODE_BLOCK.match(lines[index])
    if not directive:
        return None
    indent = len(directive.group("indent"))
    end = index + 1
    while end < len(lines) and lines[end].strip().startswith(":") and _indent(lines[end]) > indent:
        end += 1
    first = end
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
        end += 1
    body = list(lines[first:end])
    while body and not body[-1].strip():
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    depth = min((_indent(line) for line in body if line.strip()), default=0)
    return directive.group("language").lower(), "\n".join(line[depth:] for line in body) + "\n", end


def _extract(
    relative: str, lines: list[str], markers: tuple[re.Pattern, re.Pattern | None], read_block: ReadBlock, what: str
) -> Collected:
    """The blocks `read_block` finds in `lines`, each with the markers just above it; `markers`:
    a marker line, and the start of one (a Markdown comment may run on, a marker may not)."""
    marker_line, marker_start = markers
    blocks: list[Block] = []
    problems: list[str] = []
    pending = Markers()
    pending_line: int | None = None
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = marker_line.match(line)
        block = None if marker else read_block(lines, index)
        if marker:
            problem = parse_marker(marker.group("body"), pending)
            if problem:
                problems.append("%s:%d: %s" % (relative, index + 1, problem))
            pending_line = pending_line or index + 1
        elif marker_start and marker_start.match(line):
            problems.append("%s:%d: an example marker must be one line: <!-- example: ... -->" % (relative, index + 1))
        elif block:
            language, text, after = block
            blocks.append(Block(relative, index + 1, language, text, pending))
            pending, pending_line = Markers(), None
            index = after
            continue
        elif line.strip() and pending_line is not None:
            problems.append("%s:%s: example marker(s) not followed by a %s" % (relative, pending_line, what))
            pending, pending_line = Markers(), None
        index += 1
    if pending_line is not None:
        problems.append("%s:%s: example marker(s) not followed by a %s" % (relative, pending_line, what))
    for block_found in blocks:
        problems.extend(block_problems(block_found))
    return Collected(blocks, problems)


def block_problems(block: Block) -> list[str]:
    """What makes a block neither runnable nor marked, or its markers meaningless."""
    problems = []
    if block.markers.skip is not None:
        return problems
    kind = block.kind
    if kind is None:
        what = "a ```%s block" % block.language if block.language else "a block without a language"
        if block.language in YAML_LANGUAGES:
            what = "a YAML block that is neither plays nor tasks"
        problems.append(
            "%s: %s, which the examples stage cannot run: mark it <!-- example: skip: REASON --> "
            "(CONTRIBUTING.md, The docs' examples)" % (block.where, what)
        )
        return problems
    count = len(block.commands()) if kind == "commands" else 1
    for number in list(block.markers.skip_commands) + [e.command for e in block.markers.expects if e.command]:
        if kind != "commands" or not 1 <= number <= count:
            problems.append("%s: a marker names command %d, and the block has %d" % (block.where, number, count))
    if block.markers.check and kind == "commands":
        problems.append("%s: `check` is for plays and tasks; a command line says --check itself" % block.where)
    if kind == "commands" and len(block.markers.skip_commands) >= count:
        problems.append("%s: every command is skipped: say `skip: REASON` for the block" % block.where)
    return problems


def doc_files(root: Path = REPO_ROOT, globs: Iterable[str] = DOC_GLOBS) -> list[Path]:
    files: list[Path] = []
    for pattern in globs:
        files.extend(sorted(root.glob(pattern)))
    return files


def collect(files: Sequence[Path], root: Path = REPO_ROOT) -> Collected:
    blocks: list[Block] = []
    problems: list[str] = []
    for path in files:
        collected = extract(path, root)
        blocks.extend(collected.blocks)
        problems.extend(collected.problems)
    return Collected(blocks, problems)


# ------------------------------------------------------------------ substitutions
#
# What a user adapts to run an example on their cluster, and what the stage adapts to run
# it on the lab: one table, each row printed when it applies. {scratch} is the stage's
# scratch directory (its bin/ holds the commands below), {lab_config} the lab's config.yml.


@dataclasses.dataclass(frozen=True)
class Substitution:
    name: str
    pattern: str  # a regular expression
    replacement: str  # re.sub's replacement, with {scratch}, {lab_config} filled in

    def apply(self, text: str, values: dict[str, str]) -> tuple[str, bool]:
        replacement = self.replacement.format(**values)
        new = re.sub(self.pattern, lambda match: match.expand(replacement), text)
        return new, new != text


SUBSTITUTIONS = (
    Substitution("your inventory -> the lab's", r"(?<=-i )inventory\.yml\b", "playbooks/inventory/lab.yml"),
    Substitution(
        "arvados-fail-jobs -> the checkout's, reading the lab's config.yml for /etc/arvados/config.yml",
        r"(?m)^arvados-fail-jobs(?= )",
        "{scratch}/bin/arvados-fail-jobs",
    ),
    Substitution(
        "arvados-recovery-watch -> the checkout's",
        r"(?m)^arvados-recovery-watch(?= )",
        "{scratch}/bin/arvados-recovery-watch",
    ),
    Substitution(
        "/etc/arvados/<options file> -> one for the lab in the scratch directory",
        r"/etc/arvados/(fail-jobs|recovery-watch)\.yml",
        "{scratch}/etc/\\1.yml",
    ),
    Substitution("/var/lib/... -> the scratch directory", r"/var/lib/(?=[\w-]+/)", "{scratch}/var/lib/"),
    Substitution(
        "the artifact -> the scratch directory, not the checkout",
        r"ansible-galaxy collection build(?= )",
        "ansible-galaxy collection build --output-path {scratch}",
    ),
    Substitution(
        "the install -> the scratch directory (ANSIBLE_COLLECTIONS_PATH), not ~/.ansible or the checkout's link",
        r"ansible-galaxy collection install (arvados_ops-recovery-\*\.tar\.gz)",
        "ANSIBLE_COLLECTIONS_PATH={scratch}/collections ansible-galaxy collection install {scratch}/\\1",
    ),
    Substitution(
        "<dir holding ansible_collections/> -> the checkout's",
        r"<dir holding ansible_collections/>",
        ".build/collections",
    ),
)

# What the stage adds to a play or tasks block (wrapped into a playbook and run with the
# lab's inventory, playbooks/inventory/lab.yml), printed as substitutions are.
PLAY_SUBSTITUTIONS = (
    "hosts: the lab's inventory (this machine in every group)",
    "tasks: wrapped in a play on localhost; the database modules' default config.yml -> the lab's "
    "(module_defaults of group/arvados_ops.recovery.database)",
    "vault_* variables -> defined (vault_arvados_db_password: the lab's password)",
    "roles' files under /etc/arvados -> an empty scratch directory (a fresh host)",
)

# The roles' variables naming files under /etc/arvados, pointed at the scratch directory.
ROLE_FILE_VARIABLES = {
    "boot_recovery_options_file": "fail-jobs.yml",
    "dispatcher_config_cluster_file": "config.yml",
    "dispatcher_config_legacy_file": "crunch-dispatch-slurm/crunch-dispatch-slurm.yml",
    "recovery_watch_options_file": "recovery-watch.yml",
}


def substitute(command: str, values: dict[str, str]) -> tuple[str, list[str]]:
    """The command as the lab runs it, and the names of the substitutions applied."""
    applied = []
    for substitution in SUBSTITUTIONS:
        command, changed = substitution.apply(command, values)
        if changed:
            applied.append(substitution.name)
    return command, applied


def vault_names(text: str) -> list[str]:
    return sorted(set(re.findall(r"\bvault_\w+", text)))


def wrap_tasks(tasks: list) -> list:
    """A tasks block as one play on the lab's localhost."""
    return [{"name": "The example's tasks", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]


def output_of_commands(output: str, count: int) -> dict[int, str]:
    """The output of each command of a script made by `command_script`."""
    pieces: dict[int, str] = {}
    current: list[str] = []
    number = 1
    for line in output.splitlines():
        match = re.match(r"^@@example (\d+) (exit|skipped)\b", line)
        if match:
            pieces[int(match.group(1))] = "\n".join(current)
            current = []
            number = int(match.group(1)) + 1
            continue
        current.append(line)
    if current and number <= count:
        pieces[number] = "\n".join(current)
    return pieces


def command_script(commands: Sequence[str], skipped: dict[int, str]) -> str:
    """One bash script running the commands in turn in one shell (an `eval` of one is
    seen by the next), each followed by a line with its exit status; the first failure
    ends it."""
    parts = ["set -o pipefail"]
    for number, command in enumerate(commands, 1):
        if number in skipped:
            parts.append("printf '\\n@@example %d skipped\\n'" % number)
            continue
        parts.append(command)
        parts.append(
            "status=$?; printf '\\n@@example %d exit %%d\\n' \"$status\"; "
            '[ "$status" -eq 0 ] || exit "$status"' % number
        )
    return "\n".join(parts) + "\n"


def exit_statuses(output: str) -> dict[int, int]:
    return {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"^@@example (\d+) exit (\d+)$", output, re.M)}


# What the stage ran and skipped, for its closing report (tests/examples/conftest.py).
TALLY: dict[str, list] = {"run": [], "substituted": [], "skipped": [], "skipped_commands": []}


def tally_report(blocks: int, files: int) -> str:
    lines = ["examples: %d blocks in %d files" % (blocks, files)]
    lines.append("  run as written: %d" % len(TALLY["run"]))
    lines.append("  run with substitutions: %d" % len(TALLY["substituted"]))
    lines.append("  skipped: %d" % len(TALLY["skipped"]))
    lines.extend("    %s: %s" % item for item in TALLY["skipped"])
    lines.append("  commands skipped in blocks that ran: %d" % len(TALLY["skipped_commands"]))
    lines.extend("    %s: %s" % item for item in TALLY["skipped_commands"])
    return "\n".join(lines)
