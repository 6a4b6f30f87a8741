"""Citations point into this repository: the outside facts the code relies on (dstack's files
and behaviour, the fabrics' needs) are kept in docs/reference/, and every citation names a page
that exists there and, with ``#heading``, a heading that page has.

A citation is written ``docs/reference/<page>.md#<heading>`` in code, comments and tests, and as
a relative link (``[...](reference/<page>.md#<heading>)``) in Markdown. The reading material the
facts were first gathered in (dstack.md, interconnect.md, ... with their numbered sections) is not
part of the repository, so a section sign and number, or one of those names that is not a path to
a file here, is a citation no reader can follow.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
REFERENCE = ROOT / "docs" / "reference"
# Folders that are not the repository's own files.
SKIP_DIRS = {".venv", "build", ".ansible", ".git", ".cache", "__pycache__", ".pytest_cache",
             ".hypothesis", "output"}
TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".txt", ".cfg", ".toml", ".ini", ".j2", ".sh",
                 ".rst", ".json", ".csv", ".conf", ".service", ".in"}
TEXT_NAMES = {"Makefile", "Dockerfile", "LICENSE"}
# The documents of the reading material, which the repository does not hold: named bare (not as
# a path to a file of the repository), they point outside it.
OUTSIDE = ("dstack.md", "interconnect.md", "layout.md", "this-machine.md", "ansible-anchors.md")
OUTSIDE_NAME = re.compile(r"(?<![\w./-])(%s)(?![\w-])" % "|".join(re.escape(n) for n in OUTSIDE))
# Ways the reading material used to be cited without a file name.
OUTSIDE_WORDS = re.compile(r"\b(interconnect notes|research notes|dstack notes)\b", re.I)
# docs/reference/<page>.md, optionally #<heading>, anywhere in a file.
CITATION = re.compile(r"(?<![\w./-])docs/reference/([\w.-]+?\.md)(?:#([\w-]+))?")
# A Markdown link to a relative .md target, optionally #<heading>.
# Paths that look like citations and are data: a page the generator's staleness check is asked
# about precisely because it does not exist.
NOT_CITATIONS = {("tests/unit/repo/test_reference_docs.py", "never-written.md")}
MD_LINK = re.compile(r"\]\(((?![a-z]+:)[^)\s#]+\.md)(?:#([\w-]+))?\)")


def repository_files():
    """Every text file of the repository, as (relative posix path, text)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = Path(folder) / name
            if path.suffix not in TEXT_SUFFIXES and name not in TEXT_NAMES:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            found.append((path.relative_to(ROOT).as_posix(), text))
    return found


FILES = repository_files()


def slug(heading):
    """The anchor a Markdown heading gets (GitHub's rule): lower case, punctuation but ``-`` and
    ``_`` dropped, each space a ``-``."""
    text = re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def anchors(path):
    """The anchors of a Markdown file: its headings' slugs (a repeated heading gets ``-1``,
    ``-2`` ...) and its ``<a id="...">`` targets."""
    text = path.read_text(encoding="utf-8")
    found, seen = set(), {}
    fenced = False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = re.match(r"#{1,6} +(.+?) *#*$", line)
        if match and not fenced:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else "%s-%d" % (base, count))
    found.update(re.findall(r'<a id="([^"]+)"></a>', text))
    return found


def _line(text, offset):
    return text.count("\n", 0, offset) + 1


def test_the_walk_sees_the_code_the_tests_and_the_docs():
    paths = {path for path, _text in FILES}
    for expected in ("plugins/module_utils/tasks/environment.py", "tests/unit/repo/test_citations.py",
                     "docs/reference/dstack-runtime.md", "roles/efa/vars/main.yml"):
        assert expected in paths
    assert not any(p.startswith((".venv/", "build/", ".git/")) for p in paths)


def test_the_hand_written_reference_pages_exist_and_have_headings():
    for page in ("dstack-files.md", "dstack-runtime.md", "interconnect.md"):
        assert (REFERENCE / page).is_file(), page
        assert len(anchors(REFERENCE / page)) >= 8, page
    assert {"environment-variables", "mpi-hostfile", "failure-and-retry", "container-start"} <= (
        anchors(REFERENCE / "dstack-runtime.md"))


def test_slugs_are_githubs():
    assert slug("Environment variables") == "environment-variables"
    assert slug("InfiniBand and RoCE environment") == "infiniband-and-roce-environment"
    assert slug("`nodes` (backend fleets)") == "nodes-backend-fleets"
    assert slug("Durations of a run") == "durations-of-a-run"


def test_nothing_cites_a_section_number():
    found = ["%s:%d" % (path, _line(text, m.start())) for path, text in FILES
             for m in re.finditer("\u00a7", text)]
    assert not found, (
        "a section sign (\u00a7) cites numbered sections of a document this repository does not "
        "hold; cite docs/reference/<page>.md#<heading> instead: %s" % ", ".join(found))


def test_nothing_cites_the_reading_material_by_name():
    found = []
    for path, text in FILES:
        if path == SELF:
            continue  # names them to find them
        folder = (ROOT / path).parent
        for match in OUTSIDE_NAME.finditer(text):
            if (folder / match.group(1)).is_file():
                continue  # a page beside this one (docs/reference/interconnect.md)
            found.append("%s:%d: %s" % (path, _line(text, match.start()), match.group(1)))
        for match in OUTSIDE_WORDS.finditer(text):
            found.append("%s:%d: %s" % (path, _line(text, match.start()), match.group(1)))
    assert not found, (
        "citations of documents that are not in the repository; cite "
        "docs/reference/<page>.md#<heading>:\n" + "\n".join(found))


def _check(target, heading, where, problems):
    shown = target.relative_to(ROOT).as_posix() if ROOT in target.parents else str(target)
    if not target.is_file():
        problems.append("%s: %s does not exist" % (where, shown))
    elif heading and heading not in anchors(target):
        problems.append("%s: %s has no heading #%s" % (where, shown, heading))


def test_every_citation_of_a_reference_page_names_a_page_and_heading_it_has():
    problems = []
    cited = 0
    for path, text in FILES:
        for match in CITATION.finditer(text):
            if (path, match.group(1)) in NOT_CITATIONS:
                continue
            cited += 1
            _check(REFERENCE / match.group(1), match.group(2),
                   "%s:%d" % (path, _line(text, match.start())), problems)
    assert cited >= 60, "the walk found only %d citations" % cited
    assert not problems, "\n".join(problems)


def test_every_markdown_link_to_a_page_names_a_page_and_heading_it_has():
    problems = []
    for path, text in FILES:
        if not path.endswith(".md"):
            continue
        for match in MD_LINK.finditer(text):
            target = ((ROOT / path).parent / match.group(1)).resolve()
            if ROOT not in target.parents:
                problems.append("%s:%d: %s is outside the repository"
                                % (path, _line(text, match.start()), match.group(1)))
                continue
            _check(target, match.group(2), "%s:%d" % (path, _line(text, match.start())),
                   problems)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("text, bad", [
    ("the notes (dstack.md \u00a74.2)", True),
    ("see interconnect.md section 2", True),
    ("the interconnect notes, Appendix A", True),
    ("coming-from-dstack.md", False),
    ("docs/reference/interconnect.md#efa-environment", False),
])
def test_the_outside_patterns(text, bad):
    found = bool(OUTSIDE_NAME.search(text) or OUTSIDE_WORDS.search(text) or "\u00a7" in text)
    assert found == bad
