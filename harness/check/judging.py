"""A scenario's claims and cross-framework check, judged on a point's rows.

Claims are judged against the run's noise in one place, so that no scenario needs noise code of its
own: each claim is judged on the rows as measured, then again on NOISE_DRAWS copies of the rows whose
timing medians are replaced by draws of the hierarchical bootstrap (processes, then repeats;
harness/measure/noise.py). A verdict that does not hold in at least AGREE of the draws is inside the noise:
"inconclusive", with the share said in the evidence. (Metrics the impls emit are not resampled.)
"""
from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

from harness.backends import FRAMEWORKS
from harness.check.equivalence import compare_key
from harness.measure.noise import hierarchical_medians, split
from harness.results.model import CLOCKS, ClaimResult, CrossCheck, Json, Row, counts_of
from scenarios.spec import Arrays, Claim, Params, Scenario

NOISE_DRAWS = 200
AGREE = 0.95
NOT_ON_CPU = "not decidable on a CPU, where the device is the host"  # a Claim.gpu_only judged there


class Judged(TypedDict, total=False):
    """One claim's verdict for one framework (judge_with_noise), the part of a ClaimResult the judging decides:
    the verdict, its evidence and numbers, the share of the noise's draws it held in, and not_decidable "cpu"
    for a claim about a GPU's machinery judged on a CPU."""

    verdict: str
    evidence: str
    numbers: dict[str, Any]
    holds_in: float
    not_decidable: str


def judge_claims(scn: Scenario, params: Params, rows: list[Row],
                 on_cpu: frozenset[str] = frozenset()) -> list[ClaimResult]:
    """Every claim's verdict per framework that ran; on_cpu: the frameworks whose device was a CPU."""
    verdicts = []
    timed = ("ok", "wrong")
    frameworks = sorted({r.framework for r in rows if r.status in timed}, key=FRAMEWORKS.index)
    plain = [r.to_dict() for r in rows]  # a scenario's Claim.judge reads rows as plain data (scenarios/spec.py)
    for claim in scn.claims:
        for fw in frameworks:
            mine = [(r, d) for r, d in zip(rows, plain) if r.framework == fw]
            by_variant = {r.variant: d for r, d in mine if r.status in (timed if claim.reads_checks else ("ok",))}
            # a variant that gave no figure (or, but to a claim about the checks, wrong outputs): a judge that
            # compares variants would pick among the rest
            lost = [f"{r.variant} ({r.status})" for r, _ in mine
                    if r.status in LOST and not (claim.reads_checks and r.status == "wrong")]
            cut: Judged = {"verdict": "inconclusive", "evidence": f"not judged without {', '.join(lost)}", "numbers": {}}
            if lost and not claim.reads_checks:
                verdicts.append(_claim_result(claim, fw, cut))
                continue
            got = judge_with_noise(claim, by_variant, fw, params, fw in on_cpu, frozenset(v.name for v in scn.variants))
            if lost and got["verdict"] == "confirmed":  # wrong runs refute on their own; none seen confirm nothing
                got = cut
            verdicts.append(_claim_result(claim, fw, got))
    return verdicts


def _claim_result(claim: Claim, fw: str, got: Judged) -> ClaimResult:
    """The claim's record, its keys in the order they were judged (from_dict keeps it: a claim whose variant
    was missing has its numbers before its evidence, as results have always had it)."""
    return ClaimResult.from_dict({"claim": claim.id, "text": claim.text, "framework": fw} | got)


# Rows that ran and gave no figure, or one of wrong outputs: a claim about the others would be judged on a
# part of what it compares (the best path among those left, "for every variant" over fewer of them).
LOST = ("error", "oom", "timeout", "crashed", "wrong")


