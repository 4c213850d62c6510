"""What a reader sees in the terminal after `compare`: one table per scenario, variants x frameworks.

Each cell: device-done median ± IQR (relative), host-return median, % of the physical floor where
the scenario has one, and the impl's extra metrics; rows whose spread is high are flagged.
"""
from __future__ import annotations

from typing import Any

from harness.backends import FRAMEWORKS

HIGH_SPREAD = 0.10  # IQR / median above this: the row's numbers are noisy


def fmt_s(s: float | None) -> str:
    if s is None:
        return "—"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def fmt_num(x: float) -> str:
    if abs(x) >= 1e6:
        return f"{x:.3g}"
    if float(x).is_integer():
        return f"{int(x)}"
    return f"{x:.3g}"


def gbps(nbytes: float, seconds: float) -> float:
    """Decimal GB/s: what crossed the host-device link (link_bytes) per second of device-done time."""
    return nbytes / seconds / 1e9


def cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "—"
    status = row["status"]
    if status == "skipped":
        return f"[dim]skipped: {row['reason']}[/dim]"
    if status in ("error", "timeout", "crashed"):
        return f"[red]{status}: {row['reason']}[/red]"
    t = row["timing"]
    dd, hr = t["device_done"], t["host_return"]
    spread = dd["iqr"] / dd["median"] if dd["median"] else 0.0
    flag = " [yellow]~[/yellow]" if spread > HIGH_SPREAD else ""
    lines = [f"[bold]{fmt_s(dd['median'])}[/bold] ±{100 * spread:.0f}%{flag}", f"ret {fmt_s(hr['median'])}"]
    if "pct_of_floor" in row:
        lines.append(f"{row['pct_of_floor']:.0f}% of floor")
    link_bytes = t.get("metrics", {}).get("link_bytes")
    if link_bytes and dd["median"] > 0:
        lines.append(f"{gbps(link_bytes, dd['median']):.1f} GB/s")
    if row.get("host_syncs") is not None:
        lines.append(f"host syncs {row['host_syncs']}")
    for k, v in sorted(t.get("metrics", {}).items()):
        lines.append(f"{k} {fmt_num(v)}")
    chk = row.get("check", {})
    if row.get("hazard"):
        lines.append(f"[magenta]wrong {chk.get('wrong', 0)}/{chk.get('checked', 0)} runs[/magenta]")
    elif status == "wrong":
        lines.append(f"[red]WRONG: {chk.get('worst', '')}[/red]")
    return "\n".join(lines)


def make_console(stderr: bool = False) -> Any:
    """A terminal keeps its width; a log file gets wide tables instead of rich's 80 columns."""
    from rich.console import Console

    c = Console(stderr=stderr)
    return c if c.is_terminal else Console(stderr=stderr, width=160)


def render_terminal(doc: dict[str, Any], console: Any = None) -> None:
    from rich.table import Table

    console = console or make_console()
    env = doc["environment"]
    host = env.get("host", {})
    console.print(f"[bold]triptych[/bold] · {doc['size']} · seed {doc['seed']} · "
                  f"{env.get('gpu') or 'no GPU'} · driver {host.get('driver', '—')} · python {host.get('python')}")
    for fw, info in env["frameworks"].items():
        state = info["env"].get("version", "") + " · " + info["why"] if info["available"] else f"skipped: {info['why']}"
        console.print(f"  {fw}: {state}", highlight=False)
    for name, scn in doc["scenarios"].items():
        fws = [f for f in FRAMEWORKS if f in env["frameworks"]]
        table = Table(title=f"{name} — {scn['title']}", title_justify="left", show_lines=True)
        table.add_column("variant", no_wrap=True)
        for fw in fws:
            table.add_column(fw, overflow="fold")
        points = scn.get("points") or [{}]
        for i, point in enumerate(points):
            for v in scn["variants"]:
                label = v["name"] + (" [magenta](hazard)[/magenta]" if v["hazard"] else "")
                if len(points) > 1:
                    label += f"\n[cyan]{point.get('label', i)}[/cyan]"
                cells = [cell(next((r for r in scn["rows"] if r["framework"] == fw and r["variant"] == v["name"]
                                    and r.get("point", 0) == i), None)) for fw in fws]
                table.add_row(label, *cells)
        console.print(table)
        eq = scn.get("equivalence")
        if eq:
            colour = {"passed": "green", "failed": "red"}.get(eq["status"], "yellow")
            console.print(f"  equivalence: [{colour}]{eq['status']}[/{colour}] "
                          f"({eq['examples']} examples; {', '.join(eq['frameworks']) or 'no framework'})")
            if eq["status"] == "failed":
                console.print(f"  {eq['message']}", highlight=False, markup=False)
        for xc in scn.get("cross_framework", []):
            at = f" at {xc['label']}" if xc.get("label") else ""
            console.print(f"  full-size outputs across frameworks{at}: {xc['status']} "
                          f"({', '.join(xc['frameworks'])}; {xc['elements']} sampled elements)")
            for p in xc["problems"]:
                console.print(f"    {p}", highlight=False, markup=False)
        for c in scn.get("claims", []):
            colour = {"confirmed": "green", "refuted": "red"}.get(c["verdict"], "yellow")
            at = f" [{c['label']}]" if c.get("label") else ""
            console.print(f"  [{colour}]{c['verdict']:>12}[/{colour}] {c['framework']}{at}: {c['text']} — "
                          f"{c['evidence']}", highlight=False)


def summary_status(doc: dict[str, Any]) -> tuple[bool, list[str]]:
    """(all good, problems): equivalence failures, wrong non-hazard rows, errors, disagreements."""
    problems = []
    for name, scn in doc["scenarios"].items():
        eq = scn.get("equivalence", {})
        if eq.get("status") == "failed":
            problems.append(f"{name}: equivalence failed")
        for r in scn["rows"]:
            if r["status"] in ("wrong", "error", "timeout", "crashed"):
                at = f" [{r['label']}]" if r.get("label") else ""
                problems.append(f"{name}/{r['framework']}/{r['variant']}{at}: {r['status']}")
        for xc in scn.get("cross_framework", []):
            if xc["status"] == "disagree":
                problems.append(f"{name}: frameworks disagree at full size {xc.get('label', '')}".rstrip())
    return (not problems, problems)
