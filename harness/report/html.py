"""The report a person reads after `compare`: report.md and a self-contained report.html.

`python -m harness report RESULT.json [--out DIR]` (and `compare`, at its end) renders one result
file. Per scenario: the concept, a chart of variants x frameworks (bars: device-done median with its
IQR; diamonds: host-return; dashes: the physical floor; a sweep gets one panel per variant over its
points), a table with host-return against device-done and % of the floor, the timeline picture where
the run recorded one, the claim verdicts with their numbers, the checks, and the environment.

This module builds the document (blocks, see harness/report/render.py) and its images in memory;
charts are harness/report/charts.py; the files are written by the one atomic writer
(harness/results/files.py) only after everything rendered. A bad input writes nothing. The timeline PNG
drawn by `compare` next to the result is embedded in report.html and referenced by report.md where
it lies: it is not copied under a second name.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from harness.backends import in_prose
from harness.results.files import check_writable, own_folder, write_files
from harness.report.labels import gpu_label, kernel_of, kernel_said, pct_of_floor
from harness.report.report import (HIGH_SPREAD, as_result, find_row, fmt_num, fmt_pct, fmt_s, frameworks_of, or_else,
                                   points_of, summary_status)
from harness.report.charts import chart_png, ordered_sweep, point_label, variants_of
from harness.report.measuring import blocks as measuring_blocks
from harness.report.render import Block, code, machine_line, render_html, render_md, text, text_of
from harness.results.files import read_regular
from harness.results.model import Json, Profile, Result, Row, ScenarioResult, VariantInfo
from harness.results.results import ResultError, read

VERDICT_MARK = {"confirmed": "✓", "refuted": "✗", "inconclusive": "?"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TIMELINE_MAX_BYTES = 64 << 20  # a timeline picture is a few hundred kB
PLAIN_HREF = re.compile(r"(?:\.\./)*[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)*")  # what render.py links


def default_out(result_path: Path) -> Path:
    """The report's folder: next to the result file, named after its stem."""
    return result_path.with_suffix("")


# ---------------------------------------------------------------------------------------------- numbers

def fmt_value(key: str, v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and key.endswith("_s"):
        return fmt_s(float(v))
    return fmt_num(v)


# ---------------------------------------------------------------------------------------------- content

def _environment_blocks(result: Result, result_name: str) -> list[Block]:
    env = result.environment
    host = env.host or {}  # the host's facts: keys are the facts' names (data)
    driver = f", driver {text(host['driver'])}" if host.get("driver") else ""  # host: data
    items = [f"GPU: **{text(env.gpu or 'none (CPU only)')}**{driver}",
             f"host: {text(host.get('platform', '—'))}, {text(host.get('cpus', '—'))} CPUs, python "
             f"{text(host.get('python', '—'))}, numpy {text(host.get('numpy', '—'))}, hypothesis "
             f"{text(host.get('hypothesis', '—'))}",
             f"size {code(result.size)}, seed {or_else(result.seed, '—')}, "
             f"{or_else(result.examples, '—')} equivalence examples per scenario, "
             f"isolation {code(or_else(result.isolation, '—'))}",
             f"run {text(result.created)} → {text(or_else(result.finished, '—'))}; result file {code(result_name)}; "
             f"triptych code {code(host['code']) if host.get('code') else 'unknown (no .git where it ran)'}"]
    if result.command:
        items.append("command: " + code(" ".join(map(str, result.command))))
    items.append(machine_line(env.machine or {}))
    rows = []
    for fw, info in (env.frameworks or {}).items():
        e = info.env or {}  # the backend's own facts: keys are the backend's (data)
        extra = "; ".join(text(f"{k} {_flat(v)}") for k, v in e.items()
                          if k not in ("version", "device", "float32_matmul"))
        # e: the backend's facts (data)
        rows.append([f"**{text(fw)}**", text(e.get("version", "—")),
                     ("yes", "ok") if info.available else ("no", "bad"),
                     text(e.get("device") or or_else(info.why, "")), text(e.get("float32_matmul", "—")), extra or "—"])
    return [("h", 2, "Environment", "environment"), ("ul", items),
            ("table", ["framework", "version", "available", "device / why", "float32 matmul", "more"], rows)]


def _flat(v: Any) -> str:
    """A nested value of the environment as text a reader can scan, not a Python dict."""
    if isinstance(v, dict):
        return ", ".join(f"{k}: {_flat(x)}" for k, x in v.items()) or "—"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(_flat, v)) or "—"
    return "—" if v is None else str(v)


