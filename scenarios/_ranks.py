"""What every rank scenario shares: the world size its params carry, and per-rank inputs.

A rank scenario's params carry "world_size" (the harness's --world-size, through
$TRIPTYCH_WORLD_SIZE; the number of GPUs, or 2 on the CPU) and, inside a rank, "rank". Its
make_inputs gives one rank's inputs when params name the rank, else every rank's, stacked along a
new first axis; its reference gives the rank's share of the global result the same way. So the
harness checks the stacked outputs of a group against the stacked reference, and a rank started by
torchrun checks its own share.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios.spec import Arrays, Params, Verdict

WORLD_SIZE_ENV = "TRIPTYCH_WORLD_SIZE"


def world_size() -> int:
    return int(os.environ.get(WORLD_SIZE_ENV, "2"))


def world_sizes() -> st.SearchStrategy[int]:
    """The run's world size: every example goes to the same group of ranks."""
    return st.just(world_size())


def size_of(p: Params) -> int:
    """The params' world size; the run's where they name none (a size preset's point)."""
    return int(p.get("world_size", world_size()))


def ranks_of(p: Params) -> list[int]:
    return [int(p["rank"])] if "rank" in p else list(range(size_of(p)))


def per_rank(p: Params, one: Callable[[Params, int], Arrays]) -> Arrays:
    """one(p, rank) for the rank in p, or for every rank stacked along axis 0 (the global view)."""
    parts = [one(p, r) for r in ranks_of(p)]
    if "rank" in p:
        return parts[0]
    return {k: np.stack([part[k] for part in parts]) for k in parts[0]}


def small_ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, bound: int = 4) -> np.ndarray:
    """Integer-valued floats in [-bound, bound] without 0, each of the 2 x bound values equally likely:
    every summation order gives the same bits (as in nccl-tests), and no element equals a zeroed buffer.
    Drawn as int8 (bound <= 127): at 256 MiB a rank's draw takes a fraction of int64 draws' seconds."""
    v = rng.integers(-bound, bound, size=shape, dtype=np.int8)  # -bound .. bound - 1
    v += v >= 0  # 0 .. bound - 1 -> 1 .. bound
    return v.astype(dtype)


def hazard_caught(claim: str, variant: str) -> Callable[[Mapping[str, dict], str, Params], Verdict]:
    """A judge: the hazard variant's checked runs were wrong (inconclusive with one rank, where it is not a bug)."""

    def judge(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
        c = rows[variant]["check"]
        n = int(rows[variant].get("ranks", size_of(p)))
        numbers = {"wrong": c["wrong"], "checked": c["checked"], "world_size": n}
        if n < 2:
            return Verdict(claim, fw, "inconclusive", "one rank: nothing to get wrong", numbers)
        word = "confirmed" if c["wrong"] > 0 else "refuted" if c["checked"] else "inconclusive"  # nothing checked: nothing seen
        return Verdict(claim, fw, word, f"{variant}: {c['wrong']} of {c['checked']} checked runs wrong at "
                                        f"world size {n}", numbers)

    return judge
