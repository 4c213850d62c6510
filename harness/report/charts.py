"""The report's charts: variants x frameworks, one PNG per scenario (matplotlib, no pyplot state).

One point: bars (device-done median, IQR whiskers), diamonds for host-return, dashes for the floor.
A sweep: one panel per variant that has timed rows, over the points (lines for a sweep over numbers,
dots where the points differ in kind). Long variant names wrap; the legend sits outside the axes.
"""
from __future__ import annotations

import io
import textwrap
from typing import Any

from harness.backends import FRAMEWORKS, backend_class
from harness.report.report import find_row, points_of, timed
from harness.results.model import Json, Row, ScenarioResult, Stats, VariantInfo

COLOURS = {fw: backend_class(fw).colour for fw in FRAMEWORKS}  # each backend's colour, in every chart


def tick(seconds: float) -> str:
    """A compact axis label: 100 ms, 2.5 µs."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if seconds >= scale * 0.999:
            return f"{seconds / scale:g} {unit}"
    return f"{seconds:g} s"


def ordered_sweep(points: list[Json]) -> bool:
    """True when the points differ only in numbers (sizes, counts): a line between them means something.
    Points that differ in a kind (device_creation's normal and fill) are not on one axis. A point's params: data."""
    keys = {k for p in points for k in p if k not in ("label", "seed")}
    varying = [k for k in keys if len({repr(p.get(k)) for p in points}) > 1]
    return all(isinstance(p.get(k), (int, float)) and not isinstance(p.get(k), bool)
               for k in varying for p in points)


def variants_of(scn: ScenarioResult) -> list[VariantInfo]:
    """The scenario's variants in spec order, plus any that only appear in rows."""
    vs = list(scn.variants or [])
    known = {v.name for v in vs}
    for r in scn.rows:
        if r.variant not in known:
            known.add(r.variant)
            vs.append(VariantInfo(name=r.variant, doc="", hazard=bool(r.hazard), gpu_only=False))
    return vs


def point_label(scn: ScenarioResult, i: int) -> str:
    points = points_of(scn)
    return str(points[i].get("label") or f"point {i}") if i < len(points) else f"point {i}"  # params: data


def _wrap(name: str, width: int = 16) -> str:
    """A long variant name over lines, broken after its underscores: neighbours never overlap."""
    return textwrap.fill(name.replace("_", "_ "), width, break_long_words=False).replace("_ ", "_")


def _iqr(stats: Stats) -> list[list[float]]:
    return [[max(stats.median - stats.q1, 0.0)], [max(stats.q3 - stats.median, 0.0)]]


def _style(ax: Any, lo: float, hi: float) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator  # heavy: drawn charts only (charts.chart_png)

    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.yaxis.set_major_locator(LogLocator(base=10))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: tick(y)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _: ""))
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _legend(scn: ScenarioResult, fws: list[str], host_line: str) -> list[Any]:
    from matplotlib.lines import Line2D  # heavy: drawn charts only
    from matplotlib.patches import Patch

    ran = {r.framework for r in scn.rows if r.timed}
    out = [Patch(color=COLOURS.get(f, "grey"), label=f if f in ran else f"{f} (not timed)") for f in fws]
    out.append(Line2D([], [], marker="D", color="black", linestyle=host_line, markersize=4, markerfacecolor="white",
                      label="host-return (IQR)"))
    if any(r.timed and r.floor_s for r in scn.rows):
        out.append(Line2D([], [], color="black", linestyle="--", linewidth=1, label="physical floor"))
    return out


def _bar(ax: Any, x: float, width: float, r: Row, colour: str, hazard: bool, lo: float) -> None:
    dd, hr = r.timing.device_done, r.timing.host_return
    # From the axis' bottom: a log axis has no zero.
    ax.bar(x, dd.median - lo, width * 0.92, bottom=lo, color=colour, alpha=0.85, hatch="//" if hazard else None,
           edgecolor="white", linewidth=0)
    ax.errorbar(x, dd.median, yerr=_iqr(dd), fmt="none", ecolor="black", elinewidth=1, capsize=3)
    ax.errorbar(x, hr.median, yerr=_iqr(hr), fmt="D", color="black", markersize=4, markerfacecolor="white",
                elinewidth=0.8, capsize=2)
    if r.floor_s:
        ax.hlines(r.floor_s, x - width / 2, x + width / 2, colors="black", linestyles="--", linewidth=1)


def _bars(fig: Any, scn: ScenarioResult, fws: list[str], variants: list[VariantInfo], lo: float, hi: float) -> None:
    ax = fig.add_subplot()
    _style(ax, lo, hi)
    width = 0.8 / max(1, len(fws))
    for i, v in enumerate(variants):
        for j, fw in enumerate(fws):
            x = i - 0.4 + width * (j + 0.5)
            r = find_row(scn, fw, v.name, 0)
            if timed(r):
                _bar(ax, x, width, r, COLOURS.get(fw, "grey"), bool(v.hazard), lo)
            elif r is not None:
                ax.text(x, lo * 1.15, r.status, rotation=90, ha="center", va="bottom", fontsize=7, color="grey")
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels([_wrap(v.name) + ("\n(hazard)" if v.hazard else "") for v in variants], fontsize=8)
    ax.set_xlim(-0.6, len(variants) - 0.4)
    ax.set_ylabel("device-done (bars, IQR whiskers)", fontsize=8)
    fig.legend(handles=_legend(scn, fws, "none"), fontsize=7, loc="outside right upper", frameon=False)


