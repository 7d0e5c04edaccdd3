"""Every relative link of the README, docs/ and results/ resolves: the file it names exists, and a ``#fragment``
names a heading of that Markdown file (GitHub's anchors: lowercased, punctuation dropped, spaces as hyphens)."""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_files():
    files = [ROOT / "README.md"]
    for folder in ("docs", "results"):
        files += sorted((ROOT / folder).rglob("*.md"))
    return [f for f in files if f.is_file()]


def outside_code(text: str, inline: bool = True) -> str:
    """The text without fenced code blocks and (``inline``) inline code spans: their brackets are not links."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line) if inline else line)
    return "\n".join(lines)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: ``## Make demo (2 cores)`` -> ``make-demo-2-cores``."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: pathlib.Path) -> set:
    seen, found = {}, set()
    for line in outside_code(path.read_text(encoding="utf-8"), inline=False).splitlines():
        m = HEADING.match(line)
        if m:
            a = anchor(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            found.add(a if n == 0 else f"{a}-{n}")
    found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text(encoding="utf-8")))
    return found


def relative_links(path: pathlib.Path):
    for m in LINK.finditer(outside_code(path.read_text(encoding="utf-8"))):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        yield target


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    broken = []
    for target in relative_links(path):
        file_part, _, fragment = target.partition("#")
        dest = path if not file_part else (path.parent / file_part).resolve()
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment.lower() not in anchors(dest):
            broken.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)
