"""Every relative link in README.md and docs/*.md resolves: the file (or folder) exists, and an
anchor names a heading of the target markdown file, slugged the way GitHub slugs it (seconds, no
server). Links inside code blocks and code spans are not links; http(s)/mailto links are not
checked (no network here)."""

import pathlib
import re
from urllib.parse import unquote

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text):
    """(line number, line) outside fenced code blocks, code spans blanked."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


def github_slug(heading):
    """GitHub's heading anchor: link text kept, markup dropped, lower case, every character that
    is not a letter, digit, space, hyphen or underscore removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path):
    """The anchors GitHub gives the headings of path (a repeated slug gets -1, -2, ...)."""
    seen, out = {}, set()
    for _, line in prose_lines(path.read_text()):
        m = HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")
    return out


def links(path):
    for n, line in prose_lines(path.read_text()):
        for m in LINK.finditer(line):
            yield n, m.group(2)


def broken(path):
    out = []
    for n, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{n}: ({target})"
        if not dest.exists():
            out.append(f"{where}: no such file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    return out


def test_github_slugs():
    assert github_slug("Islands on sglang 0.5.23 (upstream main)") == \
        "islands-on-sglang-0523-upstream-main"
    assert github_slug("The flag, the ratio, and rollback") == "the-flag-the-ratio-and-rollback"
    assert github_slug("`--swa-islands-reclaim` and [docs](x.md)") == "--swa-islands-reclaim-and-docs"


def test_the_checker_sees_a_broken_link_and_a_broken_anchor(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title\n\n## Two words\n\n[ok](b.md) [ok](#two-words) "
                                   "`[code](nope.md)`\n```\n[fenced](nope.md)\n```\n"
                                   "[bad](nope.md) [bad](b.md#missing) [web](https://x.invalid)\n")
    (tmp_path / "b.md").write_text("# B\n")
    found = broken(tmp_path / "a.md")
    assert len(found) == 2, found
    assert "no such file" in found[0] and "nope.md" in found[0]
    assert "#missing" in found[1]


def test_the_readme_links_every_doc():
    targets = {t.partition("#")[0] for _, t in links(ROOT / "README.md")}
    missing = [p.name for p in DOCS[1:] if f"docs/{p.name}" not in targets]
    assert missing == [], f"README.md links no docs/{missing}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    assert broken(path) == []