def _series(ax: Any, scn: ScenarioResult, fws: list[str], v: VariantInfo, ordered: bool) -> dict[int, float]:
    """One framework's line (or dots) per framework in a sweep panel; returns the floors by point."""
    floors: dict[int, float] = {}
    for j, fw in enumerate(fws):
        pts = [(i, r) for i in range(len(points_of(scn))) if timed(r := find_row(scn, fw, v.name, i))]
        if not pts:
            continue
        xs = [i + (0.04 if ordered else 0.1) * (j - (len(fws) - 1) / 2) for i, _ in pts]  # dodged: ties stay visible
        dd = [r.timing.device_done for _, r in pts]
        hr = [r.timing.host_return for _, r in pts]
        c = COLOURS.get(fw, "grey")
        if ordered:  # a sweep over sizes: lines, the IQR as a band
            ax.plot(xs, [s.median for s in dd], marker="o", markersize=4, color=c, linewidth=1.5)
            ax.fill_between(xs, [s.q1 for s in dd], [s.q3 for s in dd], color=c, alpha=0.2, linewidth=0)
        else:  # points of different kinds: nothing lies between them, so no line joins them
            ax.errorbar(xs, [s.median for s in dd], yerr=[[_iqr(s)[0][0] for s in dd], [_iqr(s)[1][0] for s in dd]],
                        fmt="o", color=c, markersize=4, elinewidth=1, capsize=3)
        ax.errorbar(xs, [s.median for s in hr], yerr=[[_iqr(h)[0][0] for h in hr], [_iqr(h)[1][0] for h in hr]],
                    fmt="D", color=c, markersize=3.5, markerfacecolor="white", linestyle=":" if ordered else "none",
                    linewidth=1)
        floors.update({i: r.floor_s for i, r in pts if r.floor_s})
    return floors


def _panel(ax: Any, scn: ScenarioResult, fws: list[str], v: VariantInfo, ordered: bool, lo: float) -> None:
    points = points_of(scn)
    ax.set_title(v.name + (" (hazard)" if v.hazard else ""), fontsize=9)
    floors = _series(ax, scn, fws, v, ordered)
    for i in range(len(points)):  # what did not run, said where it would be
        missing = [f"{fw}: {r.status}" for fw in fws if (r := find_row(scn, fw, v.name, i)) and not r.timed]
        if missing:
            ax.text(i, lo * 1.15, "\n".join(missing), ha="center", va="bottom", fontsize=6, color="grey")
    if floors and ordered:
        ax.plot(sorted(floors), [floors[i] for i in sorted(floors)], color="black", linestyle="--", linewidth=1)
    for i, f in (floors.items() if not ordered else ()):
        ax.hlines(f, i - 0.25, i + 0.25, colors="black", linestyles="--", linewidth=1)
    ax.set_xticks(range(len(points)))
    ax.set_xticklabels([point_label(scn, i) for i in range(len(points))], fontsize=7,
                       rotation=30 if len(points) > 4 else 0)


def _sweep(fig: Any, scn: ScenarioResult, fws: list[str], variants: list[VariantInfo], lo: float, hi: float) -> None:
    ncols = min(3, len(variants))
    nrows = -(-len(variants) // ncols)
    axes = fig.subplots(nrows, ncols, sharey=True, squeeze=False)
    ordered = ordered_sweep(points_of(scn))
    for k, v in enumerate(variants):
        _style(axes[k // ncols][k % ncols], lo, hi)
        _panel(axes[k // ncols][k % ncols], scn, fws, v, ordered, lo)
    for k in range(len(variants), nrows * ncols):
        axes[k // ncols][k % ncols].set_visible(False)
    axes[0][0].set_ylabel("device-done (lines, IQR band)" if ordered else "device-done (dots, IQR whiskers)",
                          fontsize=8)
    fig.legend(handles=_legend(scn, fws, ":" if ordered else "none"), fontsize=7, loc="outside right upper",
               frameon=False)


def chart_png(scn: ScenarioResult, fws: list[str]) -> bytes | None:
    """Variants x frameworks: bars (one point) or one panel per variant over a sweep's points; None
    where nothing was timed. Variants without a timed row take no panel. Every label is plain text: a
    file's `$...$` is not matplotlib's mathtext (a label a file chose crashed the report)."""
    import matplotlib  # heavy (~0.5 s): only a report draws charts

    with matplotlib.rc_context(PLAIN_TEXT):
        return _chart_png(scn, fws)


PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}  # labels are data, drawn as written


def _chart_png(scn: ScenarioResult, fws: list[str]) -> bytes | None:
    from matplotlib.figure import Figure

    variants = [v for v in variants_of(scn) if any(r.timed and r.variant == v.name for r in scn.rows)]
    times = [x for r in scn.rows if r.timed for s in (r.timing.device_done, r.timing.host_return)
             for x in (s.q1, s.median, s.q3)] + [r.floor_s for r in scn.rows if r.timed and r.floor_s]
    positive = [t for t in times if isinstance(t, (int, float)) and t > 0]
    if not variants or not positive:
        return None
    lo, hi = min(positive) / 2.5, max(positive) * 2.5
    if len(points_of(scn)) == 1:
        fig = Figure(figsize=(max(6.0, 2.0 + 1.6 * len(variants)), 3.8), dpi=110, layout="constrained")
        _bars(fig, scn, fws, variants, lo, hi)
    else:
        ncols = min(3, len(variants))
        fig = Figure(figsize=(4.2 * ncols + 1.6, 3.3 * -(-len(variants) // ncols)), dpi=110, layout="constrained")
        _sweep(fig, scn, fws, variants, lo, hi)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
