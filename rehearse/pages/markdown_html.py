"""The Markdown a report writes beside its checks (demo 2's scenario tables, the throughput
comparison) as HTML for the run's page (rehearse.run_page): the few forms reports write —
headings, pipe tables, lists, paragraphs, **bold** and `code` — every text escaped, nothing
else interpreted (no raw HTML, no links, no images). Each ``##`` section is folded into a
<details> the reader opens: demo 2's run holds hundreds of lines of them."""

from __future__ import annotations

import re

from rehearse.pages.html import e, short_times

_BOLD = re.compile(r"\*\*(.+?)\*\*")
_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_ITEM = re.compile(r"^(\s*)[-*]\s+(.*)$")


def inline(text: str) -> str:
    """One line's text: escaped, `code` spans as <code>, **bold** as <strong> outside them."""
    parts = short_times(text).split("`")
    if len(parts) % 2 == 0:
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    out = []
    for n, part in enumerate(parts):
        if n % 2:
            out.append(f"<code>{e(part)}</code>")
        else:
            out.append(_BOLD.sub(r"<strong>\1</strong>", e(part)))
    return "".join(out)


def _cells(line: str) -> list[str]:
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", body)]


def _is_rule(line: str) -> bool:
    return bool(re.fullmatch(r"\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?", line.strip()))


def _table(lines: list[str]) -> str:
    head, rows = _cells(lines[0]), lines[1:]
    if rows and _is_rule(rows[0]):
        rows = rows[1:]
    out = ["<table>", "<tr>" + "".join(f"<th>{inline(c)}</th>" for c in head) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{inline(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows]
    return "\n".join(out + ["</table>"])


def _list(lines: list[str]) -> str:
    """Items, an indented item or line under one item as its sub-list."""
    items: list[tuple[str, list[str]]] = []
    for line in lines:
        match = _ITEM.match(line)
        if match and not match.group(1):
            items.append((match.group(2), []))
        elif items:
            items[-1][1].append(match.group(2) if match else line.strip())
        else:
            items.append((line.strip(), []))
    out = ["<ul>"]
    for text, subs in items:
        sub = ("<ul>" + "".join(f"<li>{inline(s)}</li>" for s in subs) + "</ul>") if subs else ""
        out.append(f"<li>{inline(text)}{sub}</li>")
    return "\n".join(out + ["</ul>"])


def blocks(text: str, top: int = 3) -> list[str]:
    """``text``'s blocks as HTML; a heading of level n becomes <h(n + top - 2)>, at most h6."""
    out: list[str] = []
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        line = lines[n]
        if not line.strip():
            n += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            level = min(6, len(heading.group(1)) + top - 2)
            out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
            n += 1
            continue
        end = n + 1
        if line.lstrip().startswith("|"):
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            out.append(_table(lines[n:end]))
        elif _ITEM.match(line) and not _ITEM.match(line).group(1):
            while end < len(lines) and lines[end].strip() and (
                    _ITEM.match(lines[end]) or lines[end].startswith(" ")):
                end += 1
            out.append(_list(lines[n:end]))
        else:
            while (end < len(lines) and lines[end].strip() and not _HEADING.match(lines[end])
                   and not lines[end].lstrip().startswith("|")
                   and not (_ITEM.match(lines[end]) and not lines[end].startswith(" "))):
                end += 1
            out.append("<p>" + "<br/>".join(inline(x.strip()) for x in lines[n:end]) + "</p>")
        n = end
    return out


def sections(text: str) -> list[str]:
    """``text`` with each ``##`` section folded in a <details> named by its heading; what comes
    before the first such heading stays open."""
    out: list[str] = []
    chunks = re.split(r"(?m)^## +(.*)$", text)
    out += blocks(chunks[0])
    for title, body in zip(chunks[1::2], chunks[2::2]):
        out += [f"<details class=\"section\"><summary>{inline(title.strip())}</summary>",
                *blocks(body), "</details>"]
    return out
