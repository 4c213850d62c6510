"""`check SCENARIO --params JSON`: run one equivalence example (the reproducer a failure prints).

It checks what the equivalence phase of a compare run checks: every available framework's checked
variants against the float64 reference and each other. A rank scenario runs on a group of
world_size rank processes per framework (harness/workers/ranks.py, as in a compare run; world_size from the
params, else the run's default) and its gathered outputs are checked against the global reference.
Exit 0: everything checked matches; 1: a mismatch, or an impl that raised or a rank group that was
lost (one line each); 2: bad params, or nothing was checked (every framework or variant skipped here).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from harness.run.parser import UsageError, default
from harness import backends
from harness.check.equivalence import EquivalenceFailure, check_example
from harness.check.param_bounds import refuse
from harness.results.model import FrameworkEnv
from harness.results.results import MAX_DIGITS
from harness.workers.execute import load_impl, run_variants, skip_reason
from harness.workers.ranks import RankGroup, WORLD_SIZE_ENV, default_world_size
from harness.workers.worker import WorkerError, WorkerLost
from scenarios import get
from scenarios.spec import Arrays, Params

MAX_WORLD_SIZE = 1024  # as compare's --world-size


def run(a: argparse.Namespace, argv: list[str]) -> int:

    scn = get(a.scenario)
    params = parse_params(a.params)
    if scn.ranks:
        params = with_world_size(params)
    why = refuse(scn, params)
    if why:
        raise UsageError(f"--params do not fit {scn.name}: {why}")
    try:
        inputs = scn.make_inputs(params)
        reference = scn.reference(inputs, params)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"--params do not fit {scn.name}: {type(e).__name__}: {e}") from None
    outputs: dict[tuple[str, str], Any] = {}
    notes: list[str] = []  # what ran and what did not: printed only when something was checked
    skipped: dict[str, str] = {}
    for fw in a.frameworks:
        got, lost = (_on_ranks if scn.ranks else _here)(scn, fw, params, inputs)
        if lost is not None:
            skipped[fw] = lost
            notes.append(f"{fw}: skipped — {lost}")
            continue
        if isinstance(got, str):  # the impl raised or its group was lost: a failure, reproduced
            for n in notes:
                print(n)
            print(got)
            return 1
        for variant, out in got.items():
            outputs[(fw, variant)] = out
            notes.append(f"{fw}/{variant}: ran")
    if not outputs:
        whys = "; ".join(f"{fw}: {w}" for fw, w in skipped.items())
        raise UsageError(f"check {scn.name}: nothing was checked here ({whys})")
    for n in notes:
        print(n)
    try:
        check_example(scn, params, reference, outputs)
    except EquivalenceFailure as e:
        print(str(e))
        return 1
    print(f"{scn.name}: {len(outputs)} outputs match the reference and each other")
    return 0


def parse_params(text: str) -> Params:
    """--params as a JSON object; integers bounded in digits as in a result file (a 5,000-digit int
    would otherwise stop int() itself with a traceback), NaN/Infinity kept as strings (refused later)."""
    def bounded_int(t: str) -> int:
        if len(t.lstrip("-")) > MAX_DIGITS:
            raise UsageError(f"--params: an integer of {len(t.lstrip('-'))} digits (at most {MAX_DIGITS})")
        return int(t)

    try:
        params = json.loads(text, parse_constant=lambda c: c, parse_int=bounded_int)
    except (json.JSONDecodeError, RecursionError) as e:
        raise UsageError(f"--params is not JSON: {getattr(e, 'msg', e)}") from None
    except ValueError as e:  # whatever json's own number parsing refuses
        raise UsageError(f"--params is not JSON: {e}") from None
    if not isinstance(params, dict):
        raise UsageError("--params must be a JSON object")
    return params


def with_world_size(params: Params) -> Params:
    """A rank scenario's params with their world size (the run's default where they name none), which
    the scenario's params then admit: $TRIPTYCH_WORLD_SIZE, read by scenarios/_ranks.py and the ranks."""
    ws = params.get("world_size")  # params: keys are parameter names (data)
    if ws is None:
        ws = default_world_size()
    if type(ws) is not int or not 1 <= ws <= MAX_WORLD_SIZE:
        raise UsageError(f"--params: world_size must be an integer between 1 and {MAX_WORLD_SIZE}, not {ws!r}")
    os.environ[WORLD_SIZE_ENV] = str(ws)
    return params | {"world_size": ws}


def _here(scn: Any, fw: str, params: Params, inputs: Any) -> tuple[dict[str, Arrays] | str, str | None]:
    """({variant: outputs}, None) in this process; (_, why) when nothing of fw can run here."""

    b = backends.get(fw)
    ok, why = b.available()
    if not ok:
        return {}, why
    got = run_variants(scn, b, params, inputs)
    if got:
        return got, None
    impl = load_impl(scn.name, fw)
    whys = {skip_reason(scn, v, b, impl, params) or "did not run" for v in scn.checked_variants}
    return {}, "; ".join(sorted(whys)) or "no checked variant"


def _on_ranks(scn: Any, fw: str, params: Params, inputs: Any) -> tuple[dict[str, Arrays] | str, str | None]:
    """As _here, on a group of params["world_size"] rank processes (started, used once, closed); the
    outputs gathered along a first axis (rank), as the compare run's equivalence phase gets them.
    A group that raised or was lost: its one-line message in place of the outputs."""
    g = RankGroup(fw, params["world_size"])  # params: keys are parameter names (data)
    try:
        return _ask_group(g, scn, fw, params)
    except BaseException:
        g.kill()  # a stop: the ranks go at once
        raise
    finally:
        g.close()  # asks every rank to leave its group; nothing left to do after a kill


def _ask_group(g: Any, scn: Any, fw: str, params: Params) -> tuple[dict[str, Arrays] | str, str | None]:
    n, timeout = params["world_size"], default("timeout_s")  # params: keys are parameter names (data)
    try:
        info = FrameworkEnv.from_dict(g.request("hello", timeout=timeout))  # the ranks' hello, as a result records it
    except (WorkerError, WorkerLost) as e:
        return {}, f"failed to start {n} ranks: {e}"
    if not info.available:
        return {}, info.why
    try:
        got = g.request("equiv", scn.name, params, timeout=timeout)
    except (WorkerError, WorkerLost) as e:
        return f"{scn.name}/{fw} on {n} ranks: {e}", None
    if not got:
        return {}, f"no checked variant ran on its {n} ranks"
    return got, None
