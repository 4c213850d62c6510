"""Every framework x checked variant of every scenario computes the reference, and agrees with the
other frameworks, on inputs drawn by hypothesis. On the GPU the same check runs inside
`make compare` (every scenario x framework x variant, all frameworks at once), so this file is not
part of the `gpu` suite."""
from __future__ import annotations

import pytest
from hypothesis import given

from harness import backends
from harness.check.equivalence import check_example
from harness.workers.execute import load_impl, run_variants, skip_reason
from scenarios import all_scenarios
from tests.conftest import backend_or_skip

# Rank scenarios need a group of processes: tests/test_ranks.py checks them through real rank groups.
CASES = [(s, fw, v) for s in all_scenarios() if not s.ranks for fw in backends.FRAMEWORKS for v in s.checked_variants]


@pytest.mark.parametrize("scenario,framework,variant", CASES,
                         ids=[f"{s.name}-{fw}-{v.name}" for s, fw, v in CASES])
def test_matches_reference_and_other_frameworks(scenario, framework, variant):
    b = backend_or_skip(framework)
    why = skip_reason(scenario, variant, b, load_impl(scenario.name, framework))
    if why:
        pytest.skip(why)
    others = []
    for fw in backends.FRAMEWORKS:
        o = backends.get(fw)
        if fw != framework and o.available()[0] and not skip_reason(scenario, variant, o, load_impl(scenario.name, fw)):
            others.append(o)

    @given(params=scenario.params())
    def prop(params):
        inputs = scenario.make_inputs(params)
        reference = scenario.reference(inputs, params)
        outputs = {(framework, variant.name): run_variants(scenario, b, params, inputs, [variant])[variant.name]}
        for o in others:
            outputs[(o.name, variant.name)] = run_variants(scenario, o, params, inputs, [variant])[variant.name]
        check_example(scenario, params, reference, outputs)

    prop()
