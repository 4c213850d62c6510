"""JAX's second idiom: one process drives all its local devices through a Mesh and jax.shard_map
(JAX's usual single-controller model), against one process per device (the rank groups). The same
shard_map bodies as the rank impls (collectives, ranks, tensor_parallel) at world size 4, which the
rank groups (world size 2) do not reach.

The collectives' shard_map bodies (impls/collectives/jax_impl.py) are the same in both; what differs
is who holds the data: a rank hands in its own block (make_array_from_process_local_data), the
single controller device_puts the whole global array with a NamedSharding and reads back all of it.
Run here on 4 CPU devices forced with XLA_FLAGS, which also checks the bodies at world size 4."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import backend_or_skip

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from impls.collectives.jax_impl import OPS
from scenarios import collectives, point_to_point
n = len(jax.devices())
assert n == 4, jax.devices()
mesh = Mesh(np.array(jax.devices()), ("r",))
for op in OPS:  # the data-moving operations (barrier has no body)
    p = {"op": op, "bytes": 4 * 24, "dtype": "float32", "seed": 9, "world_size": n}
    xs = collectives.make_inputs(p)["x"]  # every rank's block, stacked: the global view
    glob = jax.device_put(xs, NamedSharding(mesh, P("r")))
    got = np.asarray(jax.jit(jax.shard_map(OPS[op], mesh=mesh, in_specs=P("r"), out_specs=P("r")))(glob))
    want = collectives.reference({"x": xs}, p)["out"]
    assert np.array_equal(got, want), op
print("ok", n)
"""


def _on_four_cpu_devices(code: str) -> None:
    """Runs code in a fresh JAX process that sees four CPU devices; it must print "ok 4"."""
    backend_or_skip("jax")
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and p.stdout.strip() == "ok 4", p.stdout[-1000:] + p.stderr[-2000:]


def test_one_process_drives_four_devices_with_the_same_shard_map_bodies():
    _on_four_cpu_devices(CHECK)


BODIES = """
import functools, jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from impls.ranks import jax_impl as ranks_jax
from impls.tensor_parallel import jax_impl as tp_jax
from scenarios import get
n = len(jax.devices())
mesh = Mesh(np.array(jax.devices()), ("r",))
put = lambda a, spec: jax.device_put(a, NamedSharding(mesh, spec))
ranks = get("ranks")
for rows in (5, 8, 3):  # not a multiple of n, a multiple, fewer rows than ranks
    p = {"rows": rows, "cols": 7, "dtype": "float32", "seed": rows, "world_size": n}
    data = ranks.make_inputs(dict(p, rank=0))["data"]
    glob = put(np.concatenate([ranks_jax._Ranked.padded(data, n)] * n), P("r"))  # every rank holds the data set
    want = ranks.reference(ranks.make_inputs(p), p)["total"][0]
    for body, times in ((ranks_jax._Ranked.by_rank, 1), (ranks_jax._Ranked.same_data, n)):
        got = np.asarray(jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("r"), out_specs=P()))(glob))
        assert np.array_equal(got, times * want), (rows, body.__name__, got, want)
tp = get("tensor_parallel")
p = {"batch": 6, "d_model": 5, "hidden_per_rank": 3, "dtype": "float32", "seed": 3, "world_size": n}
whole = {k: put(v, tp_jax.SPECS[k]) for k, v in tp.make_inputs(dict(p, rank=0)).items()}
want = tp.reference(tp.make_inputs(p), p)
want = dict(want, y=want["y"][0], dx=want["dx"][0], db2=want["db2"][0], dw1=np.concatenate(list(want["dw1"]), 1),
            db1=np.concatenate(list(want["db1"])), dw2=np.concatenate(list(want["dw2"])))
for block in (tp_jax._Blocks.megatron, tp_jax._Blocks.naive):
    step = jax.shard_map(tp_jax._Blocks.grads(block), mesh=mesh, in_specs=(tp_jax.SPECS,), out_specs=tp_jax.OUT_SPECS)
    got = jax.jit(step)(whole)
    for k, v in want.items():
        np.testing.assert_allclose(np.asarray(got[k]), v, rtol=2e-4, atol=1e-4, err_msg=f"{block.__name__} {k}")
print("ok", n)
"""


def test_the_rank_impls_shard_map_bodies_at_world_size_4():
    _on_four_cpu_devices(BODIES)
