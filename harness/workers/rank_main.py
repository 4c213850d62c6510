"""The rank entry point: one process of a group, run by the harness, `torchrun` or `srun` unchanged.

    python -m harness.workers.rank_main --framework torch [--scenarios collectives] [--size smoke]

It reads torchrun's environment contract (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
and joins the framework's group (harness/backends/dist.py). Started by the harness
(harness/workers/ranks.py), it finds the parent's address and key in $TRIPTYCH_RANKS_PARENT /
$TRIPTYCH_RANKS_KEY (the environment, never the command line) and serves the parent's requests,
each sent to every rank: this rank's inputs come from seed + rank (the scenario's make_inputs reads
params["rank"]). Started by a launcher (torchrun, srun, across nodes), it runs the scenarios'
checked variants at the size preset's points, checks its own share against the float64 reference
of the global semantics, prints one line per scenario and exits 1 if any was wrong.
"""
from __future__ import annotations

if __name__ == "__main__":  # a rank keeps compiled modules in the run's folder before the imports below
    from harness.workers import bytecode  # the standard library alone

    bytecode.keep()

import argparse
import os
import sys
from multiprocessing.connection import Client
from typing import Any

from harness.workers import handlers, protocol
from harness.backends import FRAMEWORKS, get as get_backend
from harness.backends.base import Unavailable
from harness.backends.dist import RankEnv, agree_stop, join, leave
from harness.check.equivalence import compare_outputs
from harness.workers.execute import run_variants
from harness.workers.protocol import Hello, Progress, Request
from scenarios import get as get_scenario
from scenarios.spec import Params

PARENT_ENV, KEY_ENV = "TRIPTYCH_RANKS_PARENT", "TRIPTYCH_RANKS_KEY"


def _hello(fw: str, env: RankEnv) -> Hello:
    b = get_backend(fw)
    try:
        group = join(fw, b, env)
    except Unavailable as e:
        return {"available": False, "why": str(e), "on_gpu": False, "env": {}, "pid": os.getpid()}
    agree_stop(fw, b, None)  # every rank at once: JAX compiles the broadcast here, not in a timed row's loop
    return {"available": True, "why": b.device_label(), "on_gpu": b.on_gpu, "pid": os.getpid(),
            "env": b.env() | {"group": group, "world_size": env.world_size}}


def ranked(params: Params, env: RankEnv) -> Params:
    return params | {"rank": env.rank, "world_size": env.world_size}


class Rank:
    """This rank's answers to the parent's requests, each sent to every rank of the group."""

    def __init__(self, fw: str, env: RankEnv) -> None:
        self.fw, self.env = fw, env

    def point(self, req: Request) -> Params:
        return ranked(req.point(), self.env)

    def answer(self, req: Request, progress: Progress) -> Any:
        fw = self.fw
        if req.op == "hello":
            return _hello(fw, self.env)
        if req.op == "equiv":
            return handlers.equiv(fw, str(req.scenario), self.point(req))
        if req.op == "time" and req.timing is not None:
            b = get_backend(fw)
            return handlers.time_point(fw, str(req.scenario), self.point(req), req.timing, req.first,
                                       progress=lambda _t: None, agree=lambda stop: agree_stop(fw, b, stop),
                                       variants=req.variants)
        if req.op == "ceilings":
            return handlers.rank_ceilings(fw, [ranked(p, self.env) for p in req.points])
        raise ValueError(f"a rank serves hello, equiv, time (with its timing) and ceilings, not {req.op!r}")


def serve(fw: str, env: RankEnv) -> None:
    """Call the parent back, answer its requests (harness/workers/protocol.py serve), then leave the group."""
    host, port = os.environ.pop(PARENT_ENV).rsplit(":", 1)
    conn = Client((host, int(port)), authkey=bytes.fromhex(os.environ.pop(KEY_ENV)))
    conn.send(("rank", env.rank))
    protocol.serve(conn, fw, Rank(fw, env).answer)
    leave(fw)


def standalone(fw: str, env: RankEnv, scenarios: list[str], size: str) -> int:
    """Under a launcher: check this rank's share of every checked variant at the preset's points."""
    info = _hello(fw, env)
    if not info["available"]:
        print(f"rank {env.rank}/{env.world_size} {fw}: skipped — {info['why']}", flush=True)
        return 0
    bad = 0
    for name in scenarios:
        scn = get_scenario(name)
        for p in scn.points(size, env.world_size):
            params = ranked(p | {"seed": 0}, env)
            inputs = scn.make_inputs(params)
            want = scn.reference(inputs, params)
            outs = run_variants(scn, get_backend(fw), params, inputs)
            wrong = [f"{v}: {m.describe()}" for v, got in outs.items()
                     if (m := compare_outputs(scn, params, got, want, variant=v)) is not None]
            bad += bool(wrong)
            print(f"rank {env.rank}/{env.world_size} {fw} {name} {p.get('label', '')}: "
                  f"{'WRONG ' + '; '.join(wrong) if wrong else f'{len(outs)} variants exact'} ({info['env']['group']})",
                  flush=True)
    leave(fw)
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.workers.rank_main", description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, choices=FRAMEWORKS)
    ap.add_argument("--scenarios", default="ranks,collectives", help="standalone mode: comma-separated")
    ap.add_argument("--size", default="smoke", help="standalone mode: the size preset (default smoke)")
    a = ap.parse_args(argv)
    try:
        env = RankEnv.from_environ()
    except Unavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if os.environ.get(PARENT_ENV):
        serve(a.framework, env)
        return 0
    return standalone(a.framework, env, [s for s in a.scenarios.split(",") if s], a.size)


if __name__ == "__main__":
    sys.exit(main())