def judge_with_noise(claim: Claim, by_variant: dict[str, Json], fw: str, params: Params,
                     on_cpu: bool = False, variants: frozenset[str] | None = None) -> Judged:
    """One claim's verdict for one framework, tested against the run's noise. by_variant: the framework's rows
    as plain data (Row.to_dict: what a scenario's Claim.judge reads). variants: the scenario's, so
    that a figure the judge missed is not called a variant that did not run."""
    ranks = world_size(by_variant, params)
    if claim.communicates and ranks is not None and ranks < 2:
        return {"verdict": "inconclusive", "evidence": "one rank, nothing communicated", "numbers": {"world_size": ranks}}
    try:
        v = claim.judge(by_variant, fw, params)
    except KeyError as e:  # a variant (or a figure) the claim needs is not there for this framework
        missing = e.args[0] if e.args else ""
        out: Judged = {"verdict": "inconclusive", "numbers": {},
                               "evidence": (f"{e} was not measured" if variants is not None and missing not in variants
                                            else f"variant {e} did not run")}
        if claim.gpu_only and on_cpu:
            out |= {"evidence": f"{NOT_ON_CPU} ({out['evidence']})", "not_decidable": "cpu"}
        return out
    if claim.gpu_only and on_cpu:
        return {"verdict": "inconclusive", "evidence": f"{NOT_ON_CPU} (the CPU's figures: {v.evidence})",
                "numbers": dict(v.numbers), "not_decidable": "cpu"}
    out = {"verdict": v.verdict, "evidence": v.evidence, "numbers": dict(v.numbers)}
    if v.verdict == "inconclusive":
        return out
    draws = _resampled(by_variant, NOISE_DRAWS)
    if draws is None:
        return out
    held = sum(claim.judge(rows, fw, params).verdict == v.verdict for rows in draws) / len(draws)
    out["holds_in"] = held
    if held < AGREE:
        out["verdict"] = "inconclusive"
        out["evidence"] = (f"inside the run's noise: '{v.verdict}' holds in only {100 * held:.0f}% of "
                           f"{len(draws)} resamples of the repeats ({v.evidence})")
    return out


def world_size(by_variant: dict[str, Json], params: Params) -> int | None:
    """The ranks the rows ran on (a rank row records its group's size), else the params' world size;
    None for a scenario without ranks."""
    for row in by_variant.values():
        if "ranks" in row:
            return int(row["ranks"])
    return int(params["world_size"]) if "world_size" in params else None


def _resampled(by_variant: dict[str, Json], draws: int) -> list[dict[str, Json]] | None:
    """draws copies of the rows, each clock's median replaced by a hierarchical bootstrap draw; None
    where the rows keep no samples."""
    meds: dict[tuple[str, str], np.ndarray] = {}
    for name, row in by_variant.items():
        t = row.get("timing") or {}
        samples = t.get("samples") or {}
        for clock in CLOCKS:
            if samples.get(clock) and t.get(clock):
                counts = counts_of(t, clock)
                procs = split(samples[clock], counts) if counts else [np.asarray(samples[clock])]
                meds[(name, clock)] = hierarchical_medians(procs, resamples=draws, seed=len(meds))
    if not meds:
        return None
    out = []
    for i in range(draws):
        rows = {}
        for name, row in by_variant.items():
            t = dict(row["timing"])
            for clock in CLOCKS:
                if (name, clock) in meds:
                    t[clock] = dict(t[clock], median=float(meds[(name, clock)][i]))
            rows[name] = dict(row, timing=t)
        out.append(rows)
    return out


def cross_check(scn: Scenario, params: Params, samples: list[tuple[str, Arrays]]) -> CrossCheck | None:
    """Where timed outputs were checked against each framework's own baseline (the reference being
    too costly at this size), compare the baselines' output samples across frameworks:
    samples = [(framework, {output: strided sample})]."""
    if len(samples) < 2:
        return None
    (fa, a), problems = samples[0], []
    for fb, b in samples[1:]:
        for key, va in a.items():
            m = compare_key(scn, params, key, b.get(key, np.array([])), va, widen=2.0, variant=scn.baseline.name)
            if m is not None:
                problems.append(f"{fa} vs {fb}: {m.describe()}")
    return CrossCheck(frameworks=[f for f, _ in samples], status="agree" if not problems else "disagree",
                      elements=int(sum(np.asarray(v).size for v in a.values())), problems=problems)
