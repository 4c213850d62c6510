"""What a reader sees in the terminal after `compare`: one compact table per scenario.

In the spirit of torch.utils.benchmark's Compare: rows are variants (per point of a sweep), columns
are frameworks, one time unit per table, numbers trimmed to significant figures, and cells whose
spread (IQR / median of device-done) is above 10% flagged `(! 12%)` with their row marked `!`. Each
cell reads `device-done (host-return)`; indented rows under a variant carry the kernel clock (the device's own
time per call, harness/measure/kernel_clock.py), % of the physical floor,
host syncs, hazard wrong-run counts and the impl's metrics. Skipped or failed cells carry a footnote
mark whose reason is printed under the table. The Markdown/HTML report is harness/report/html.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich.markup import escape
from rich import box
from rich.console import Console
from rich.table import Table

from harness.backends import FRAMEWORKS
from harness.report.labels import kernel_of, pct_of_floor
from harness.report.measuring import host_speed_line, phase_line
from harness.results.model import Json, Result, Row, ScenarioResult

HIGH_SPREAD = 0.10  # IQR / median above this: the numbers are noisy
MARKS = "¹²³⁴⁵⁶⁷⁸⁹"
UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "µs": "microseconds", "ns": "nanoseconds"}


def fmt_s(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "—"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def fmt_num(x: Any) -> str:
    """A metric or count: integers plainly, else three significant figures; "—" for what is not a number
    (a result file writes NaN as null and infinities as strings)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return "—" if x is None else str(x)
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e6:
        return f"{x:.3g}"
    if float(x).is_integer() or abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.3g}"


def fmt_pct(x: Any) -> str:
    return f"{x:.0f}%" if isinstance(x, (int, float)) and math.isfinite(x) else "—"


def sig(x: float, digits: int = 3) -> str:
    """x with `digits` significant figures and no exponent (Compare's trim_significant_figures)."""
    if x == 0 or not math.isfinite(x):
        return "0" if x == 0 else str(x)
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def pick_unit(seconds: list[float]) -> tuple[float, str]:
    """The largest unit in which the smallest time is at least 1 (as Compare does)."""
    positive = [s for s in seconds if s and s > 0 and math.isfinite(s)]
    if not positive:
        return 1e-3, "ms"
    low = min(positive)
    for scale, name in UNITS:
        if low >= scale:
            return scale, name
    return UNITS[-1]


def as_result(doc: Result | Json) -> Result:
    """The typed result: a document the runner just made, typed once where it enters the report."""
    return doc if isinstance(doc, Result) else Result.from_dict(doc)


def timed(row: Row | None) -> bool:
    return row is not None and row.timed


def points_of(scn: ScenarioResult) -> list[Json]:
    """The scenario's points, padded where a row names a point the list lacks (so that every row shows)."""
    points = list(scn.points or [{}])
    last = max((r.point or 0 for r in scn.rows or [] if isinstance(r.point or 0, int)), default=0)
    return points + [{} for _ in range(len(points), last + 1)]


def find_row(scn: ScenarioResult, fw: str, variant: str, point: int) -> Row | None:
    return next((r for r in scn.rows if r.framework == fw and r.variant == variant and (r.point or 0) == point), None)


def frameworks_of(result: Result) -> list[str]:
    fws = result.environment.frameworks or {}
    seen = {r.framework for s in result.scenarios.values() for r in s.rows}
    return [f for f in FRAMEWORKS if f in fws or f in seen]


def make_console(stderr: bool = False) -> Any:
    """A terminal keeps its width; a log file gets wide tables instead of rich's 80 columns."""
    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=160)


