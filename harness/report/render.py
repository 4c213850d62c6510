"""The report's two renderers of one document model: Markdown (report.md) and self-contained HTML.

Blocks (the document model): ("h", level, text, anchor) | ("p", text) | ("quote", text) |
("ul", [text]) | ("table", headers, rows), each cell str, (str, css class) or (str, css class,
columns spanned) | ("img", file name, alt, caption). Inline text is the report's own Markdown: it may
use `code`, **bold** and [links](#anchor), or [links](to/a/file) relative to the report (plain names,
'..' only leading), and backslash escapes. Text that comes from a result file enters it only through
text() or code(): shown as written in both renderers, never as a link, an emphasis or HTML that the
file chose (a result is data: issue 49 found its links in report.html and raw <script> in report.md).
Pure functions: no file is read or written here.
"""
from __future__ import annotations

import base64
import html
import re
from typing import Any, Iterable

from harness.backends import ceilings_framework
from harness.report.labels import NAMES
from harness.results.model import Json

Block = tuple


# What Markdown (CommonMark, GitHub's tables and strikethrough) can read as markup inside a line, escaped
# with a backslash, which both renderers show as the character itself: a backslash that would escape, a
# backtick, '*', an '_' that could open emphasis (one after a letter or digit cannot: pinned_host), '<' before what
# could be a tag or an autolink, '[' before what could be a link ("[x](", "[x]["), an entity, '~~'.
# '|' is the table renderer's.
_MARKUP = re.compile(r"\\(?=[!-/:-@\[-`{-~])|[`*]|(?<![A-Za-z0-9])_|<(?=[A-Za-z/!?])"
                     r"|\[(?=[^\]]*\][(\[])|&(?=#?\w+;)|~(?=~)")
# first in a line: a list item's, a heading's, a quote's or a link definition's mark ("[x]: url")
_BLOCK_START = re.compile(r"^(\s*\d*)([-+.)#>=]|\[(?=[^\]]*\]:))(?=[\s\-#=]|$|(?<=\[))")


def text(value: Any) -> str:
    """A result file's text as inline text of the report: every character shown as written, on one line
    (a line break is a space: a file's text opens no block of its own)."""
    t = " ".join(str(value).splitlines())
    return _BLOCK_START.sub(r"\1\\\2", _MARKUP.sub(lambda m: "\\" + m.group(0), t), count=1)


def code(value: Any) -> str:
    """A result file's text as a code span: fenced by more backticks than it holds in a row (CommonMark),
    so that no backtick of its own ends the span early; inside one, nothing is markup."""
    t = " ".join(str(value).splitlines())
    fence = "`" * (max((len(r) for r in re.findall(r"`+", t)), default=0) + 1)
    pad = " " if t.startswith("`") or t.endswith("`") or (t.startswith(" ") and t.endswith(" ") and t.strip()) else ""
    return f"{fence}{pad}{t}{pad}{fence}"


def text_of(c: Any) -> str:
    return c[0] if isinstance(c, tuple) else str(c)


def _md_cells(row: list[Any]) -> list[str]:
    """A cell (text, class, span) fills `span` Markdown cells: the text, then empty ones."""
    out = []
    for c in row:
        out.append(text_of(c).replace("|", "\\|").replace("\n", "<br>"))
        if isinstance(c, tuple) and len(c) > 2:
            out += [""] * (c[2] - 1)
    return out


