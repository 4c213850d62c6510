"""A result as tables other tools read: a tidy CSV, and a short Markdown summary for a CI job's page.
Why: pandas, benchstat-style tools and CI summaries read flat tables, not the nested result JSON.

CSV (to_csv): a header line (COLUMNS, Line's fields), then comma-separated values, UTF-8, "\\n" line
ends, quoted only where a value needs it, no index column, a missing value empty: `pandas.read_csv(path)`
reads it with no options. One line per row of the result (scenario x point x framework x variant) and
clock the file has (clocks_of: model.CLOCKS that at least one of its rows read; a file from before the
kernel clock has no kernel lines). A row that did not run, or did not read that clock, keeps its status
and gives the reason, with empty figures. Figures are seconds (unit "s"); processes and samples count
what the median is of. params is the point's parameters as JSON, without its label (a column of its
own) and the run's seed, so that two runs' exports join on them.

Markdown (to_markdown): the run's environment line (GPU, driver, framework versions), then per
scenario its equivalence verdict, its claims counted by verdict, and a table of variants x frameworks
(the device-done median, and the kernel clock's where the row read it). Every text taken from the file
goes through md_text: a file cannot inject HTML, a link, an image or a table cell.
"""
from __future__ import annotations

import csv
import io
import json
import re
from collections import Counter
from dataclasses import astuple, dataclass, fields, replace
from typing import Any, Iterator

from harness.backends import FRAMEWORKS
from harness.report.render import Block, render_md
from harness.report.report import fmt_s
from harness.results.model import CLOCKS, Json, Result, Row, ScenarioResult, Stats, Timing

UNIT = "s"
VERDICTS = ("confirmed", "refuted", "inconclusive")  # the claims' verdicts, in the summary's order
MAX_TEXT = 300  # characters of a file's text the summary shows (an equivalence failure's message)


# --------------------------------------------------------------------------------------------- the CSV

@dataclass(frozen=True)
class Line:
    """One line of the CSV: a row of the result and one clock; its fields are the CSV's columns, in order."""

    scenario: str
    point: int
    label: str
    params: str  # JSON of the point's parameters but its label and the run's seed; empty where it has none
    framework: str
    variant: str
    clock: str
    status: str  # the row's (results.STATUSES)
    median: float | None = None
    q1: float | None = None
    q3: float | None = None
    unit: str = ""  # UNIT where there are figures
    processes: int | None = None
    samples: int | None = None  # what the median is of
    reason: str = ""  # why the figures are empty: the row did not run, or did not read this clock


COLUMNS = tuple(f.name for f in fields(Line))


def clocks_of(result: Result) -> list[str]:
    """The clocks (model.CLOCKS, in its order) that at least one row of the result read."""
    read = {c for scn in result.scenarios.values() for row in scn.rows if row.timing is not None
            for c in CLOCKS if _stats(row.timing, c) is not None}
    return [c for c in CLOCKS if c in read]


def _stats(timing: Timing | None, clock: str) -> Stats | None:
    """The clock's statistics where it was read."""
    s = timing.clock(clock) if timing is not None else None
    return s if s is not None and isinstance(s.median, (int, float)) else None


def _point(scn: ScenarioResult, row: Row) -> tuple[int, str, Json]:
    """The row's point: its index, its label and the parameters that identify it."""
    i = row.point or 0
    params = dict((scn.points or [])[i]) if i < len(scn.points or []) else {}
    label = row.label if row.label is not None else str(params.get("label", ""))  # params: data, by name
    return i, label, {k: v for k, v in params.items() if k not in ("label", "seed")}


def _clock_line(base: Line, row: Row, clock: str) -> Line:
    """base with one clock's figures, or with why it has none."""
    s = _stats(row.timing, clock) if row.timed else None
    if s is None:
        why = row.reason if not row.timed else (row.timing.kernel_why if clock == "kernel" else None)
        return replace(base, clock=clock, reason=why or ("" if not row.timed else f"no {clock} clock in this row"))
    return replace(base, clock=clock, median=s.median, q1=s.q1, q3=s.q3, unit=UNIT,
                   processes=sum(1 for k in row.timing.counts(clock) or () if k) or 1, samples=s.n)


def csv_lines(result: Result) -> Iterator[Line]:
    """The CSV's lines in the result's order (scenario, its rows), clock by clock."""
    clocks = clocks_of(result)
    for name, scn in result.scenarios.items():
        for row in scn.rows:
            point, label, params = _point(scn, row)
            base = Line(scenario=name, point=point, label=label,
                        params=json.dumps(params, ensure_ascii=False) if params else "",
                        framework=row.framework, variant=row.variant, clock="", status=row.status)
            for clock in clocks:
                yield _clock_line(base, row, clock)


def to_csv(result: Result) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(["" if v is None else v for v in astuple(line)] for line in csv_lines(result))
    return buf.getvalue()


# ---------------------------------------------------------------------------------------- the summary

