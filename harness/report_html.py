"""The report a person reads after `compare`: report.md and a self-contained report.html.

`python -m harness report RESULT.json [--out DIR]` (and `compare`, at its end) renders one result
file. Per scenario: the concept, a chart of variants x frameworks (bars: device-done median with its
IQR; diamonds: host-return; dashes: the physical floor; a sweep gets one panel per variant over its
points), a table with host-return against device-done and % of the floor, the timeline picture where
the run recorded one, the claim verdicts with their numbers, the checks, and the environment.

Everything is rendered in memory first (report.md, report.html, one PNG per chart, the timelines
copied in for the Markdown), then written: into a temporary folder renamed into place when DIR is new,
file by file with os.replace when it exists. A bad input writes nothing.
"""
from __future__ import annotations

import base64
import html
import io
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable

from harness.report import (HIGH_SPREAD, find_row, fmt_num, fmt_pct, fmt_s, frameworks_of, points_of, spread,
                            summary_status, timed)
from harness.results import ResultError

COLOURS = {"torch": "#ee4c2c", "cupy": "#2e8b57", "jax": "#4a6fd8"}
VERDICT_MARK = {"confirmed": "✓", "refuted": "✗", "inconclusive": "?"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# A tiny document model rendered twice (Markdown and HTML). Inline text may use `code` and **bold**.
Block = tuple  # ("h", level, text, anchor) | ("p", text) | ("quote", text) | ("ul", [text]) |
#                ("table", headers, rows), each cell str, (str, css class) or (str, css class, columns spanned) |
#                ("img", file name, alt, caption)


def default_out(result_path: Path) -> Path:
    """The report's folder: next to the result file, named after its stem."""
    return result_path.with_suffix("")


# ---------------------------------------------------------------------------------------------- numbers

def fmt_bytes_rate(bps: float) -> str:
    return f"{bps / 1e12:.2f} TB/s" if bps >= 1e12 else f"{bps / 1e9:.1f} GB/s"


def fmt_value(key: str, v: Any) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and key.endswith("_s"):
        return fmt_s(float(v))
    return fmt_num(v)


def _point_label(scn: dict[str, Any], i: int) -> str:
    points = points_of(scn)
    return str(points[i].get("label") or f"point {i}") if i < len(points) else f"point {i}"


def _variants(scn: dict[str, Any]) -> list[dict[str, Any]]:
    """The scenario's variants in spec order, plus any that only appear in rows."""
    vs = list(scn.get("variants") or [])
    known = {v["name"] for v in vs}
    for r in scn["rows"]:
        if r["variant"] not in known:
            known.add(r["variant"])
            vs.append({"name": r["variant"], "doc": "", "hazard": bool(r.get("hazard")), "gpu_only": False})
    return vs


# ---------------------------------------------------------------------------------------------- charts

def tick(seconds: float) -> str:
    """A compact axis label: 100 ms, 2.5 µs."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if seconds >= scale * 0.999:
            return f"{seconds / scale:g} {unit}"
    return f"{seconds:g} s"


def ordered_sweep(points: list[dict[str, Any]]) -> bool:
    """True when the points differ only in numbers (sizes, counts): a line between them means something.
    Points that differ in a kind (device_creation's normal and fill) are not on one axis."""
    keys = {k for p in points for k in p if k not in ("label", "seed")}
    varying = [k for k in keys if len({repr(p.get(k)) for p in points}) > 1]
    return all(isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool)
               for k in varying for p in points)


def chart_png(scn: dict[str, Any], fws: list[str]) -> bytes | None:
    """Variants x frameworks: bars (one point) or one panel per variant over a sweep's points."""
    if not any(timed(r) for r in scn["rows"]):
        return None
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter, LogLocator

    points = points_of(scn)
    variants = [v for v in _variants(scn) if any(r["variant"] == v["name"] for r in scn["rows"])]
    times = [r["timing"][c][k] for r in scn["rows"] if timed(r) for c in ("device_done", "host_return")
             for k in ("q1", "median", "q3")] + [r["floor_s"] for r in scn["rows"] if timed(r) and r.get("floor_s")]
    positive = [t for t in times if isinstance(t, (int, float)) and t > 0]
    if not positive:
        return None
    lo, hi = min(positive) / 2.5, max(positive) * 2.5
    fmt = FuncFormatter(lambda y, _: tick(y))

    def style(ax: Any) -> None:
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        ax.yaxis.set_major_locator(LogLocator(base=10))
        ax.yaxis.set_major_formatter(fmt)
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: ""))
        ax.grid(axis="y", which="major", alpha=0.3)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)

    def iqr(stats: dict[str, Any]) -> list[list[float]]:
        return [[max(stats["median"] - stats["q1"], 0.0)], [max(stats["q3"] - stats["median"], 0.0)]]

    ran = {r["framework"] for r in scn["rows"] if timed(r)}
    legend = [Patch(color=COLOURS.get(f, "grey"), label=f if f in ran else f"{f} (not timed)") for f in fws]
    legend += [Line2D([], [], marker="D", color="black", linestyle="none", markersize=4, label="host-return (IQR)")]
    has_floor = any(timed(r) and r.get("floor_s") for r in scn["rows"])
    if has_floor:
        legend.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label="physical floor"))

    if len(points) == 1:
        fig = Figure(figsize=(max(6.0, 1.0 + 1.6 * len(variants)), 3.8), dpi=110)
        ax = fig.add_subplot()
        style(ax)
        width = 0.8 / max(1, len(fws))
        for i, v in enumerate(variants):
            for j, fw in enumerate(fws):
                x = i - 0.4 + width * (j + 0.5)
                r = find_row(scn, fw, v["name"], 0)
                if not timed(r):
                    if r is not None:
                        ax.text(x, lo * 1.15, r["status"], rotation=90, ha="center", va="bottom", fontsize=7,
                                color="grey")
                    continue
                dd, hr = r["timing"]["device_done"], r["timing"]["host_return"]
                # From the axis' bottom: a log axis has no zero.
                ax.bar(x, dd["median"] - lo, width * 0.92, bottom=lo, color=COLOURS.get(fw, "grey"), alpha=0.85,
                       hatch="//" if v.get("hazard") else None, edgecolor="white", linewidth=0)
                ax.errorbar(x, dd["median"], yerr=iqr(dd), fmt="none", ecolor="black", elinewidth=1, capsize=3)
                ax.errorbar(x, hr["median"], yerr=iqr(hr), fmt="D", color="black", markersize=4,
                            markerfacecolor="white", elinewidth=0.8, capsize=2)
                if r.get("floor_s"):
                    ax.hlines(r["floor_s"], x - width / 2, x + width / 2, colors="black", linestyles="--",
                              linewidth=1)
        ax.set_xticks(range(len(variants)))
        ax.set_xticklabels([v["name"] + ("\n(hazard)" if v.get("hazard") else "") for v in variants], fontsize=9)
        ax.set_xlim(-0.6, len(variants) - 0.4)
        ax.set_ylabel("device-done (bars, IQR whiskers)", fontsize=8)
        ax.legend(handles=legend, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    else:
        ncols = min(3, len(variants))
        nrows = -(-len(variants) // ncols)
        fig = Figure(figsize=(4.2 * ncols + 1.4, 3.3 * nrows), dpi=110)
        axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
        labels = [_point_label(scn, i) for i in range(len(points))]
        ordered = ordered_sweep(points)
        for k, v in enumerate(variants):
            ax = axes[k // ncols][k % ncols]
            style(ax)
            ax.set_title(v["name"] + (" (hazard)" if v.get("hazard") else ""), fontsize=9)
            floors: dict[int, float] = {}
            for j, fw in enumerate(fws):
                pts = [(i, r) for i in range(len(points)) if timed(r := find_row(scn, fw, v["name"], i))]
                if not pts:
                    continue
                dodge = 0.04 if ordered else 0.1
                xs = [i + dodge * (j - (len(fws) - 1) / 2) for i, _ in pts]  # dodged: equal values stay visible
                dd = [r["timing"]["device_done"] for _, r in pts]
                hr = [r["timing"]["host_return"] for _, r in pts]
                c = COLOURS.get(fw, "grey")
                if ordered:  # a sweep over sizes: lines, the IQR as a band
                    ax.plot(xs, [s["median"] for s in dd], marker="o", markersize=4, color=c, linewidth=1.5)
                    ax.fill_between(xs, [s["q1"] for s in dd], [s["q3"] for s in dd], color=c, alpha=0.2,
                                    linewidth=0)
                else:  # points of different kinds: nothing lies between them, so no line joins them
                    ax.errorbar(xs, [s["median"] for s in dd], yerr=[[iqr(s)[0][0] for s in dd],
                                                                     [iqr(s)[1][0] for s in dd]],
                                fmt="o", color=c, markersize=4, elinewidth=1, capsize=3)
                ax.errorbar(xs, [s["median"] for s in hr],
                            yerr=[[iqr(h)[0][0] for h in hr], [iqr(h)[1][0] for h in hr]],
                            fmt="D", color=c, markersize=3.5, markerfacecolor="white",
                            linestyle=":" if ordered else "none", linewidth=1)
                floors.update({i: r["floor_s"] for i, r in pts if r.get("floor_s")})
            for i in range(len(points)):  # what did not run, said where it would be
                missing = [f"{fw}: {r['status']}" for fw in fws if (r := find_row(scn, fw, v["name"], i))
                           and not timed(r)]
                if missing:
                    ax.text(i, lo * 1.15, "\n".join(missing), ha="center", va="bottom", fontsize=6, color="grey")
            if floors and ordered:
                fx = sorted(floors)
                ax.plot(fx, [floors[i] for i in fx], color="black", linestyle="--", linewidth=1)
            for i, f in (floors.items() if not ordered else ()):
                ax.hlines(f, i - 0.25, i + 0.25, colors="black", linestyles="--", linewidth=1)
            ax.set_xticks(range(len(points)))
            ax.set_xticklabels(labels, fontsize=7, rotation=30 if len(points) > 4 else 0)
        for k in range(len(variants), nrows * ncols):
            axes[k // ncols][k % ncols].set_visible(False)
        axes[0][0].set_ylabel("device-done (lines, IQR band)" if ordered else "device-done (dots, IQR whiskers)",
                              fontsize=8)
        legend[len(fws)] = Line2D([], [], marker="D", color="black", linestyle=":" if ordered else "none",
                                  markersize=3.5,
                                  markerfacecolor="white", label="host-return")
        fig.legend(handles=legend, fontsize=7, loc="upper right", frameon=False)
    fig.tight_layout(rect=(0, 0, 0.86 if len(points) > 1 else 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------- content

def _environment_blocks(doc: dict[str, Any], result_name: str) -> list[Block]:
    env = doc["environment"]
    host = env.get("host", {})
    driver = f", driver {host['driver']}" if host.get("driver") else ""
    items = [f"GPU: **{env.get('gpu') or 'none (CPU only)'}**{driver}",
             f"host: {host.get('platform', '—')}, {host.get('cpus', '—')} CPUs, python {host.get('python', '—')}, "
             f"numpy {host.get('numpy', '—')}, hypothesis {host.get('hypothesis', '—')}",
             f"size `{doc['size']}`, seed {doc.get('seed', '—')}, "
             f"{doc.get('examples', '—')} equivalence examples per scenario, "
             f"isolation `{doc.get('isolation', '—')}`",
             f"run {doc['created']} → {doc.get('finished', '—')}; result file `{result_name}`; triptych code "
             f"{'`' + host['code'] + '`' if host.get('code') else 'unknown (no .git where it ran)'}"]
    if doc.get("command"):
        items.append("command: `" + " ".join(map(str, doc["command"])) + "`")
    machine = env.get("machine") or {}
    if machine:
        parts = [f"{label} {fmt_bytes_rate(machine[k])}" for k, label in
                 (("hbm_Bps", "device copy (read+write)"), ("h2d_Bps", "host→device pinned"),
                  ("d2h_Bps", "device→host pinned")) if k in machine]
        if "fp32_flops" in machine:
            parts.append(f"float32 GEMM {machine['fp32_flops'] / 1e12:.1f} TFLOP/s")
        items.append("machine ceilings, measured by raw CUDA through CuPy in this run (the floors' denominators): "
                     + "; ".join(parts))
    else:
        items.append("machine ceilings: not measured in this run (they need CuPy on a GPU and the full size), "
                     "so no physical floors")
    rows = []
    for fw, info in env.get("frameworks", {}).items():
        e = info.get("env", {})
        extra = ", ".join(f"{k} {v}" for k, v in e.items() if k not in ("version", "device", "float32_matmul"))
        rows.append([f"**{fw}**", e.get("version", "—"), ("yes", "ok") if info.get("available") else ("no", "bad"),
                     e.get("device") or info.get("why", ""), e.get("float32_matmul", "—"), extra or "—"])
    return [("h", 2, "Environment", "environment"), ("ul", items),
            ("table", ["framework", "version", "available", "device / why", "float32 matmul", "more"], rows)]


def _summary_blocks(doc: dict[str, Any]) -> list[Block]:
    rows = []
    for name, scn in doc["scenarios"].items():
        eq = scn.get("equivalence") or {}
        counts = {k: sum(c["verdict"] == k for c in scn.get("claims", [])) for k in VERDICT_MARK}
        problems = [r for r in scn["rows"] if r["status"] in ("wrong", "error", "timeout", "crashed", "oom")]
        rows.append([f"[{name}](#{name})", scn.get("title", ""),
                     (eq.get("status", "not run"), {"passed": "ok", "failed": "bad"}.get(eq.get("status"), "")),
                     (f"{counts['confirmed']} ✓ · {counts['refuted']} ✗ · {counts['inconclusive']} ?", ""),
                     (f"{len(problems)} rows" if problems else "—", "bad" if problems else "")])
    for nr in doc.get("not_run", []):
        rows.append([nr["scenario"], nr["why"], ("not run", "bad"), ("—", ""), ("—", "")])
    ok, problems = summary_status(doc)
    text = ("Every check passed." if ok else "Problems: " + "; ".join(f"`{p}`" for p in problems) + ".")
    return [("h", 2, "Summary", "summary"), ("p", text),
            ("table", ["scenario", "concept", "equivalence", "claims ✓ confirmed · ✗ refuted · ? inconclusive",
                       "failed rows"], rows)]


def _timing_table(scn: dict[str, Any], fws: list[str]) -> Block:
    points = points_of(scn)
    headers = (["point"] if len(points) > 1 else []) + [
        "variant", "framework", "status", "device-done median [q1–q3]", "spread", "host-return",
        "host-return / device-done",
        "device events", "% of floor", "host syncs", "first call", "checked", "metrics"]
    rows: list[list[Any]] = []
    for i in range(len(points)):
        for v in _variants(scn):
            for fw in fws:
                r = find_row(scn, fw, v["name"], i)
                if r is None:
                    continue
                lead = ([_point_label(scn, i)] if len(points) > 1 else []) + [
                    f"`{v['name']}`" + (" (hazard)" if v.get("hazard") else ""), fw]
                if not timed(r):  # one cell across the rest of the row
                    rows.append(lead + [(f"{r['status']}: {r.get('reason', '')}", "muted" if r["status"] == "skipped"
                                         else "bad", len(headers) - len(lead))])
                    continue
                t = r["timing"]
                dd, hr, ev = t["device_done"], t["host_return"], t.get("device_events")
                sp = spread(dd)
                chk = r.get("check") or {}
                if v.get("hazard"):
                    checked = (f"wrong {chk.get('wrong', 0)}/{chk.get('checked', 0)} runs", "hazard")
                elif r["status"] == "wrong":
                    checked = (f"WRONG: {chk.get('worst', '')}", "bad")
                else:
                    checked = f"{chk.get('checked', 0)} runs vs {chk.get('against', '—')}" if chk else "—"
                metrics = "; ".join(f"{k} {fmt_num(val)}" for k, val in sorted(t.get("metrics", {}).items()))
                rows.append(lead + [
                    (r["status"], "ok" if r["status"] == "ok" else "bad"),
                    f"**{fmt_s(dd['median'])}** [{fmt_s(dd['q1'])}–{fmt_s(dd['q3'])}]",
                    (f"±{100 * sp:.0f}%" + (" !" if sp > HIGH_SPREAD else ""), "warn" if sp > HIGH_SPREAD else ""),
                    fmt_s(hr["median"]),
                    f"{hr['median'] / dd['median']:.3f}" if dd["median"] else "—",
                    fmt_s(ev["median"]) if ev else "—",
                    fmt_pct(r["pct_of_floor"]) if "pct_of_floor" in r else "—",
                    str(r["host_syncs"]) if r.get("host_syncs") is not None else "—",
                    fmt_s(t.get("first_call_s")),
                    checked,
                    metrics or "—",
                ])
    return _drop_empty_columns(("table", headers, rows), keep=len(headers) - 10)


def _drop_empty_columns(table: Block, keep: int) -> Block:
    """Columns after the first `keep` that hold nothing anywhere are left out."""
    _, headers, rows = table
    timed_rows = [r for r in rows if len(r) == len(headers)]  # rows with a spanning cell hold nothing further on
    cols = [j for j in range(len(headers)) if j < keep or any(_text(r[j]) not in ("", "—") for r in timed_rows)]
    out = []
    for r in rows:
        if len(r) == len(headers):
            out.append([r[j] for j in cols])
        else:
            text, cls, _ = r[-1]
            out.append(r[:-1] + [(text, cls, len(cols) - len(r) + 1)])
    return ("table", [headers[j] for j in cols], out)


def _text(c: Any) -> str:
    return c[0] if isinstance(c, tuple) else str(c)


def _claims_table(scn: dict[str, Any], fws: list[str]) -> Block | None:
    claims = scn.get("claims") or []
    if not claims:
        return None
    sweep = len(scn.get("points") or [{}]) > 1
    keys: list[tuple[str, int]] = []
    for c in claims:
        k = (c["claim"], c.get("point", 0))
        if k not in keys:
            keys.append(k)
    in_use = [fw for fw in fws if any(c["framework"] == fw for c in claims)]
    rows = []
    for cid, point in keys:
        cs = [c for c in claims if c["claim"] == cid and c.get("point", 0) == point]
        row: list[Any] = [cs[0]["text"] + (f" — at {_point_label(scn, point)}" if sweep else "")]
        for fw in in_use:
            c = next((c for c in cs if c["framework"] == fw), None)
            if c is None:
                row.append(("not judged", "muted"))
                continue
            numbers = ", ".join(f"{k} {fmt_value(k, v)}" for k, v in (c.get("numbers") or {}).items())
            cls = {"confirmed": "ok", "refuted": "bad"}.get(c["verdict"], "warn")
            row.append((f"**{VERDICT_MARK.get(c['verdict'], '')} {c['verdict']}** — {c['evidence']}"
                        + (f" ({numbers})" if numbers else ""), cls))
        rows.append(row)
    return ("table", ["claim"] + in_use, rows)


def _checks_blocks(scn: dict[str, Any]) -> list[Block]:
    items = []
    eq = scn.get("equivalence")
    if eq:
        items.append(f"equivalence under hypothesis: **{eq['status']}** ({eq['examples']} examples; "
                     f"{', '.join(eq.get('frameworks', [])) or 'no framework'})"
                     + (f": {eq['message']}" if eq.get("status") == "failed" and eq.get("message") else ""))
    for xc in scn.get("cross_framework", []):
        at = f" at {xc['label']}" if xc.get("label") else ""
        items.append(f"full-size outputs across frameworks{at}: **{xc['status']}** ({', '.join(xc['frameworks'])}; "
                     f"{xc['elements']} sampled elements)" + "".join(f"; {p}" for p in xc.get("problems", [])))
    hazards = [r for r in scn["rows"] if r.get("hazard") and timed(r)]
    for r in hazards:
        chk = r.get("check") or {}
        at = f" at {r['label']}" if r.get("label") else ""
        items.append(f"hazard `{r['variant']}` in {r['framework']}{at}: wrong in {chk.get('wrong', 0)} of "
                     f"{chk.get('checked', 0)} timed runs" + (f" (first: {chk['worst']})" if chk.get("worst") else ""))
    return [("h", 3, "Checks", None), ("ul", items)] if items else []


def _timeline(scn: dict[str, Any], result_dir: Path) -> tuple[bytes | None, str]:
    """(the PNG's bytes, a note) for the scenario's timeline picture; (None, "") when it has none."""
    tl = scn.get("timelines")
    if not isinstance(tl, dict) or not tl.get("png"):
        return None, ""
    path = result_dir / str(tl["png"])
    try:
        data = path.read_bytes()
    except OSError as e:
        return None, f"timeline picture `{tl['png']}` could not be read next to the result ({e.strerror or e})"
    if not data.startswith(PNG_MAGIC):
        return None, f"timeline picture `{tl['png']}` is not a PNG"
    return data, ""


def _metrics_doc(name: str) -> dict[str, str]:
    from scenarios import get

    try:
        return dict(get(name).metrics_doc)
    except KeyError:  # a result from a scenario this checkout does not have
        return {}


def build(doc: dict[str, Any], result_path: Path) -> dict[str, bytes]:
    """Every file of the report, rendered in memory: {name: bytes}."""
    fws = frameworks_of(doc)
    env = doc["environment"]
    gpu = env.get("gpu") or "CPU only (no GPU)"
    versions = ", ".join(f"{fw} {i['env'].get('version', '')}".strip() for fw, i in env.get("frameworks", {}).items()
                         if i.get("available"))
    images: dict[str, bytes] = {}
    blocks: list[Block] = [
        ("h", 1, f"triptych report — {gpu} · {doc['size']} · {doc['created']}", "top"),
        ("p", "Each scenario is one concept of the GPU host/device paradigm, written in PyTorch, CuPy and JAX, "
              "checked for equivalence and timed on one clock. **device-done**: from the call until the device "
              "finished (a full synchronize); **host-return**: until the call handed control back to Python. "
              "Medians over the repeats, spread = IQR / median (marked ! above "
              f"{100 * HIGH_SPREAD:.0f}%)."),
    ]
    blocks += _summary_blocks(doc)
    blocks += _environment_blocks(doc, result_path.name)
    for n, (name, scn) in enumerate(doc["scenarios"].items(), 1):
        blocks += [("h", 2, f"{n}. {name} — {scn.get('title', '')}", name), ("quote", scn.get("concept", ""))]
        blocks.append(("p", f"Measured on {gpu} with {versions or 'no framework'}; size `{doc['size']}`, "
                            f"seed {doc.get('seed', '—')}."))
        vitems = [f"`{v['name']}`" + (" (hazard)" if v.get("hazard") else "") + (" [GPU only]" if v.get("gpu_only")
                  else "") + (f" — {v['doc']}" if v.get("doc") else "") for v in _variants(scn)]
        blocks += [("p", "Variants, baseline first:"), ("ul", vitems)]
        points = scn.get("points") or []
        if points:
            keys = list(dict.fromkeys(k for p in points for k in p if k != "label"))  # in order, from every point
            blocks.append(("table", (["point"] if len(points) > 1 else []) + keys,
                           [([_point_label(scn, i)] if len(points) > 1 else []) + [str(p.get(k, "")) for k in keys]
                            for i, p in enumerate(points)]))
        png = chart_png(scn, fws)
        if png is not None:
            images[f"{name}.png"] = png
            how = ("bars: device-done median, whiskers its IQR; ◇ host-return median (IQR); hatched: hazard"
                   if len(points_of(scn)) <= 1 else
                   ("lines: device-done median over the sweep, band its IQR; ◇ dotted: host-return median"
                    if ordered_sweep(points_of(scn)) else
                    "dots: device-done median at each point, whiskers its IQR; ◇ host-return median"))
            blocks.append(("img", f"{name}.png", f"{name}: variants × frameworks",
                           how + ("; dashes: the physical floor" if any(r.get("floor_s") for r in scn["rows"]) else "")
                           + ". Log scale."))
        if scn["rows"]:
            blocks += [("h", 3, "Timings: host-return vs device-done", None), _timing_table(scn, fws)]
            mdoc = {k: v for k, v in _metrics_doc(name).items()
                    if any(k in (r.get("timing") or {}).get("metrics", {}) for r in scn["rows"] if timed(r))}
            if mdoc:
                blocks.append(("ul", [f"`{k}`: {v}" for k, v in mdoc.items()]))
        else:
            blocks.append(("p", "Not timed in this run."))
        tl_png, tl_note = _timeline(scn, result_path.parent)
        if tl_png is not None:
            images[f"{name}.timeline.png"] = tl_png
            trace = (scn.get("timelines") or {}).get("trace")
            blocks += [("h", 3, "Timeline", None),
                       ("img", f"{name}.timeline.png", f"{name}: timeline",
                        "what host and device did over time, every framework" +
                        (f"; the trace it was drawn from: `{trace}` (next to the result file)" if trace else ""))]
        elif tl_note:
            blocks += [("h", 3, "Timeline", None), ("p", tl_note)]
        claims = _claims_table(scn, fws)
        if claims is not None:
            blocks += [("h", 3, f"Claims, judged on {gpu}", None), claims]
        blocks += _checks_blocks(scn)
    md = render_md(blocks)
    page = render_html(blocks, images, title=f"triptych report — {gpu} · {doc['size']} · {doc['created']}")
    return {"report.md": md.encode(), "report.html": page.encode(), **images}


# ---------------------------------------------------------------------------------------------- renderers

def _md_cells(row: list[Any]) -> list[str]:
    """A cell (text, class, span) fills `span` Markdown cells: the text, then empty ones."""
    out = []
    for c in row:
        out.append(_text(c).replace("|", "\\|").replace("\n", "<br>"))
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


_INLINE = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\((#[\w-]+)\)")


def inline_html(text: str) -> str:
    """Escape, then render `code`, **bold** and [links](#anchor)."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(f"<code>{html.escape(m.group(1))}</code>")
        elif m.group(2) is not None:
            out.append(f"<strong>{inline_html(m.group(2))}</strong>")
        else:
            out.append(f'<a href="{html.escape(m.group(4))}">{html.escape(m.group(3))}</a>')
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
figcaption{font-size:12px;color:#555}nav a{margin-right:12px}
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
                body.append("<nav>" + "".join(nav) + "</nav>")
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


# ---------------------------------------------------------------------------------------------- writing

def check_out(out: Path) -> None:
    """Bad --out: ResultError with one line, before anything is written."""
    if out.exists() and not out.is_dir():
        raise ResultError(f"{out}: exists and is not a folder")
    probe = out
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ResultError(f"cannot write to {out}: {probe} is not a writable folder")


def write(files: dict[str, bytes], out: Path) -> Path:
    """All files land, or none: a new folder is renamed into place; an existing one gets os.replace per file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        for name, data in files.items():
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, out)  # atomic when out does not exist (or is an empty folder)
            return out / "report.html"
        except OSError:
            pass
        # report.html last: a reader who opens it while we write sees the old one or the complete new one.
        for name in sorted(files, key=lambda n: n.startswith("report.")):
            os.replace(tmp / name, out / name)
        return out / "report.html"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_report(result: str | Path, out: str | Path | None = None) -> Path:
    """Load a result file, render its report, write it; ResultError (one line) on bad input."""
    from harness.results import load

    path = Path(result)
    doc = load(path)
    dest = Path(out) if out is not None else default_out(path)
    check_out(dest)
    files = build(doc, path)
    return write(files, dest)