def render_md(blocks: Iterable[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind == "h":
            out.append(f"{'#' * b[1]} {b[2]}")
        elif kind == "p":
            out.append(b[1])
        elif kind == "quote":
            out.append(f"> {b[1]}")
        elif kind == "ul":
            out.append("\n".join(f"- {i}" for i in b[1]))
        elif kind == "table":
            _, headers, rows = b
            lines = ["| " + " | ".join(_md_cells(headers)) + " |", "|" + "---|" * len(headers)]
            lines += ["| " + " | ".join(_md_cells(r)) + " |" for r in rows]
            out.append("\n".join(lines))
        elif kind == "img":
            out.append(f"![{b[2]}]({b[1]})\n\n*{b[3]}*")
    return "\n\n".join(out) + "\n"


_INLINE = re.compile(r"\\([!-/:-@\[-`{-~])"  # a backslash escape: the character itself
                     r"|(?<!`)(`+)(?!`)(.+?)(?<!`)\2(?!`)"  # a code span, fenced by any number of backticks
                     r"|\*\*((?:\\.|[^\\])+?)\*\*"
                     r"|\[((?:\\.|[^\]\\])+)\]\((#[\w-]+|(?:\.\./)*[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)*)\)")


def inline_html(text: str) -> str:
    """Escape, then render backslash escapes, `code`, **bold** and [links](#anchor or relative file)."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(html.escape(m.group(1)))
        elif m.group(2) is not None:
            span = m.group(3)
            if len(span) > 2 and span.startswith(" ") and span.endswith(" ") and span.strip():
                span = span[1:-1]  # CommonMark strips one space each side
            out.append(f"<code>{html.escape(span)}</code>")
        elif m.group(4) is not None:
            out.append(f"<strong>{inline_html(m.group(4))}</strong>")
        else:
            out.append(f'<a href="{html.escape(m.group(6))}">{inline_html(m.group(5))}</a>')
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2327;margin:0 auto;max-width:1280px;
padding:0 24px 48px}
h1{font-size:22px;margin-top:24px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:40px}
h3{font-size:15px;margin-top:22px}
blockquote{margin:8px 0;padding:6px 12px;background:#f5f7fa;border-left:4px solid #8aa}
table{border-collapse:collapse;font-size:12px;margin:8px 0;width:auto}th,td{border:1px solid #d8dde2;padding:3px 7px;
vertical-align:top;text-align:left}th{background:#eef1f4}code{font-size:12px;background:#f2f2f2;padding:0 3px}
td.ok{background:#e8f6ec}td.bad{background:#fbe7e7}td.warn{background:#fff5d6}td.muted{color:#777}
td.hazard{background:#f4e8fb}figure{margin:10px 0}figure img{max-width:100%;border:1px solid #e3e3e3}
figcaption{font-size:12px;color:#555}nav{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0}
table{display:block;max-width:100%;overflow-x:auto}
"""


def render_html(blocks: Iterable[Block], images: dict[str, bytes], title: str) -> str:
    blocks = list(blocks)
    body: list[str] = []
    nav = [f'<a href="#{html.escape(b[3])}">{html.escape(b[3])}</a>' for b in blocks
           if b[0] == "h" and b[1] == 2 and b[3]]
    for b in blocks:
        kind = b[0]
        if kind == "h":
            anchor = f' id="{html.escape(b[3])}"' if b[3] else ""
            body.append(f"<h{b[1]}{anchor}>{inline_html(b[2])}</h{b[1]}>")
            if b[1] == 1:
                body.append("<nav>" + " ".join(nav) + "</nav>")
        elif kind == "p":
            body.append(f"<p>{inline_html(b[1])}</p>")
        elif kind == "quote":
            body.append(f"<blockquote>{inline_html(b[1])}</blockquote>")
        elif kind == "ul":
            body.append("<ul>" + "".join(f"<li>{inline_html(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            _, headers, rows = b
            head = "".join(f"<th>{inline_html(h)}</th>" for h in headers)
            trs = []
            for r in rows:
                tds = []
                for c in r:
                    text, cls, span = (tuple(c) + (1,))[:3] if isinstance(c, tuple) else (str(c), "", 1)
                    attrs = (f' class="{cls}"' if cls else "") + (f' colspan="{span}"' if span > 1 else "")
                    tds.append(f"<td{attrs}>{inline_html(text)}</td>")
                trs.append("<tr>" + "".join(tds) + "</tr>")
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(trs)}</tbody></table>")
        elif kind == "img":
            data = base64.b64encode(images[b[1]]).decode("ascii")
            body.append(f'<figure><img alt="{html.escape(b[2])}" src="data:image/png;base64,{data}">'
                        f"<figcaption>{inline_html(b[3])}</figcaption></figure>")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>\n'
            f"<body>\n" + "\n".join(body) + "\n</body></html>\n")


def fmt_bytes_rate(bps: float) -> str:
    return f"{bps / 1e12:.2f} TB/s" if bps >= 1e12 else f"{bps / 1e9:.1f} GB/s"


def machine_line(machine: Json) -> str:
    """The environment's line on the machine ceilings measured in the run (the floors' denominators). machine:
    keys are the ceilings' names (data)."""
    parts = [f"{label} {fmt_bytes_rate(machine[k])}" for k, label in
             (("hbm_Bps", "device copy (read+write)"), ("h2d_Bps", "host→device pinned"),
              ("d2h_Bps", "device→host pinned")) if k in machine]
    if "fp32_flops" in machine:
        parts.append(f"float32 GEMM {machine['fp32_flops'] / 1e12:.1f} TFLOP/s")
    by = NAMES.get(ceilings_framework() or "", "the backend that measures them")
    nccl = [k for k in machine if k.startswith("nccl_") and k != "nccl_ranks"]
    if nccl:
        parts.append(f"raw NCCL at {machine.get('nccl_ranks', 0):g} rank(s): {len(nccl)} collective × size "
                     f"points, timed by the {by} ranks (the collectives' floors)")
    if parts:
        return f"machine ceilings, measured by raw CUDA through {by} in this run (the floors' denominators): " + \
            "; ".join(parts)
    return (f"machine ceilings: not measured in this run (they need {by} on a GPU and the full size), "
            "so no physical floors")