# Markdown's punctuation that can start markup (emphasis, code, links, images, HTML, entities, math,
# headings, autolinks' "scheme:" and "user@host"), each escaped with a backslash; "|", which splits a
# table's cells even behind a backslash in render_md's tables, becomes its entity.
_MARKUP = re.compile(r"[\\`*_{}\[\]()<>#!~&:@$|]")
_WWW = re.compile(r"(?i)\b(www)\.")  # GitHub's autolink of a bare www.host


def md_text(text: Any, limit: int = MAX_TEXT) -> str:
    """Text from a result file as Markdown that shows it as it is: one line, at most `limit` characters,
    no markup of its own."""
    t = " ".join(re.sub(r"[\x00-\x1f\x7f]", " ", str(text)).split())
    if len(t) > limit:
        t = t[: limit - 1] + "…"
    t = _MARKUP.sub(lambda m: "&#124;" if m.group() == "|" else "\\" + m.group(), t)
    return _WWW.sub(r"\1\\.", t)


def environment_line(result: Result) -> str:
    """GPU, driver, each framework's version (or that it was not available), size and seed."""
    env = result.environment
    driver = (env.host or {}).get("driver")  # the host's facts: data, by name
    parts = [f"GPU {md_text(env.gpu)}" if env.gpu else "no GPU (CPU only)"]
    if driver:
        parts.append(f"driver {md_text(driver)}")
    for fw, info in (env.frameworks or {}).items():
        version = (info.env or {}).get("version") if info.available else None  # the backend's own facts
        parts.append(f"{md_text(fw)} {md_text(version)}" if version else f"{md_text(fw)} not available")
    parts.append(f"size {md_text(result.size)}, seed {md_text(result.seed)}")
    return " · ".join(parts)


def _equivalence(scn: ScenarioResult) -> str:
    eq = scn.equivalence
    if eq is None or not eq.status:
        return "equivalence: not run"
    message = eq.message if eq.status != "passed" else ""
    return f"equivalence: **{md_text(eq.status)}**" + (f" ({md_text(message)})" if message else "")


def _claims(scn: ScenarioResult) -> str:
    counts = Counter(str(c.verdict) for c in scn.claims or [])
    order = [v for v in VERDICTS if v in counts] + sorted(set(counts) - set(VERDICTS))
    return "claims: " + (", ".join(f"{counts[v]} {md_text(v)}" for v in order) or "none")


def _cell(row: Row | None) -> str:
    if row is None:
        return "—"
    done, kernel = _stats(row.timing, "device_done"), _stats(row.timing, "kernel")
    if not row.timed or done is None:
        return md_text(row.status)
    text = fmt_s(done.median) + (f" (kernel {fmt_s(kernel.median)})" if kernel else "")
    return text + (f", **{md_text(row.status)}**" if row.status != "ok" else "")


def _table(scn: ScenarioResult) -> Block:
    fws = sorted({r.framework for r in scn.rows},
                 key=lambda f: (FRAMEWORKS.index(f) if f in FRAMEWORKS else len(FRAMEWORKS), f))
    variants = list(dict.fromkeys(r.variant for r in scn.rows))
    points = sorted({r.point or 0 for r in scn.rows})
    at = {(r.point or 0, r.variant, r.framework): r for r in scn.rows}
    sweep = len(points) > 1
    rows = []
    for p in points:
        _, label, params = _point(scn, next(r for r in scn.rows if (r.point or 0) == p))
        name = label or ", ".join(f"{k}={v}" for k, v in params.items()) or str(p)
        for v in variants:
            cells = [_cell(at.get((p, v, fw))) for fw in fws]
            rows.append(([md_text(name)] if sweep else []) + [md_text(v), *cells])
    return ("table", (["point"] if sweep else []) + ["variant", *map(md_text, fws)], rows)  # headers, not keys


def scenario_blocks(name: str, scn: ScenarioResult) -> list[Block]:
    title = f"{md_text(name)}: {md_text(scn.title)}" if scn.title else md_text(name)
    blocks: list[Block] = [("h", 3, title, ""), ("p", f"{_equivalence(scn)} · {_claims(scn)}")]
    if not scn.rows:
        return blocks + [("p", "not timed in this run")]
    return blocks + [_table(scn)]


def to_markdown(result: Result, name: str) -> str:
    """The summary of the result file `name` (its file name, shown in the heading)."""
    run = "a complete run" if result.complete is not False else "an incomplete run"
    blocks: list[Block] = [("h", 2, f"triptych result {md_text(name)}", ""), ("p", environment_line(result)),
                           ("p", f"Medians of device-done per call, the kernel clock's in parentheses where the row "
                                 f"read it; {run}.")]
    if result.not_run:
        blocks.append(("ul", [f"not run: {md_text(n.scenario)} ({md_text(n.why)})" for n in result.not_run]))
    for scn_name, scn in result.scenarios.items():
        blocks += scenario_blocks(scn_name, scn)
    return render_md(blocks)
