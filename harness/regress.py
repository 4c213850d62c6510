"""`python -m harness regress`: is a candidate run slower, faster or less accurate than a baseline?

Rows are matched by scenario, point (label and params, the seed aside), framework and variant; only
rows present in both files, run in both, and comparable are judged. Per row:

timing    r = candidate median / baseline median on one clock (device_done by default), with a
          confidence interval from the runs' own repeats: a percentile bootstrap of the ratio of
          medians, each run's samples resampled on their own (result files keep every repeat). For
          files without samples, a normal interval on log r from each median's standard error,
          estimated from its IQR: SE(median) ~ 1.253 sigma / sqrt(n), sigma ~ IQR / 1.349.
            regression   the whole interval lies above 1 + threshold
            improvement  the whole interval lies below 1 / (1 + threshold)  (r and 1/r judged alike)
            noisy        neither, and the interval is wider than the threshold (hi / lo > 1 + threshold):
                         the repeats cannot resolve a change of that size
            unchanged    otherwise
numbers   the worst relative error of the timed outputs against the reference (check.max_rel_err),
          judged only where both runs drew the same inputs (same params and seed): "worse" when the
          candidate's error is over NUM_FACTOR times the baseline's and over NUM_FLOOR of the dtype's
          rtol (for bit-exact outputs: any error where there was none). A row whose timed outputs
          became wrong is worse whatever the numbers. Hazard variants are not judged on numbers.
status    a row that ran in the baseline and failed in the candidate (error, oom, timeout, crashed)
          is a regression; the other way round an improvement.

Comparability: runs on different GPUs (or a GPU and a CPU) share nothing to compare. A framework
whose version (or CUDA runtime) differs is left out unless across_versions is set: then its rows
are compared and the change is named in the header. Other differences (driver, Python, numpy,
size preset, seed) are named in the header and do not stop the comparison.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

CLOCKS = ("device_done", "host_return", "device_events")
RAN = ("ok", "wrong")
FAILED = ("error", "oom", "timeout", "crashed")
NUM_FACTOR = 2.0
NUM_FLOOR = 0.01
RESAMPLES = 4000


class RegressError(ValueError):
    """The two files cannot be compared at all; str(self) is the one-line reason."""


@dataclass
class Row:
    scenario: str
    label: str
    framework: str
    variant: str
    hazard: bool = False
    verdict: str = "unchanged"  # regression | improvement | noisy | unchanged
    base_s: float | None = None
    cand_s: float | None = None
    ratio: float | None = None
    lo: float | None = None
    hi: float | None = None
    method: str = ""  # bootstrap | iqr
    timing: str = ""  # the timing verdict alone
    base_err: float | None = None
    cand_err: float | None = None
    numbers: str = ""  # worse | better | same | "" (not judged)
    status: str = ""  # "ok → oom: why" when the status changed
    why: list[str] = field(default_factory=list)  # what made the verdict: time, numbers, outputs, status

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Regress:
    baseline: str
    candidate: str
    clock: str
    threshold: float
    confidence: float
    notes: list[str]  # differences between the runs' environments
    rows: list[Row]
    not_comparable: list[tuple[str, str]]  # (what, why)

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "regression"]

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in ("regression", "improvement", "noisy", "unchanged")}
        for r in self.rows:
            out[r.verdict] += 1
        return out


# -- statistics -----------------------------------------------------------------------------------


def ratio_ci_bootstrap(base: np.ndarray, cand: np.ndarray, confidence: float,
                       resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """(median ratio, lo, hi): percentile bootstrap of median(cand) / median(base)."""
    rng = np.random.default_rng(seed)
    mb = np.median(base[rng.integers(0, base.size, (resamples, base.size))], axis=1)
    mc = np.median(cand[rng.integers(0, cand.size, (resamples, cand.size))], axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(mc / mb, [alpha / 2, 1 - alpha / 2])
    return float(np.median(cand) / np.median(base)), float(lo), float(hi)


def ratio_ci_iqr(base: dict[str, Any], cand: dict[str, Any], confidence: float) -> tuple[float, float, float]:
    """(median ratio, lo, hi) from the summary stats alone: log-normal interval from each median's
    standard error, estimated from its IQR; infinitely wide with fewer than 2 repeats."""
    r = cand["median"] / base["median"]
    if base["n"] < 2 or cand["n"] < 2:
        return r, 0.0, math.inf

    def rel_se(st: dict[str, Any]) -> float:
        return 1.2533 * ((st["q3"] - st["q1"]) / 1.349) / math.sqrt(st["n"]) / st["median"]

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    half = z * math.hypot(rel_se(base), rel_se(cand))
    return r, r * math.exp(-half), r * math.exp(half)


def judge_timing(lo: float, hi: float, threshold: float) -> str:
    if lo > 1 + threshold:
        return "regression"
    if hi < 1 / (1 + threshold):
        return "improvement"
    if lo <= 0 or hi / lo > 1 + threshold:
        return "noisy"
    return "unchanged"


def judge_numbers(base_err: float, cand_err: float, rtol: float | None) -> str:
    floor = NUM_FLOOR * rtol if rtol else 0.0
    if cand_err > NUM_FACTOR * base_err and cand_err > floor:
        return "worse"
    if base_err > NUM_FACTOR * cand_err and base_err > floor:
        return "better"
    return "same"


# -- environments ---------------------------------------------------------------------------------


def fw_version(info: dict[str, Any]) -> str | None:
    """'2.11.0+cu130 · CUDA 13.0' for an available framework, None for one that did not run."""
    if not info.get("available"):
        return None
    env = info.get("env", {})
    parts = [str(env.get("version", "?"))]
    if env.get("jaxlib") and env.get("jaxlib") != env.get("version"):
        parts.append(f"jaxlib {env['jaxlib']}")
    if env.get("cuda_runtime"):
        parts.append(f"CUDA {env['cuda_runtime']}")
    return " · ".join(parts)


def describe(doc: dict[str, Any]) -> str:
    gpu = doc["environment"].get("gpu") or "no GPU"
    return f"{doc['created']} · {gpu} · {doc['size']} · seed {doc.get('seed', '?')}"


def _environments(base: dict[str, Any], cand: dict[str, Any], across_versions: bool
                  ) -> tuple[list[str], dict[str, str]]:
    """(header notes, {framework: why its rows are not comparable})."""
    eb, ec = base["environment"], cand["environment"]
    gb, gc = eb.get("gpu"), ec.get("gpu")
    if gb != gc:
        raise RegressError(f"nothing comparable: the baseline ran on {gb or 'no GPU (CPU)'}, "
                           f"the candidate on {gc or 'no GPU (CPU)'}")
    notes, excluded = [], {}
    hb, hc = eb.get("host", {}), ec.get("host", {})
    if hb.get("code") != hc.get("code") and (hb.get("code") or hc.get("code")):
        notes.append(f"triptych code {hb.get('code') or 'unknown'} → {hc.get('code') or 'unknown'}")
    for key, what in (("driver", "driver"), ("python", "Python"), ("numpy", "numpy")):
        if hb.get(key) != hc.get(key):
            notes.append(f"{what} {hb.get(key, '?')} → {hc.get(key, '?')} (compared anyway)")
    if base["size"] != cand["size"]:
        notes.append(f"size preset {base['size']} → {cand['size']} (only points with the same params compare)")
    if base.get("seed") != cand.get("seed"):
        notes.append(f"seed {base.get('seed')} → {cand.get('seed')}: different inputs, numbers not judged")
    fb, fc = eb.get("gpu_memory_fraction"), ec.get("gpu_memory_fraction")
    if fb != fc and fb is not None and fc is not None:
        notes.append(f"GPU memory fraction {fb} → {fc} (compared anyway)")
    fws_b, fws_c = eb.get("frameworks", {}), ec.get("frameworks", {})
    for fw in sorted(set(fws_b) & set(fws_c)):
        vb, vc = fw_version(fws_b[fw]), fw_version(fws_c[fw])
        if vb and vc and vb != vc:
            if across_versions:
                notes.append(f"{fw} {vb} → {vc} (compared across the change)")
            else:
                notes.append(f"{fw} {vb} → {vc}: its rows are not compared (--allow-version-change compares them)")
                excluded[fw] = f"{fw} {vb} → {vc}"
    return notes, excluded


# -- rows -----------------------------------------------------------------------------------------


def _key(scn: dict[str, Any], row: dict[str, Any]) -> tuple[str, str, str, str]:
    points = scn.get("points") or [{}]
    params = dict(points[row.get("point", 0)] if row.get("point", 0) < len(points) else {})
    label = str(params.pop("label", row.get("label", "")) or "")
    params.pop("seed", None)
    return (label, json.dumps(params, sort_keys=True), row["framework"], row["variant"])


def _params(scn: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    points = scn.get("points") or [{}]
    return points[row.get("point", 0)] if row.get("point", 0) < len(points) else {}


def _rtol(scenario: str, params: dict[str, Any]) -> float | None:
    try:
        from scenarios import get

        return get(scenario).tolerance.for_dtype(str(params.get("dtype", "float32")))[0]
    except (KeyError, TypeError, ValueError):
        return None


def _clock(row: dict[str, Any], clock: str) -> tuple[dict[str, Any] | None, np.ndarray | None]:
    t = row.get("timing") or {}
    st = t.get(clock)
    samples = (t.get("samples") or {}).get(clock)
    return st, (np.asarray(samples, dtype=np.float64) if samples else None)


def compare_row(scenario: str, scn_b: dict[str, Any], rb: dict[str, Any], scn_c: dict[str, Any], rc: dict[str, Any],
                clock: str, threshold: float, confidence: float) -> Row | str:
    """The judged row, or why this pair is not comparable."""
    sb, sc = rb["status"], rc["status"]
    label = _key(scn_b, rb)[0]
    row = Row(scenario, label, rb["framework"], rb["variant"], bool(rb.get("hazard")))
    if sb == "skipped" or sc == "skipped":
        which = "both" if sb == sc else ("the baseline" if sb == "skipped" else "the candidate")
        return f"skipped in {which}: {(rb if sb == 'skipped' else rc).get('reason', '')}"
    if sb in FAILED and sc in FAILED:
        return f"failed in both ({sb}, {sc}): {rc.get('reason', '')}"
    if sb in FAILED or sc in FAILED:
        row.status = f"{sb} → {sc}: {(rc if sc in FAILED else rb).get('reason', '')}"
        row.verdict = "regression" if sc in FAILED else "improvement"
        row.why.append("status")
        return row
    # Both ran: timing, then numbers.
    (stb, xb), (stc, xc) = _clock(rb, clock), _clock(rc, clock)
    if stb is None or stc is None:
        return f"no {clock} clock in {'the baseline' if stb is None else 'the candidate'}"
    if stb["median"] <= 0 or stc["median"] <= 0:
        return f"a zero {clock} median"
    if xb is not None and xc is not None and xb.size and xc.size:
        row.ratio, row.lo, row.hi = ratio_ci_bootstrap(xb, xc, confidence)
        row.method = "bootstrap"
    else:
        row.ratio, row.lo, row.hi = ratio_ci_iqr(stb, stc, confidence)
        row.method = "iqr"
    row.base_s, row.cand_s = stb["median"], stc["median"]
    row.timing = judge_timing(row.lo, row.hi, threshold)
    if row.timing in ("regression", "improvement"):
        row.why.append("time")

    if sb != sc:  # ok <-> wrong: the timed outputs' check changed
        row.numbers = "worse" if sc == "wrong" else "better"
        row.status = f"{sb} → {sc}" + (f": {rc.get('check', {}).get('worst', '')}" if sc == "wrong" else "")
        row.why.append("outputs")
    elif not row.hazard:
        cb, cc = rb.get("check") or {}, rc.get("check") or {}
        eb, ec = cb.get("max_rel_err"), cc.get("max_rel_err")
        pb, pc = _params(scn_b, rb), _params(scn_c, rc)
        if eb is not None and ec is not None and pb == pc and cb.get("against") == cc.get("against"):
            row.base_err, row.cand_err = eb, ec
            row.numbers = judge_numbers(eb, ec, _rtol(scenario, pb))
            if row.numbers != "same":
                row.why.append("numbers")

    if row.timing == "regression" or row.numbers == "worse":
        row.verdict = "regression"
    elif row.timing == "improvement" or row.numbers == "better":
        row.verdict = "improvement"
    elif row.timing == "noisy":
        row.verdict = "noisy"
    return row


def regress(base: dict[str, Any], cand: dict[str, Any], *, base_name: str = "baseline", cand_name: str = "candidate",
            clock: str = "device_done", threshold: float = 0.10, confidence: float = 0.95,
            scenarios: list[str] | None = None, frameworks: list[str] | None = None,
            variants: list[str] | None = None, across_versions: bool = False) -> Regress:
    """Compare two validated result documents; RegressError when nothing at all is comparable."""
    if clock not in CLOCKS:
        raise RegressError(f"unknown clock {clock!r}")
    notes, excluded = _environments(base, cand, across_versions)
    rows: list[Row] = []
    nc: list[tuple[str, str]] = []
    for name, scn_b in base["scenarios"].items():
        if scenarios is not None and name not in scenarios:
            continue
        scn_c = cand["scenarios"].get(name)
        if scn_c is None:
            nc.append((name, "not in the candidate"))
            continue
        keep = [r for r in scn_b["rows"] if (frameworks is None or r["framework"] in frameworks)
                and (variants is None or r["variant"] in variants)]
        if not keep and not scn_b["rows"]:
            nc.append((name, "no timing rows in the baseline"))
        by_key_c = {_key(scn_c, r): r for r in scn_c["rows"]}
        seen = set()
        for rb in keep:
            k = _key(scn_b, rb)
            seen.add(k)
            what = "/".join(filter(None, (name, k[0], rb["framework"], rb["variant"])))
            if rb["framework"] in excluded:
                nc.append((what, excluded[rb["framework"]]))
                continue
            rc = by_key_c.get(k)
            if rc is None:
                nc.append((what, "not in the candidate (or at other params)"))
                continue
            got = compare_row(name, scn_b, rb, scn_c, rc, clock, threshold, confidence)
            if isinstance(got, str):
                nc.append((what, got))
            else:
                rows.append(got)
        for k, rc in by_key_c.items():
            if k not in seen and (frameworks is None or rc["framework"] in frameworks) and (
                    variants is None or rc["variant"] in variants):
                nc.append(("/".join(filter(None, (name, k[0], rc["framework"], rc["variant"]))), "not in the baseline"))
    for name in cand["scenarios"]:
        if name not in base["scenarios"] and (scenarios is None or name in scenarios):
            nc.append((name, "not in the baseline"))
    if not rows:
        first = "; ".join(f"{w}: {y}" for w, y in nc[:2]) or "no timed rows"
        raise RegressError(f"nothing comparable between {base_name} and {cand_name} ({first})")
    return Regress(base_name, cand_name, clock, threshold, confidence, notes, rows, nc)


# -- the terminal ---------------------------------------------------------------------------------


def _n(k: int, word: str) -> str:
    return f"{k} {word}{'' if k == 1 else 's'}"


def _pct(r: float) -> str:
    if not math.isfinite(r):
        return "∞"
    return f"{100 * (r - 1):+.1f}%"


def render(res: Regress, base: dict[str, Any], cand: dict[str, Any], console: Any, show_all: bool = False) -> None:
    from rich.markup import escape
    from rich.table import Table

    from harness.report import fmt_s

    console.print(f"[bold]regress[/bold]  baseline  {res.baseline}  ({describe(base)})", highlight=False)
    console.print(f"         candidate {res.candidate}  ({describe(cand)})", highlight=False)
    console.print(f"         clock {res.clock} · threshold {100 * res.threshold:g}% · "
                  f"{100 * res.confidence:g}% interval of the ratio of medians (bootstrap of the repeats; "
                  "from the IQR where a file has no samples)", highlight=False)
    for n in res.notes:
        console.print(f"  [yellow]differs:[/yellow] {n}", highlight=False)
    colour = {"regression": "red", "improvement": "green", "noisy": "yellow", "unchanged": "dim"}
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
                change = f"{_pct(r.ratio)} \\[{_pct(r.lo)}, {_pct(r.hi)}]" + (" iqr" if r.method == "iqr" else "")
            err = "—"
            if r.base_err is not None:
                err = f"{r.base_err:.2g} → {r.cand_err:.2g}"
            if r.status:
                err = (err + "\n" if err != "—" else "") + escape(r.status)
            c = colour[r.verdict]
            what = r.verdict + (f" ({', '.join(r.why)})" if r.why and r.verdict != "noisy" else "")
            t.add_row(r.scenario + (f" · {r.label}" if r.label else ""), r.framework,
                      r.variant + (" (hazard)" if r.hazard else ""), fmt_s(r.base_s), fmt_s(r.cand_s), change, err,
                      f"[{c}]{what}[/{c}]")
        console.print(t)
    n = res.counts()
    console.print(f"compared {_n(len(res.rows), 'row')}: [red]{_n(n['regression'], 'regression')}[/red], "
                  f"[green]{_n(n['improvement'], 'improvement')}[/green], {n['unchanged']} unchanged, "
                  f"[yellow]{n['noisy']} noisy[/yellow]; {len(res.not_comparable)} not comparable")
    for what, why in grouped(res.not_comparable):
        console.print(f"  not comparable: {what}: {why}", highlight=False, markup=False)


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