def _summary_blocks(result: Result) -> list[Block]:
    rows = []
    for name, scn in result.scenarios.items():
        status = scn.equivalence.status if scn.equivalence is not None else None
        counts = {k: sum(c.verdict == k for c in scn.claims or []) for k in VERDICT_MARK}
        problems = [r for r in scn.rows if r.status in ("wrong", "error", "timeout", "crashed", "oom")]
        rows.append([f"[{text(name)}](#{name})", text(or_else(scn.title, "")),
                     (text(or_else(status, "not run")), {"passed": "ok", "failed": "bad"}.get(status, "")),
                     (f"{counts['confirmed']} ✓ · {counts['refuted']} ✗ · {counts['inconclusive']} ?", ""),
                     (f"{len(problems)} rows" if problems else "—", "bad" if problems else "")])
    for nr in result.not_run or []:
        rows.append([text(nr.scenario), text(nr.why), ("not run", "bad"), ("—", ""), ("—", "")])
    _, problems = summary_status(result)
    paras = [("p", f"{head}: " + "; ".join(code(p) for p in problems if p.kind == kind) + ".")
             for kind, head in (("failed", "**Checks that failed**"), ("incomplete", "**Not run**"),
                                ("refuted", "**Claims the numbers refuted** (findings, not failed checks)"))
             if any(p.kind == kind for p in problems)]
    if not problems:
        paras = [("p", "Every check passed, and no claim was refuted.")]
    elif not any(p.kind in ("failed", "incomplete") for p in problems):
        paras.insert(0, ("p", "No check failed; the numbers refuted some claims."))
    return [("h", 2, "Summary", "summary"), *paras,
            ("table", ["scenario", "concept", "equivalence", "claims ✓ confirmed · ✗ refuted · ? inconclusive",
                       "failed rows"], rows)]


def _timing_table(scn: ScenarioResult, fws: list[str]) -> Block:
    points = points_of(scn)
    headers = (["point"] if len(points) > 1 else []) + [  # the table's headers (a list), not keys
        "variant", "framework", "status", "device-done median [q1–q3]", "spread", "host-return",
        "host-return / device-done",
        "kernel", "% of floor", "host syncs", "first call", "checked", "metrics"]
    rows: list[list[Any]] = []
    for i in range(len(points)):
        for v in variants_of(scn):
            for fw in fws:
                r = find_row(scn, fw, v.name, i)
                if r is None:
                    continue
                lead = ([text(point_label(scn, i))] if len(points) > 1 else []) + [
                    code(v.name) + (" (hazard)" if v.hazard else ""), text(fw)]
                if not r.timed:  # one cell across the rest of the row
                    rows.append(lead + [(text(f"{r.status}: {or_else(r.reason, '')}"),
                                         "muted" if r.status == "skipped" else "bad", len(headers) - len(lead))])
                    continue
                rows.append(lead + _timed_cells(r, v))
    return _drop_empty_columns(("table", headers, rows), keep=len(headers) - 10)


def _timed_cells(r: Row, v: VariantInfo) -> list[Any]:
    """A timed row's cells of the timings table, from its status on."""
    t = r.timing
    dd, hr, ev = t.device_done, t.host_return, kernel_of(t)
    sp = dd.spread
    chk = r.check
    if v.hazard:
        checked = (f"wrong {or_else(chk and chk.wrong, 0)}/{or_else(chk and chk.checked, 0)} runs", "hazard")
    elif r.status == "wrong":
        checked = (f"WRONG: {text(or_else(chk and chk.worst, ''))}", "bad")
    else:
        checked = text(f"{or_else(chk.checked, 0)} runs vs {or_else(chk.against, '—')}") if chk else "—"
    # metrics: keys are metric names (data)
    metrics = "; ".join(text(f"{k} {fmt_num(val)}") for k, val in sorted((t.metrics or {}).items()))
    return [
        (text(r.status), "ok" if r.status == "ok" else "bad"),
        f"**{fmt_s(dd.median)}** [{fmt_s(dd.q1)}–{fmt_s(dd.q3)}]",
        (f"±{100 * sp:.0f}%" + (" !" if sp > HIGH_SPREAD else ""), "warn" if sp > HIGH_SPREAD else ""),
        fmt_s(hr.median),
        f"{hr.median / dd.median:.3f}" if dd.median else "—",
        fmt_s(ev.median) if ev else "—",
        fmt_pct(pct_of_floor(r)) if pct_of_floor(r) is not None else "—",
        str(r.host_syncs) if r.host_syncs is not None else "—",
        fmt_s(t.first_call_s),
        checked,
        metrics or "—",
    ]