class _Notes:
    """Footnotes under a table: one mark per distinct reason."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def mark(self, text: str) -> str:
        if text not in self.items:
            self.items.append(text)
        i = self.items.index(text)
        return MARKS[i] if i < len(MARKS) else f"[{i + 1}]"


def _cell(row: Row | None, scale: float, notes: _Notes) -> tuple[str, bool]:
    """(the cell's text, whether its spread is high)."""
    if row is None:
        return "[dim]—[/dim]", False
    status = row.status
    if not row.timed:
        mark = notes.mark(f"{row.framework} {status}: {escape(str(row.reason if row.reason is not None else ''))}")
        colour = "dim" if status == "skipped" else "red"
        return f"[{colour}]{status}{mark}[/{colour}]", False
    dd, hr = row.timing.device_done, row.timing.host_return
    text = f"[bold]{sig(dd.median / scale)}[/bold] ({sig(hr.median / scale)})"
    high = dd.spread > HIGH_SPREAD
    if high:
        text += f" [yellow](! {100 * dd.spread:.0f}%)[/yellow]"
    if status == "wrong":
        worst = escape(row.check.worst or "" if row.check is not None else "")
        text += f" [red]WRONG{notes.mark(row.framework + ' wrong: ' + worst)}[/red]"
    return text, high


def _metrics(row: Row | None) -> Json:
    """A timed row's metrics (keys are metric names: data), {} for anything else."""
    return (row.timing.metrics or {}) if row is not None and row.timing is not None else {}


def gbps(row: Row) -> float:
    """Decimal GB/s: what crossed the host-device link (the impl's link_bytes) per second of device-done."""
    link_bytes = _metrics(row).get("link_bytes")  # metrics: keys are metric names (data)
    dd = row.timing.device_done.median
    return link_bytes / dd / 1e9 if link_bytes and dd > 0 else 0.0


def _extra_rows(rows: list[Row | None], hazard: bool, scale: float = 1.0) -> list[tuple[str, list[str]]]:
    """The indented lines under a variant: kernel clock, floor, host syncs, wrong runs, metrics; only where some
    cell has one."""
    ok = [r if timed(r) else None for r in rows]
    out: list[tuple[str, list[str]]] = []
    kernels = [kernel_of(r.timing) if r else None for r in ok]
    if any(k is not None for k in kernels):
        out.append(("kernel", [sig(k.median / scale) if k is not None else "" for k in kernels]))
    pcts = [pct_of_floor(r) for r in ok]
    if any(p is not None for p in pcts):
        out.append(("% of floor", [fmt_pct(p) if p is not None else "" for p in pcts]))
    if any(r and _metrics(r).get("link_bytes") for r in ok):  # metrics: keys are metric names (data)
        out.append(("GB/s", [f"{gbps(r):.1f}" if r and gbps(r) else "" for r in ok]))
    if any(r and r.host_syncs is not None for r in ok):
        out.append(("host syncs", [str(r.host_syncs) if r and r.host_syncs is not None else "" for r in ok]))
    if hazard:
        out.append(("wrong runs", [f"[magenta]{r.check.wrong or 0}/{r.check.checked or 0}[/magenta]"
                                   if r and r.check else "" for r in ok]))
    keys = sorted({k for r in ok if r for k in _metrics(r)})
    for k in keys:
        out.append((k, [fmt_num(_metrics(r)[k]) if r and k in _metrics(r) else "" for r in ok]))
    return out


def scenario_table(scn: ScenarioResult, fws: list[str]) -> tuple[Any, list[str]]:
    """A rich Table for one scenario and the lines to print under it (legend, footnotes)."""

    points = points_of(scn)
    notes = _Notes()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("variant", no_wrap=True)
    for fw in fws:
        table.add_column(fw, no_wrap=True)
    units = []
    for i, point in enumerate(points):
        # One unit per table, or per point of a sweep (whose points may be orders of magnitude apart).
        scale, unit = pick_unit([r.timing.device_done.median for r in scn.rows
                                 if r.timed and (len(points) == 1 or (r.point or 0) == i)])
        units.append(unit)
        if len(points) > 1:
            if i:
                table.add_section()
            label = point.get("label")  # a point's params: data, by name
            table.add_row(f"[cyan]{escape(str(label or f'point {i}'))}[/cyan] [dim]({unit})[/dim]",
                          *[""] * len(fws))
        for v in scn.variants or []:
            rows = [find_row(scn, fw, v.name, i) for fw in fws]
            if all(r is None for r in rows):
                continue
            cells = [_cell(r, scale, notes) for r in rows]
            name = v.name + (" [magenta](hazard)[/magenta]" if v.hazard else "")
            if any(high for _, high in cells):
                name += " [yellow]![/yellow]"
            table.add_row(("  " if len(points) > 1 else "") + name, *[c for c, _ in cells])
            for what, vals in _extra_rows(rows, bool(v.hazard), scale):
                table.add_row(f"[dim]{'    ' if len(points) > 1 else '  '}· {what}[/dim]", *vals)
    unit_text = (f"Times in {UNIT_NAMES[units[0]]} ({units[0]})" if len(set(units)) == 1
                 else "Times in the unit by each point")
    legend = (f"{unit_text}: [bold]device-done[/bold] (host-return), medians; · kernel: how long the call occupied "
              f"the device; (! n%) marks a spread (IQR/median) above {100 * HIGH_SPREAD:.0f}%.")
    return table, [legend] + [f"{MARKS[i] if i < len(MARKS) else f'[{i + 1}]'} {t}" for i, t in enumerate(notes.items)]


def or_else(x: Any, default: Any) -> Any:
    """x, or default where the file has none (a field the model reads as None)."""
    return default if x is None else x


def render_terminal(doc: Result | Json, console: Any = None) -> None:
    console = console or make_console()
    result = as_result(doc)
    env = result.environment
    host = env.host or {}  # the host's facts: keys are the facts' names (data)
    console.print(f"[bold]triptych[/bold] · {result.size} · seed {or_else(result.seed, '—')} · "
                  f"{env.gpu or 'no GPU'} · driver {host.get('driver', '—')} · python {host.get('python')}")
    for fw, info in (env.frameworks or {}).items():
        version = (info.env or {}).get("version", "")  # the backend's own facts (data)
        state = f"{version} · {info.why}" if info.available else f"skipped: {or_else(info.why, '')}"
        console.print(f"  {fw}: {state}", highlight=False)
    fws = frameworks_of(result)
    for name, scn in result.scenarios.items():
        console.print()
        took = f" [dim]({scn.wall_s:.1f} s)[/dim]" if isinstance(scn.wall_s, (int, float)) else ""
        console.print(f"[bold]{name}[/bold] — {escape(or_else(scn.title, ''))}" + ("" if scn.rows else " (not timed)")
                      + took)
        if scn.rows:
            table, notes = scenario_table(scn, fws)
            console.print(table)
            for n in notes:
                console.print(f"  [dim]{n}[/dim]", highlight=False)
            if scn.floor_why:
                console.print(f"  [dim]floor: {escape(scn.floor_why)}[/dim]", highlight=False)
        _terminal_checks(scn, console)
    for nr in result.not_run or []:
        console.print(f"\n[yellow]not run[/yellow] {nr.scenario}: {escape(nr.why)}", highlight=False)

    for line in (phase_line(result), host_speed_line(result)):
        if line is not None:
            console.print(f"\n{line}", highlight=False, markup=False)


def _terminal_checks(scn: ScenarioResult, console: Any) -> None:
    """A scenario's equivalence, full-size cross-checks and claims, under its table."""
    eq = scn.equivalence
    if eq:
        colour = {"passed": "green", "failed": "red"}.get(eq.status, "yellow")
        console.print(f"  equivalence: [{colour}]{eq.status}[/{colour}] "
                      f"({eq.examples} examples; {', '.join(eq.frameworks) or 'no framework'})")
        if eq.status == "failed":
            console.print(f"  {eq.message}", highlight=False, markup=False)
    for xc in scn.cross_framework or []:
        at = f" at {xc.label}" if xc.label else ""
        console.print(f"  full-size outputs across frameworks{at}: {xc.status} "
                      f"({', '.join(xc.frameworks)}; {xc.elements} sampled elements)")
        for p in xc.problems:
            console.print(f"    {p}", highlight=False, markup=False)
    for c in scn.claims or []:
        colour = {"confirmed": "green", "refuted": "red"}.get(c.verdict, "yellow")
        at = escape(f" [{c.label}]") if c.label else ""
        console.print(f"  [{colour}]{c.verdict:>12}[/{colour}] {c.framework}{at}: {escape(c.text)} — "
                      f"{escape(c.evidence)}", highlight=False)


FAILED_STATUSES = ("wrong", "error", "timeout", "crashed", "oom")


@dataclass(frozen=True)
class Problem:
    """What the summary names. kind "failed": a check failed (equivalence, a wrong output, a row or a
    framework that failed, a full-size disagreement, nothing measured); "incomplete": a scenario the
    budget or a stop left out; "refuted": a claim the numbers refuted (a finding, not a failed check)."""

    kind: str
    text: str

    def __str__(self) -> str:
        return self.text


def problems_of(doc: Result | Json) -> list[Problem]:
    result = as_result(doc)
    fws = result.environment.frameworks or {}
    out = [Problem("failed", f"{fw}: {info.status} at start-up ({or_else(info.why, '')})") for fw, info in fws.items()
           if not info.available and or_else(info.status, "skipped") != "skipped"]
    if not any(i.available for i in fws.values()):
        out.append(Problem("failed", "no framework started: nothing was measured"))
    for name, scn in result.scenarios.items():
        if scn.equivalence is not None and scn.equivalence.status == "failed":
            out.append(Problem("failed", f"{name}: equivalence failed"))
        for r in scn.rows:
            if r.status in FAILED_STATUSES:
                at = f" [{r.label}]" if r.label else ""
                out.append(Problem("failed", f"{name}/{r.framework}/{r.variant}{at}: {r.status}"))
        for xc in scn.cross_framework or []:
            if xc.status == "disagree":
                out.append(Problem("failed", f"{name}: frameworks disagree at full size {or_else(xc.label, '')}".rstrip()))
        for c in scn.claims or []:
            if c.verdict == "refuted":
                at = f" [{c.label}]" if c.label else ""
                out.append(Problem("refuted", f"{name}/{c.framework}{at}: {c.claim or or_else(c.text, '')}"))
    out += [Problem("incomplete", f"{nr.scenario}: not run ({nr.why})") for nr in result.not_run or []]
    return out


def summary_status(doc: Result | Json) -> tuple[bool, list[Problem]]:
    """(no check failed and nothing left out, the problems): refuted claims are listed, yet a run whose
    every check passed is still ok."""
    problems = problems_of(doc)
    return (not any(p.kind != "refuted" for p in problems), problems)
