"""Running one framework's impl of a scenario, in this process.

An impl, impls/<scenario>/<framework>_impl.py, defines prepare(inputs, params, device) -> state (untimed)
and run_<variant>(state) -> outputs (enqueues the work), optionally poison, NOT_EXPRESSIBLE, cannot_run
and cannot_run_at; the harness, not the impl, converts to numpy, synchronizes and times. The contract in
full: docs/CONTRIBUTING.md, "The impl contract".
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable

from harness.backends import Backend
from scenarios.spec import Arrays, Params, Scenario, Variant


def load_impl(scenario: str, framework: str) -> ModuleType:
    return importlib.import_module(f"impls.{scenario}.{framework}_impl")


def skip_reason(scenario: Scenario, variant: Variant, backend: Backend, impl: ModuleType,
                params: Params | None = None) -> str | None:
    """Why this variant cannot run with this framework on this device (at these params), or None."""
    why = getattr(impl, "NOT_EXPRESSIBLE", {}).get(variant.name)
    if why:
        return f"not expressible in {backend.name}: {why}"
    lacks = impl.cannot_run(backend.device) if hasattr(impl, "cannot_run") else None
    if lacks:
        return lacks
    at = impl.cannot_run_at(variant.name, params) if params is not None and hasattr(impl, "cannot_run_at") else None
    if at:
        return at
    if variant.needs_gpu(backend.name) and not backend.on_gpu:
        return f"needs a CUDA device ({backend.name} runs on the CPU here)"
    if not hasattr(impl, f"run_{variant.name}"):
        return f"impls/{scenario.name}/{backend.name}_impl.py has no run_{variant.name}"
    return None


def variant_call(impl: ModuleType, variant: Variant) -> Callable[[Any], Any]:
    return getattr(impl, f"run_{variant.name}")


def run_variants(scenario: Scenario, backend: Backend, params: Params, inputs: Arrays | None = None,
                 variants: list[Variant] | None = None) -> dict[str, Arrays]:
    """Run each (checked) variant once on fresh state; numpy outputs keyed by variant. Variants that
    cannot run here are left out."""
    impl = load_impl(scenario.name, backend.name)
    inputs = scenario.make_inputs(params) if inputs is None else inputs
    results: dict[str, Arrays] = {}
    for v in variants if variants is not None else scenario.checked_variants:
        if skip_reason(scenario, v, backend, impl, params):
            continue
        state = impl.prepare(inputs, params, backend.device)
        if hasattr(impl, "poison"):
            impl.poison(state)
        out = variant_call(impl, v)(state)
        backend.synchronize(out)
        results[v.name] = backend.to_numpy(out)
        del state, out
    return results