def _drop_empty_columns(table: Block, keep: int) -> Block:
    """Columns after the first `keep` that hold nothing anywhere are left out."""
    _, headers, rows = table
    timed_rows = [r for r in rows if len(r) == len(headers)]  # rows with a spanning cell hold nothing further on
    cols = [j for j in range(len(headers)) if j < keep or any(text_of(r[j]) not in ("", "—") for r in timed_rows)]
    out = []
    for r in rows:
        if len(r) == len(headers):
            out.append([r[j] for j in cols])
        else:
            text, cls, _ = r[-1]
            out.append(r[:-1] + [(text, cls, len(cols) - len(r) + 1)])
    return ("table", [headers[j] for j in cols], out)


def _claims_table(scn: ScenarioResult, fws: list[str]) -> Block | None:
    claims = scn.claims or []
    if not claims:
        return None
    sweep = len(scn.points or [{}]) > 1
    keys: list[tuple[str, int]] = []
    for c in claims:
        k = (c.claim, c.point or 0)
        if k not in keys:
            keys.append(k)
    in_use = [fw for fw in fws if any(c.framework == fw for c in claims)]
    rows = []
    for cid, point in keys:
        cs = [c for c in claims if c.claim == cid and (c.point or 0) == point]
        row: list[Any] = [text(cs[0].text) + (f" — at {text(point_label(scn, point))}" if sweep else "")]
        for fw in in_use:
            c = next((c for c in cs if c.framework == fw), None)
            if c is None:
                row.append(("not judged", "muted"))
                continue
            # numbers: keys are the figures' names (data)
            numbers = ", ".join(text(f"{k} {fmt_value(k, v)}") for k, v in (c.numbers or {}).items())
            cls = {"confirmed": "ok", "refuted": "bad"}.get(c.verdict, "warn")
            row.append((f"**{VERDICT_MARK.get(c.verdict, '')} {text(c.verdict)}** — {text(c.evidence)}"
                        + (f" ({numbers})" if numbers else ""), cls))
        rows.append(row)
    return ("table", ["claim"] + in_use, rows)  # headers (a list), not a key


def _checks_blocks(scn: ScenarioResult) -> list[Block]:
    items = []
    eq = scn.equivalence
    if eq:
        items.append(f"equivalence under hypothesis: **{text(eq.status)}** ({eq.examples} examples; "
                     f"{text(', '.join(or_else(eq.frameworks, [])) or 'no framework')})"
                     + (f": {text(eq.message)}" if eq.status == "failed" and eq.message else ""))
    for xc in scn.cross_framework or []:
        at = f" at {text(xc.label)}" if xc.label else ""
        items.append(f"full-size outputs across frameworks{at}: **{text(xc.status)}** "
                     f"({text(', '.join(xc.frameworks))}; {xc.elements} sampled elements)"
                     + "".join(f"; {text(p)}" for p in or_else(xc.problems, [])))
    hazards = [r for r in scn.rows if r.hazard and r.timed]
    for r in hazards:
        chk = r.check
        at = f" at {text(r.label)}" if r.label else ""
        items.append(f"hazard {code(r.variant)} in {text(r.framework)}{at}: wrong in {or_else(chk and chk.wrong, 0)} of "
                     f"{or_else(chk and chk.checked, 0)} timed runs"
                     + (f" (first: {text(chk.worst)})" if chk and chk.worst else ""))
    return [("h", 3, "Checks", None), ("ul", items)] if items else []


def _timeline(scn: ScenarioResult, result_dir: Path) -> tuple[bytes | None, str]:
    """(the PNG's bytes, a note) for the scenario's timeline picture; (None, "") when it has none."""
    tl = scn.timelines
    if tl is None or not tl.png:
        return None, ""

    path = result_dir / str(tl.png)  # the schema allows no '..' and no absolute path in it
    if not path.exists() and not path.is_symlink():
        return None, f"timeline picture {code(tl.png)} could not be read next to the result (no such file)"
    try:
        if not path.resolve().is_relative_to(result_dir.resolve()):
            raise ValueError("it leads outside the result's folder")
        data = read_regular(path, TIMELINE_MAX_BYTES)
    except (OSError, ValueError) as e:
        raise ResultError(f"{path}: the timeline picture the result names is refused: "
                          f"{getattr(e, 'strerror', None) or e}") from None
    if not data.startswith(PNG_MAGIC):
        return None, f"timeline picture {code(tl.png)} is not a PNG"
    return data, ""


