"""The terminal view of a regress result (harness/regress/regress.py)."""
from __future__ import annotations

import math
import signal
from typing import Any

from rich.markup import escape
from rich.table import Table

from harness.regress.regress import COVARIATE_MIN_PAIRS, Regress
from harness.regress.env import describe, fw_version, host_during, slow_share, typed
from harness.report.report import fmt_s
from harness.results.model import Json, Phase, Result


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _pct(r: float) -> str:
    if math.isnan(r):
        return "—"
    if not math.isfinite(r):
        return "∞"
    return f"{100 * (r - 1):+.1f}%"


def render(res: Regress, base: Result | Json, cand: Result | Json, console: Any, show_all: bool = False) -> None:
    console.print(f"[bold]regress[/bold]  baseline  {res.baseline}  ({describe(typed(base))})", highlight=False)
    console.print(f"         candidate {res.candidate}  ({describe(typed(cand))})", highlight=False)
    console.print(f"         clock {res.clock} · threshold {100 * res.threshold:g}% · "
                  f"{100 * res.confidence:g}% interval of the ratio of medians (the hull of a bootstrap of the "
                  "processes, then their repeats, and Student's t on the process medians; from the IQR where a "
                  "file has no samples)", highlight=False)
    for n in res.notes:
        console.print(f"  [yellow]differs:[/yellow] {n}", highlight=False)
    colour = {"regression": "red", "improvement": "green", "noisy": "yellow", "unchanged": "dim", "unknown": "magenta"}
    shown = [r for r in res.rows if show_all or r.verdict != "unchanged"]
    if shown:
        t = Table(title="regressions and improvements" + (" (and every other row)" if show_all else ""),
                  title_justify="left", show_lines=False)
        for col in ("scenario", "framework", "variant", "baseline", "candidate", "change \\[interval]",
                    "max rel err", "verdict"):
            t.add_column(col, overflow="fold")
        for r in shown:
            change = "—"
            if r.ratio is not None:
                change = f"{_pct(r.ratio)} \\[{_pct(r.lo)}, {_pct(r.hi)}]" + (f" {r.method}" if r.method != "processes" else "")
            err = "—"
            if r.base_err is not None:
                err = f"{r.base_err:.2g} → {r.cand_err:.2g}"
            if r.status:
                err = (err + "\n" if err != "—" else "") + escape(r.status)
            c = colour[r.verdict]
            what = r.verdict + (f" ({', '.join(r.why)})" if r.why and r.verdict not in ("noisy", "unknown") else "")
            if r.verdict == "unknown":
                what += f": {escape(r.host)}"
            t.add_row(r.scenario + (f" · {r.label}" if r.label else ""), r.framework,
                      r.variant + (" (hazard)" if r.hazard else ""), fmt_s(r.base_s), fmt_s(r.cand_s), change, err,
                      f"[{c}]{what}[/{c}]")
        console.print(t)
    both, others = skipped_on_both_sides(res.not_comparable)
    for what, why in grouped(others):
        console.print(f"  not comparable: {what}: {why}", highlight=False, markup=False)
    if both:
        console.print(f"  not comparable: {both}", highlight=False, markup=False)
    # the back-to-back check of two runs of one commit, intervals aside
    ratios = [r.ratio for r in res.rows if r.ratio is not None]
    if ratios:
        full, half = (100 * sum(abs(x - 1) <= tol for x in ratios) / len(ratios)
                      for tol in (res.threshold, res.threshold / 2))
        console.print(f"medians within {100 * res.threshold:g}%: {full:.1f}% of {_n(len(ratios), 'timed row')} "
                      f"(within {50 * res.threshold:g}%: {half:.1f}%)", highlight=False)
    n = res.counts()  # the verdict, last: rows by verdict (keys are verdicts: data)
    if n["unknown"]:  # what decides them: both sides under the same host (harness/run/interleave.py)
        console.print("  the unknown rows' changes can be the host's: an interleaved run of the two trees or "
                      "interpreters (--baseline-tree or --baseline-python) times both sides under the same host "
                      "and can decide them", highlight=False, markup=False)
    console.print(f"compared {_n(len(res.rows), 'row')}: [red]{_n(n['regression'], 'regression')}[/red], "
                  f"[green]{_n(n['improvement'], 'improvement')}[/green], {n['unchanged']} unchanged, "
                  f"[yellow]{n['noisy']} noisy[/yellow], [magenta]{n['unknown']} unknown[/magenta] (a change the "
                  f"host's speed can explain); {len(res.not_comparable)} not comparable")


