"""Every relative link in README.md and docs/ leads somewhere: the file exists and a `#anchor` names a heading
(GitHub's slug of it) or an `<a id>` in the target. And the README stays short enough to read in five minutes."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 150

_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_ID = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"", re.I)


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where a `[x](y)` is not a link."""
    return _CODE.sub("", _FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (links and code marks gone) lower-cased, every character
    that is not a letter, a digit, a space, `-` or `_` dropped, spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors a page has: each heading's slug (a repeated one gets -1, -2, ... as on GitHub) and each <a id>."""
    out, seen = set(_ID.findall(text)), {}
    for heading in _HEADING.findall(_FENCE.sub("", text)):
        s = slug(heading)
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def broken_links(page: Path) -> list[str]:
    """`target: why` for each relative link of the page that does not resolve."""
    bad = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: are not ours to check
            continue
        path, _, anchor = unquote(target).partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            where = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest.name
            bad.append(f"{target}: no heading or <a id> {anchor!r} in {where}")
    return bad


def test_slugs_follow_github():
    assert slug("What `make compare` prints") == "what-make-compare-prints"
    assert slug("1. async_dispatch — The host enqueues, the device computes") == \
        "1-async_dispatch--the-host-enqueues-the-device-computes"
    assert slug("### [A float32 matmul](#matmul_precision)".lstrip("# ")) == "a-float32-matmul"
    assert slug("Timelines: what ran when, on which stream") == "timelines-what-ran-when-on-which-stream"
    assert anchors("# A\n\n## A\n\n```\n# not a heading\n```\n<a id=\"x\"></a>") == {"a", "a-1", "x"}


def test_links_are_found_outside_code_only(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("[ok](p.md) ![img](missing.png) `[not](a-link)`\n```\n[nor](this)\n```\n[web](https://x.org/y)\n"
                    "[here](#there) [there](p.md#h) [up](../%s)\n## H\n" % tmp_path.name)
    assert broken_links(page) == ["missing.png: no such file", "#there: no heading or <a id> 'there' in p.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_the_readme_reads_in_five_minutes():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {README_MAX_LINES})"