def _profiles(scn: ScenarioResult, result_dir: Path, out: Path | None) -> list[Block]:
    """Links to each row's trace of its profiled repeat (compare --profile), relative to the report. A
    file is linked only where it is a regular file inside the result's folder; it is never opened."""

    items = []
    for r in scn.rows:
        prof = r.profile
        if not isinstance(prof, Profile):
            continue
        at = f" \\[{text(r.label)}\\]" if r.label else ""
        links = []
        for name in (prof.trace, prof.xplane):
            if not name:
                continue
            path = result_dir / str(name)  # the schema allows no '..' and no absolute path in it
            try:
                regular = stat.S_ISREG(os.lstat(path).st_mode) and path.resolve().is_relative_to(result_dir.resolve())
            except OSError:
                regular = False
            href = os.path.relpath(path, out if out is not None else result_dir).replace(os.sep, "/")
            if regular and PLAIN_HREF.fullmatch(href):  # the report's own link, to a file it found there
                links.append(f"[{text(path.name)}]({href})")
            else:
                links.append(f"{code(name)} (" + ("not found next to the result)" if not regular
                                                  else "not linked: not a plain name)"))
        what = ", ".join(links) or f"no trace: {text(prof.why or 'none written')}"
        tool = f" — {text(prof.tool)}" if prof.tool else ""
        items.append(f"{code(r.framework + '/' + r.variant)}{at}: {what}{tool}")
    if not items:
        return []
    return [("h", 3, "Profiles", None),
            ("p", "One extra, untimed repeat of each row under the framework's own profiler (`compare --profile`); "
                  "no figure above comes from it. In Nsight Systems the same rows are the NVTX ranges "
                  "`scenario/framework/variant[point] warm-up`, `... repeats` and `... profiled`."),
            ("ul", items)]


def _figures(name: str, scn: ScenarioResult, fws: list[str], result_path: Path, out: Path | None,
             images: dict[str, bytes]) -> list[Block]:
    """The chart, the timings table and the timeline of one scenario; their pictures go into images."""
    blocks: list[Block] = []
    png = chart_png(scn, fws)
    if png is not None:
        images[f"{name}.png"] = png
        how = ("bars: device-done median, whiskers its IQR; ◇ host-return median (IQR); hatched: hazard"
               if len(points_of(scn)) <= 1 else
               ("lines: device-done median over the sweep, band its IQR; ◇ dotted: host-return median"
                if ordered_sweep(points_of(scn)) else
                "dots: device-done median at each point, whiskers its IQR; ◇ host-return median"))
        blocks.append(("img", f"{name}.png", f"{name}: variants × frameworks",
                       how + ("; dashes: the physical floor" if any(r.floor_s for r in scn.rows) else "")
                       + ". Log scale."))
    if scn.rows:
        blocks += [("h", 3, "Timings: host-return vs device-done", None), _timing_table(scn, fws)]
        # What each metric meant when the run measured it: the result's own text, none in files older than it
        # (metrics_doc, metrics: keys are metric names, data)
        mdoc = {k: v for k, v in (scn.metrics_doc or {}).items()
                if any(k in (r.timing.metrics or {}) for r in scn.rows if r.timed)}
        if mdoc:
            blocks.append(("ul", [f"{code(k)}: {text(v)}" for k, v in mdoc.items()]))
        if scn.floor_why:
            blocks.append(("p", f"Floor: {text(scn.floor_why)}."))
    else:
        blocks.append(("p", "Not timed in this run."))
    tl_png, tl_note = _timeline(scn, result_path.parent)
    if tl_png is not None:
        tl_path = result_path.parent / scn.timelines.png
        tl_name = tl_path.name if out is not None and tl_path.parent.resolve() == out.resolve() \
            else f"{name}.timeline.png"
        images[tl_name] = tl_png
        trace = scn.timelines.trace
        blocks += [("h", 3, "Timeline", None),
                   ("img", tl_name, f"{name}: timeline",
                    "what host and device did over time, every framework" +
                    (f"; the trace it was drawn from: {code(trace)} (next to the result file)" if trace else ""))]
    elif tl_note:
        blocks += [("h", 3, "Timeline", None), ("p", tl_note)]
    return blocks + _profiles(scn, result_path.parent, out)