SKIPPED_BOTH = "skipped in both: "


def skipped_on_both_sides(items: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
    """(one line for the rows skipped in both runs, by reason, most first; "" for none), the other items.
    Rows that ran in neither run (a framework that needs a GPU, without one; a GPU-only variant on a CPU)
    hide nothing: one line."""
    both = [(what, why[len(SKIPPED_BOTH):]) for what, why in items if why.startswith(SKIPPED_BOTH)]
    others = [(what, why) for what, why in items if not why.startswith(SKIPPED_BOTH)]
    if not both:
        return "", others
    reasons: dict[str, int] = {}
    for _, why in both:
        reasons[why] = reasons.get(why, 0) + 1
    top = sorted(reasons.items(), key=lambda kv: -kv[1])
    said = "; ".join(f"{k} x {why or 'no reason given'}" for why, k in top[:3])
    more = f"; {_n(len(top) - 3, 'other reason')}" if len(top) > 3 else ""
    return f"{_n(len(both), 'row')} skipped in both runs ({said}{more})", others


def grouped(items: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Neighbours that differ only in their last part (the variant) and share a reason: one line."""
    out: list[tuple[str, list[str], str]] = []
    for what, why in items:
        head, _, last = what.rpartition("/")
        if out and head and out[-1][0] == head and out[-1][2] == why:
            out[-1][1].append(last)
        else:
            out.append((head, [last], why) if head else (what, [], why))
    return [(f"{h}/{','.join(v)}" if v else h, why) for h, v, why in out]


def paired_line(r: Any) -> str:
    """One row of an interleaved run, as `regress` prints it."""
    what = " · ".join(filter(None, (r.scenario, r.label))) + f"  {r.framework}  {r.variant}"
    if r.status:
        return f"{r.verdict:<9}  {what}  {r.status} ({r.why})" + ("  SLOWER" if r.slower else "")
    change = f"{_pct(r.ratio)} [{_pct(r.lo)}, {_pct(r.hi)}]" if r.ratio is not None else "—"
    line = f"{r.verdict:<9}  {what}  {change}  p {r.p:.2g} · BH {r.q:.2g} · {_n(r.pairs, 'pair')}"
    if getattr(r, "theta", None) is not None:  # judged at equal host speeds (--host-covariate)
        line += f" · at equal host speeds (θ {r.theta:+.2f})"
    if not r.decidable:
        return f"{line}  ({r.why})"
    if r.verdict == "unknown":  # what these pairs could have found: the smallest change (Paired.detectable)
        line += (f" · would call {100 * r.detectable:.0f}% different" if r.detectable < 100
                 else " · too few pairs to call any change different")
    if r.verdict == "different":
        line += "  SLOWER" if r.slower else "  faster"
    elif r.why:
        line += f"  ({r.why})"
    return line


def render_paired(res: Any, sides: list[Any], plan: Any, say: Any) -> int:
    """The changed and unknown rows of an interleaved run, one line each, the summary line last; the
    exit code: 128 + the signal's number where a stop ended the run (as compare's), 1 where a row is
    different and slower (or failed in the candidate), or where --budget left points untimed (the run
    was cut short, as compare's exit 1 says too), else 0."""
    plain_why = res.plain_why if getattr(res, "plain_why", None) is not None else getattr(plan, "plain_why", "")
    covariate = getattr(plan, "host_covariate", False) and not plain_why
    say(f"regress (interleaved)  baseline {sides[0].label}  ·  candidate {sides[1].label}")
    say(f"  {plan.size} · seed {plan.seed} · clock {plan.clock} · effect floor {100 * plan.threshold:g}% · "
        f"FDR {100 * plan.fdr:g}% (Benjamini-Hochberg over {_n(len(res.rows), 'row')}, split over the looks) · "
        f"{100 * res.level:.4g}% intervals ({100 * plan.confidence:g}% split over the looks) · "
        "paired t on the log ratios "
        "of the process medians, pairs in A-B-B-A order"
        + (f"; rows of {COVARIATE_MIN_PAIRS} pairs or more at equal host speeds (--host-covariate)" if covariate else
           f"; every row plain, not at equal host speeds ({plain_why})" if plain_why else ""))
    docs = [typed(d) for d in res.docs]  # the two sides' documents, built in memory: typed once, here
    fws = [d.environment.frameworks or {} for d in docs]
    for fw in sorted(set(fws[0]) & set(fws[1])):
        vb, vc = fw_version(fws[0][fw]), fw_version(fws[1][fw])
        if vb and vc and vb != vc:
            say(f"  {fw} {vb} → {vc}")
    for side in sides:
        if side.env:
            say(f"  {side.name} environment: {' '.join(f'{k}={v}' for k, v in side.env.items())}")
    for r in res.rows:
        if r.verdict != "same":
            say(paired_line(r))
    for what, why in grouped(res.not_comparable):
        say(f"  not comparable: {what}: {why}")
    for fw, why in res.lost:
        say(f"  FAILED: {fw} started on the baseline side and not on the candidate's: {why}")
    phases = [d.timing_phase or Phase() for d in docs]
    if res.wall_s > 0 and all(p.wall_s for p in phases):  # what of the run measured something
        timed = sum(p.timed_s for p in phases)  # type: ignore[misc]
        each = ", ".join(f"{side.name} {100 * p.share:.0f}% of its requests' {fmt_s(p.wall_s)}"  # type: ignore[operator]
                         for side, p in zip(sides, phases))
        say(f"timed share: {timed:.1f} s inside timed repeats of the run's {fmt_s(res.wall_s)} "
            f"({100 * timed / res.wall_s:.0f}%); {each}")
    speeds = slow_share(*(host_during(d) for d in docs), plan.threshold)
    if speeds is not None:  # what a host-paced row's pairs moved with (docs/design/host_speed.md)
        fast, slow, sb, sc = speeds
        say(f"host: a fixed Python loop ran at two speeds, about {1e3 * fast:.1f} and {1e3 * slow:.1f} ms, at the "
            f"slower in {100 * sb:.0f}% of the baseline's measurements and {100 * sc:.0f}% of the candidate's; rows "
            "that the host paces (launches, syncs, pageable copies) move with it, so their pairs differ more")
    timed_rows = [r for r in res.rows if not r.status]
    could = sum(r.detectable <= plan.threshold * (1 + 1e-9) for r in timed_rows)
    if timed_rows:  # what the run could have found: a verdict of no change means little where nothing could be
        say(f"power: a change of {100 * plan.threshold:g}%, measured as such, would have been called different in "
            f"{could} of {_n(len(timed_rows), 'timed row')} (by each row's spread between pairs, had it been the "
            "only change)"
            + ("; no row could: this run cannot show that nothing changed: more pairs (--pairs, --budget)"
               if not could else ""))
    counts = {v: sum(r.verdict == v for r in res.rows) for v in ("same", "different", "unknown")}  # by verdict (data)
    slower = sum(r.slower for r in res.rows)
    say(f"compared {_n(len(res.rows), 'row')} in {_n(res.pairs, 'pair')} at most ({res.wall_s:.0f} s): "
        f"{counts['different']} different ({slower} slower), {counts['same']} same, {counts['unknown']} unknown"
        + (f"; STOPPED: {res.stopped}" if res.signal
           else f"; INCOMPLETE: {res.stopped}" if res.not_timed
           else f"; first pairs cut: {res.stopped}" if res.short
           else f"; stopped adding pairs: {res.stopped}" if res.stopped and counts["unknown"] else "")
        + (f"; {len(res.lost)} framework(s) failed on the candidate" if res.lost else ""))
    if res.signal:
        return 128 + signal.Signals[res.signal].value
    return 1 if slower or res.lost or res.not_timed else 0
