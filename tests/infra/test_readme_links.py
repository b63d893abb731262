"""Every relative link in the Markdown outside docs/ (README.md, agent/README.md, ...) resolves.

`mkdocs build --strict` (bin/test) checks the links inside docs/; nothing else reads these
files, so a page moved or renamed there would leave README.md pointing at nothing. A link
resolves when its file exists, and, with a `#fragment` into a Markdown file, when that file
has a heading of that slug (GitHub's: lower case, punctuation dropped, spaces to hyphens).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Not ours, generated, or checked by mkdocs already.
SKIPPED_DIRS = {".git", ".venv", "var", "site", "node_modules", "docs", "test-results", "staticfiles"}

FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
# [text](target "title") and ![alt](target); a reference definition: [label]: target
INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s|$)", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    """The Markdown files of the repository that mkdocs does not build."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.startswith(".")]
        found += [Path(folder, name) for name in files if name.endswith(".md")]
    return sorted(found)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text without markup, lower case, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (code blocks left out)."""
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text()))}


def relative_links(text: str) -> list[str]:
    """Link targets of a Markdown text that point into the repository (code left out)."""
    prose = CODE_SPAN.sub("", FENCE.sub("", text))
    targets = INLINE_LINK.findall(prose) + REFERENCE_DEF.findall(prose)
    return [t for t in targets if not SCHEME.match(t) and not t.startswith("//")]


def shown(path: Path) -> str:
    """A path as a message names it: from the repository root when it lies inside."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(path: Path) -> list[str]:
    """The relative links of one Markdown file that point at no file or no heading."""
    broken = []
    for target in relative_links(path.read_text()):
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment.lower() not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {shown(dest)}")
    return broken


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_readme_is_among_the_files_checked() -> None:
    assert ROOT / "README.md" in markdown_files()


def test_it_reports_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text("# Guide\n\n## The two commands\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](guide.md#the-two-commands) [gone](docs/gone.md) [bad](guide.md#nowhere)\n"
        "[self](#top) [web](https://example.com) `[code](nowhere.md)`\n\n# Top\n"
    )
    assert broken_links(page) == [
        "docs/gone.md: no such file",
        f"guide.md#nowhere: no heading #nowhere in {shown(tmp_path / 'guide.md')}",
    ]
