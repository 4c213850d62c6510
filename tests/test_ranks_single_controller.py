"""JAX's second idiom: one process drives all its local devices through a Mesh and jax.shard_map
(JAX's usual single-controller model), against one process per device (the rank groups).

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


def test_one_process_drives_four_devices_with_the_same_shard_map_bodies():
    backend_or_skip("jax")
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    p = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0 and p.stdout.strip() == "ok 4", p.stdout[-1000:] + p.stderr[-2000:]
