"""The equivalence phase of a scenario in a compare run: hypothesis over the frameworks' workers.

A framework lost during equivalence (its worker hung, died or ran out of memory) is named in the
verdict, and the others are checked against the reference and each other without it.
"""
from __future__ import annotations

from typing import Any, Callable

from harness.check.equivalence import run_equivalence
from harness.run.options import CompareOptions
from harness.workers.worker import WorkerError, WorkerLost
from scenarios.spec import Scenario


class _FrameworkLost(RuntimeError):
    pass


def examples(scn: Scenario, opts: CompareOptions) -> int:
    """The most examples a scenario's equivalence draws (hypothesis may draw fewer): --examples, at most the
    scenario's max_examples (those whose every example starts processes)."""
    return min(opts.examples, scn.max_examples or opts.examples)


def side_by_side(scn: Scenario, opts: CompareOptions) -> bool:
    """Whether an example's frameworks run at once: where each framework's worker is a process of its own. In
    one process (--isolation none) they share its interpreter. Rank groups' collectives on the same GPUs, and
    variants whose child processes start a framework with its defaults (JAX preallocating 75% of the GPU,
    memory_pools, cold_start), were written for a GPU that the harness's other processes leave idle."""
    return (opts.isolation == "process" and not scn.ranks
            and not any(v.fresh_process for v in scn.checked_variants))


def equivalence(scn: Scenario, workers: dict[str, Any], frameworks: list[str], opts: CompareOptions,
                stopped: Callable[[], None]) -> dict[str, Any]:
    """Equivalence of the frameworks' checked variants. A framework whose worker is lost (hung, died,
    out of memory) fails the verdict with what happened, and the rest are checked again without it."""
    excluded: dict[str, str] = {}
    remaining = list(frameworks)
    while True:
        lost: dict[str, str] = {}

        def execute(fw: str, params: dict[str, Any]) -> Any:
            if not lost:
                try:
                    return workers[fw].request("equiv", scn.name, params, timeout=opts.timeout_s)
                except WorkerLost as e:
                    lost[fw] = f"{e.status}: {e}"
                except WorkerError as e:
                    if e.status != "oom":
                        raise  # an impl that raises on some params: hypothesis shrinks to the smallest
                    lost[fw] = f"{e.status}: {e}"
            # Sticky: while hypothesis shrinks, no example waits for a lost worker again.
            fw, why = next(iter(list(lost.items())))  # a copy: another framework's call may add to it meanwhile
            raise _FrameworkLost(f"{scn.name}/{fw}: {why}")

        eq = run_equivalence(scn, execute, remaining, examples(scn, opts), seed=opts.seed,
                             concurrent=side_by_side(scn, opts))
        stopped()  # a stop that hypothesis reported as a failure is a stop
        if not lost:
            break
        excluded |= lost
        remaining = [f for f in remaining if f not in lost]
        if not remaining:
            break
    d = eq.to_dict()
    if excluded:
        gone = "; ".join(f"{fw} {why}" for fw, why in excluded.items())
        rest = (f"the others ({', '.join(remaining)}) {eq.status} over {eq.examples} examples"
                + (f": {eq.message}" if eq.message and remaining else "")) if remaining else "no framework left"
        d |= {"status": "failed", "frameworks": list(frameworks), "excluded": excluded,
              "message": f"{scn.name}: lost during equivalence: {gone}; {rest}"}
    return d