def build(doc: Result | Json, result_path: Path, out: Path | None = None) -> dict[str, bytes]:
    """Every file of the report, rendered in memory: {name: bytes}. A timeline picture already in
    `out` is embedded and referenced, not written again."""
    result = as_result(doc)
    fws = frameworks_of(result)
    env = result.environment
    gpu = text(env.gpu or "CPU only (no GPU)")
    # env: the backend's own facts (data)
    versions = ", ".join(text(f"{fw} {(i.env or {}).get('version', '')}".strip())
                         for fw, i in (env.frameworks or {}).items() if i.available)
    title = f"triptych report — {env.gpu or 'CPU only (no GPU)'} · {result.size} · {result.created}"
    images: dict[str, bytes] = {}
    blocks: list[Block] = [
        ("h", 1, text(title), "top"),
        ("p", f"Each scenario is one concept of the GPU host/device paradigm, written in {in_prose(display=True)}, "
              "checked for equivalence and timed on one clock. " + _clocks_said(result) +
              f" (marked ! above {100 * HIGH_SPREAD:.0f}%)."),
    ]
    blocks += _summary_blocks(result)
    blocks += _environment_blocks(result, result_path.name)
    blocks += measuring_blocks(result)
    for n, (name, scn) in enumerate(result.scenarios.items(), 1):
        blocks += _scenario_blocks(n, name, scn, result, gpu, versions)
        blocks += _figures(name, scn, fws, result_path, out, images)
        claims = _claims_table(scn, fws)
        if claims is not None:
            blocks += [("h", 3, f"Claims, judged on {gpu}", None), claims]
        blocks += _checks_blocks(scn)
    md = render_md(blocks)
    page = render_html(blocks, images, title=title)
    there = {n for n in images if out is not None and (out / n).is_file() and n.startswith("timeline_")}
    return {"report.md": md.encode(), "report.html": page.encode(), **{n: b for n, b in images.items()
                                                                        if n not in there}}


def _scenario_blocks(n: int, name: str, scn: ScenarioResult, result: Result, gpu: str, versions: str) -> list[Block]:
    """A scenario's heading, concept, where it was measured, its variants and its points."""
    blocks: list[Block] = [("h", 2, f"{n}. {text(name)} — {text(or_else(scn.title, ''))}", name),
                           ("quote", text(or_else(scn.concept, ""))),
                           ("p", f"Measured on {gpu} with {versions or 'no framework'}; size {code(result.size)}, "
                                 f"seed {or_else(result.seed, '—')}.")]
    vitems = [code(v.name) + (" (hazard)" if v.hazard else "") + text(gpu_label(v))
              + (f" — {text(v.doc)}" if v.doc else "") for v in variants_of(scn)]
    blocks += [("p", "Variants, baseline first:"), ("ul", vitems)]
    points = scn.points or []  # each point's params: keys are parameter names (data)
    if points:
        keys = list(dict.fromkeys(k for p in points for k in p if k != "label"))  # in order, from every point
        # headers (a list), not a key
        blocks.append(("table", (["point"] if len(points) > 1 else []) + [text(k) for k in keys],
                       [([text(point_label(scn, i))] if len(points) > 1 else [])
                        + [text(p.get(k, "")) for k in keys] for i, p in enumerate(points)]))
    return blocks


# ---------------------------------------------------------------------------------------------- writing

def make_report(result: str | Path, out: str | Path | None = None, doc: Result | Json | None = None) -> Path:
    """Render the report of a result file (read and validated, unless `compare` hands over the result
    it just wrote) and write it; ResultError / OutputError (one line) on bad input, before any write."""
    path = Path(result)
    doc = read(path) if doc is None else as_result(doc)
    dest = Path(out) if out is not None else default_out(path)
    if out is None:  # beside the result: its own folder, never where a link put there leads
        own_folder(dest, path.parent)
    check_writable(dest)
    files = build(doc, path, dest)
    return write_files(dest, files, last="report.html")[-1]


def _clocks_said(result: Result) -> str:
    """The report's words for its clocks and its medians: a file that says its rows' medians are the
    processes' (row_median) gets them said so; an older file, which pooled the repeats, keeps its words."""
    rows = [r for scn in (result.scenarios or {}).values() for r in scn.rows or []]
    if result.row_median == "processes":
        return ("**device-done**: from the call until the device finished its work (a device-wide synchronize "
                "where the framework has one, else every output of the call ready); **host-return**: until the call handed "
                "control back to Python; **kernel**: how long the call occupied the device, per call (" + kernel_said(rows)
                + "). The median of the worker processes' medians; spread = IQR / median of every repeat")
    return ("**device-done**: from the call until the device finished (a full synchronize); **host-return**: "
            "until the call handed control back to Python. Medians over the repeats, spread = IQR / median")
