"""The docs site's sources (docs/docsite/, built by scripts/docs.sh) against what they
list and link: every guide page listed once and every listed page there, each with its
label, the links of links.yml as galaxy.yml gives them, the repository's files the pages
link to (Sphinx, offline, checks only the links between pages), and every alert of the
rules named on the watch page."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.examples.doc_examples import REPO_ROOT

DOCSITE = REPO_ROOT / "docs" / "docsite"
PAGES = sorted(DOCSITE.glob("rst/*.rst"))
BLOB = "https://github.com/arvados-ops/recovery/blob/main/"


def listed_pages() -> list[str]:
    extra_docs = yaml.safe_load((DOCSITE / "extra-docs.yml").read_text())
    return [page for section in extra_docs["sections"] for page in section["toctree"]]


def test_every_page_of_extra_docs_is_there_and_every_page_there_is_listed_once():
    listed = listed_pages()
    assert len(listed) == len(set(listed)), listed
    assert sorted(listed) == [page.stem for page in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_a_page_opens_with_its_own_label(page):
    # antsibull-docs refuses a label outside the collection's docsite prefix; one per page,
    # named after it, is what the other pages and the README's readers refer to.
    first = page.read_text().splitlines()[0]
    assert first == ".. _ansible_collections.arvados_ops.recovery.docsite.%s:" % page.stem


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (outside code fences)."""
    anchors: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = re.match(r"#+\s+(.*)", line)
        if heading and not fenced:
            slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
            anchor, number = slug, 0
            while anchor in anchors:
                number += 1
                anchor = "%s-%d" % (slug, number)
            anchors.add(anchor)
    return anchors


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_the_repository_files_and_headings_a_page_links_to_exist(page):
    for target, anchor in re.findall(re.escape(BLOB) + r"([^#>\s]+)(?:#([^>\s]+))?", page.read_text()):
        assert (REPO_ROOT / target).exists(), (page.name, target)
        if anchor and target.endswith(".md"):
            assert anchor in github_anchors((REPO_ROOT / target).read_text()), (page.name, target, anchor)


def test_links_yml_names_the_repository_galaxy_yml_names():
    galaxy = yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())
    links = yaml.safe_load((DOCSITE / "links.yml").read_text())
    assert "https://github.com/%s" % links["edit_on_github"]["repository"] == galaxy["repository"]
    for link in links["extra_links"]:
        assert link["url"].startswith(galaxy["repository"]), link


def test_the_readme_links_every_guide_page():
    readme = (REPO_ROOT / "README.md").read_text()
    for page in PAGES:
        assert "](docs/docsite/rst/%s)" % page.name in readme, page.name


def test_the_watch_page_names_every_alert_of_the_rules():
    rules = yaml.safe_load((REPO_ROOT / "prometheus" / "arvados_recovery_rules.yml").read_text())
    alerts = [rule["alert"] for group in rules["groups"] for rule in group["rules"] if "alert" in rule]
    page = (DOCSITE / "rst" / "guide_watch.rst").read_text()
    assert alerts and all("``%s``" % alert in page for alert in alerts), alerts
