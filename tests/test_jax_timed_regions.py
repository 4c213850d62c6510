"""No eager op inside a timed JAX variant: each rank scenario's JAX variant, called after its
prepare, dispatches only programs the impl jitted itself. An eager `[0]`, `[None]` or reshape is a
program of its own (host work and a launch the other frameworks do not pay), and
make_array_from_process_local_data or device_put moves data the other frameworks moved in prepare.

Run in this process at world size 1 on the CPU: the plumbing is the same at any world size.
"""
from __future__ import annotations

import pytest

from harness import backends
from harness.workers.execute import load_impl, skip_reason, variant_call
from scenarios import all_scenarios
from tests.dispatches import eager_programs, jax_programs

RANK_SCENARIOS = [s for s in all_scenarios() if s.ranks and s.name != "gpu_links"]
CASES = [(s, v) for s in RANK_SCENARIOS for v in s.variants if not v.hazard]


@pytest.fixture(scope="module")
def jax_backend():
    b = backends.get("jax")
    ok, why = b.available()
    if not ok:
        pytest.skip(why)
    return b.load()


@pytest.mark.parametrize("scn,variant", CASES, ids=[f"{s.name}-{v.name}" for s, v in CASES])
def test_a_timed_jax_variant_dispatches_only_its_own_programs(jax_backend, scn, variant):
    impl = load_impl(scn.name, "jax")
    if skip_reason(scn, variant, jax_backend, impl):
        pytest.skip(skip_reason(scn, variant, jax_backend, impl))
    for params in scn.points("smoke"):
        params = dict(params, seed=1, world_size=1, rank=0)
        if skip_reason(scn, variant, jax_backend, impl, params):  # not expressible at this point
            continue
        state = impl.prepare(scn.make_inputs(params), params, jax_backend.device)
        call = variant_call(impl, variant)
        for _ in range(2):  # warm: compile, first-call caches
            if hasattr(impl, "poison"):
                impl.poison(state)
            jax_backend.synchronize(call(state))
        if hasattr(impl, "poison"):
            impl.poison(state)
        with jax_programs() as ran:
            out = call(state)
        jax_backend.synchronize(out)
        extra = eager_programs(ran)
        assert not extra, (f"{scn.name}/{variant.name} ({params.get('label', '')}): the timed call dispatched "
                           f"{extra} beside its own programs {sorted(set(ran) - set(extra))}; reproduce with "
                           f"pytest tests/test_jax_timed_regions.py -k '{scn.name}-{variant.name}'")
