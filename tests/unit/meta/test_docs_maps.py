"""The maps the docs draw of the collection against the directories they map: README.md's
table of pieces and CONTRIBUTING.md's list name every module and role there is, and every
test file the user-facing docs name exists where they say."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import yaml

from tests.unit.meta.test_import_paths import ROOMS

REPO_ROOT = Path(__file__).resolve().parents[3]
MODULES = sorted(path.stem for path in (REPO_ROOT / "plugins" / "modules").glob("*.py") if path.stem != "__init__")
ROLES = sorted(path.name for path in (REPO_ROOT / "roles").iterdir() if (path / "tasks").is_dir())
DOCS = ["README.md", "CONTRIBUTING.md", "playbooks/README.md"] + ["roles/%s/README.md" % role for role in ROLES]


def pieces_table() -> str:
    """The rows of README.md's table of what the collection holds (`| piece | ...`)."""
    text = (REPO_ROOT / "README.md").read_text()
    start = text.index("| piece |")
    end = text.index("\n\n", start)
    return text[start:end]


def test_the_readme_table_names_every_module_and_role():
    rows = pieces_table().splitlines()
    for module in MODULES:
        assert any(re.search(r"\bmodules? [^|]*`%s`" % module, row) for row in rows), module
    for role in ROLES:
        assert any(re.search(r"\broles? [^|]*`%s`" % role, row) for row in rows), role


def test_contributing_names_every_module_file_and_role_directory():
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    for module in MODULES:
        assert "plugins/modules/%s.py" % module in text, module
    for role in ROLES:
        assert "roles/%s" % role in text, role


def where_things_are() -> str:
    text = (REPO_ROOT / "CONTRIBUTING.md").read_text()
    start = text.index("## Where things are")
    return text[start : text.index("\n## ", start + 1)]


def room_sections() -> dict[str, str]:
    """CONTRIBUTING's map of plugins/module_utils, by room: the text under each
    "#### `_room/`" heading, to the next heading."""
    parts = re.split(r"^(#{3,4} .*)$", where_things_are(), flags=re.MULTILINE)
    sections = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        named = re.match(r"#### `(_\w+)/`", heading)
        if named:
            sections[named.group(1)] = body
    return sections


def test_contributing_maps_every_room_in_its_layer():
    """The map has a heading per room of plugins/module_utils, and its list of the layers
    names the rooms bottom first, as test_import_paths.py's ROOMS layers them."""
    rooms = sorted(
        path.name for path in (REPO_ROOT / "plugins" / "module_utils").iterdir() if (path / "__init__.py").exists()
    )
    assert rooms
    assert sorted(room_sections()) == rooms
    engines = where_things_are().split("### The engines", 1)[1].split("\n#### ", 1)[0]
    layers = re.findall(r"^\d+\. (.*)$", engines, flags=re.MULTILINE)
    assert [re.findall(r"`(_\w+)/`", layer) for layer in layers] == ROOMS


def test_contributing_maps_every_engine_file_in_its_room():
    """A newcomer finds each file of plugins/module_utils/ in CONTRIBUTING's map, under its
    room, by the thing it does (a file added without a row there fails here)."""
    sections = room_sections()
    engines = sorted(
        path.relative_to(REPO_ROOT / "plugins" / "module_utils")
        for path in (REPO_ROOT / "plugins" / "module_utils").rglob("*.py")
        if path.name != "__init__.py"
    )
    assert engines
    unmapped = [str(name) for name in engines if "`%s`" % name.as_posix() not in sections.get(name.parts[0], "")]
    assert unmapped == []


@pytest.mark.parametrize("doc", DOCS)
def test_every_test_file_a_doc_names_exists(doc):
    named = set(re.findall(r"tests/[\w/.-]+\.py", (REPO_ROOT / doc).read_text()))
    assert sorted(path for path in named if not (REPO_ROOT / path).exists()) == []


def build_ignored(path: str, patterns: list[str]) -> bool:
    """Whether ansible-galaxy's build leaves `path` out: a pattern of galaxy.yml's
    build_ignore matches it or one of its parent directories (fnmatch)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: index + 1]) for index in range(len(parts))]
    return any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes for pattern in patterns)


@pytest.mark.parametrize("doc", ["README.md", "CONTRIBUTING.md", "playbooks/README.md"])
def test_every_relative_link_of_a_doc_the_artifact_ships_lands_in_the_artifact(doc):
    """The installed collection has only what build_ignore lets in: a relative link to
    bench/ or extensions/ is dead there; such links point at the repository instead."""
    patterns = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["build_ignore"]
    assert not build_ignored(doc, patterns)
    base = (REPO_ROOT / doc).parent
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (REPO_ROOT / doc).read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path = (base / target).resolve().relative_to(REPO_ROOT).as_posix()
        assert (REPO_ROOT / path).exists(), (doc, target)
        assert not build_ignored(path, patterns), (doc, target)
