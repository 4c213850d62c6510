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


def _answers(scn, params):
    """What a correct framework's worker answers: every checked variant's outputs, the reference's own."""
    ref = scn.reference(scn.make_inputs(params), params)
    return {v.name: ref for v in scn.checked_variants}


def test_an_examples_frameworks_run_side_by_side_and_each_worker_is_asked_once_at_a_time():
    """concurrent: the frameworks' calls of an example meet (a barrier that calls taking turns would break), and
    no framework is asked while its previous call still runs."""
    import threading

    from harness.check.equivalence import run_equivalence
    from scenarios import get

    scn, fws = get("donation"), ["a", "b", "c"]
    meet, lock, busy, most = threading.Barrier(len(fws), timeout=20), threading.Lock(), {fw: 0 for fw in fws}, [0]

    def execute(fw, params):
        with lock:
            busy[fw] += 1
            most[0] = max(most[0], busy[fw])
        try:
            meet.wait()
            return _answers(scn, params)
        finally:
            with lock:
                busy[fw] -= 1

    eq = run_equivalence(scn, execute, fws, 3, seed=1, concurrent=True)
    assert eq.status == "passed", eq.message
    assert most[0] == 1 and not any(busy.values())


def test_a_failing_framework_fails_the_example_once_the_others_have_answered():
    """The first failure in framework order is the example's, and the slower frameworks' calls have ended by
    then: the next example (hypothesis shrinking) never finds a worker still busy."""
    import threading
    import time

    from harness.check.equivalence import run_equivalence
    from scenarios import get

    scn, started, ended, lock = get("donation"), [0], [0], threading.Lock()

    def execute(fw, params):
        if fw == "a":
            raise RuntimeError("impl a raised")
        with lock:
            started[0] += 1
        time.sleep(0.05)
        with lock:
            ended[0] += 1
        return _answers(scn, params)

    eq = run_equivalence(scn, execute, ["a", "b"], 3, seed=1, concurrent=True)
    assert eq.status == "failed" and "impl a raised" in eq.message
    assert started[0] == ended[0] > 0


def test_a_stop_while_the_reference_is_made_does_not_wait_for_the_workers():
    """Ctrl-C (or the runner's stop) in the parent leaves at once: the runner kills the busy workers. Only an
    ordinary error waits for the example's calls."""
    import dataclasses
    import threading

    from harness.check.equivalence import run_equivalence
    from scenarios import get

    release, finished = threading.Event(), threading.Event()

    def execute(fw, params):
        release.wait(20)  # a worker still busy when the stop comes
        finished.set()
        return {}

    def stopped(inputs, params):
        raise KeyboardInterrupt

    scn = dataclasses.replace(get("donation"), reference=stopped)
    with pytest.raises(KeyboardInterrupt):
        run_equivalence(scn, execute, ["a"], 2, seed=1, concurrent=True)
    assert not finished.is_set()
    release.set()


@pytest.mark.parametrize("name,isolation,together", [("async_dispatch", "process", True),
                                                     ("async_dispatch", "none", False),
                                                     ("collectives", "process", False),
                                                     ("memory_pools", "process", False),
                                                     ("cold_start", "process", False)])
def test_side_by_side_only_for_workers_of_their_own_without_ranks_or_children(name, isolation, together):
    from harness.run.equiv_phase import side_by_side
    from harness.run.options import CompareOptions
    from scenarios import get

    assert side_by_side(get(name), CompareOptions([name], ["torch"], "full", 5, 1, isolation=isolation)) is together
