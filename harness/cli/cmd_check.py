"""`check SCENARIO --params JSON`: run one equivalence example (the reproducer a failure prints)."""
from __future__ import annotations

import argparse
import json

from harness.cli.parser import UsageError


def run(a: argparse.Namespace, argv: list[str]) -> int:
    from harness import backends
    from harness.equivalence import EquivalenceFailure, check_example
    from harness.execute import run_variants
    from harness.param_bounds import refuse
    from scenarios import get

    scn = get(a.scenario)
    try:
        params = json.loads(a.params, parse_constant=lambda c: c)  # NaN/Infinity stay strings: refused below
    except (json.JSONDecodeError, RecursionError) as e:
        raise UsageError(f"--params is not JSON: {getattr(e, 'msg', e)}") from None
    if not isinstance(params, dict):
        raise UsageError("--params must be a JSON object")
    why = refuse(scn, params)
    if why:
        raise UsageError(f"--params do not fit {scn.name}: {why}")
    try:
        inputs = scn.make_inputs(params)
        reference = scn.reference(inputs, params)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"--params do not fit {scn.name}: {type(e).__name__}: {e}") from None
    outputs = {}
    for fw in a.frameworks:
        b = backends.get(fw)
        ok, why = b.available()
        if not ok:
            print(f"{fw}: skipped — {why}")
            continue
        for variant, got in run_variants(scn, b, params, inputs).items():
            outputs[(fw, variant)] = got
            print(f"{fw}/{variant}: ran")
    try:
        check_example(scn, params, reference, outputs)
    except EquivalenceFailure as e:
        print(str(e))
        return 1
    print(f"{scn.name}: {len(outputs)} outputs match the reference and each other")
    return 0
