"""gpu_links — how GPUs talk: a device-to-device copy between two GPUs, direct or through the host.

A buffer of `count` floats on device 0 is copied to device 1. The baseline stages it through host
memory (device 0 -> host -> device 1: two crossings of the host link); `peer` copies it directly
(P2P over NVLink or PCIe where peer access is on; the driver stages it otherwise). Each impl reports
`peer_access` (1 where device 0 can address device 1's memory) and `link_bytes` (the buffer's bytes:
GB/s is the copy's rate). It needs two devices and is skipped with that reason elsewhere; JAX's
logic also runs on two CPU devices forced with XLA_FLAGS=--xla_force_host_platform_device_count=2.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from scenarios import _strategies as S
from scenarios.spec import Claim, Params, Scenario, Tolerance, Variant, Verdict, ratio_verdict


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(p["seed"])
    return {"x": rng.standard_normal(int(p["count"]), dtype=np.float32).astype(p["dtype"])}


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    return {"copy": inputs["x"].astype(np.float64)}


def _direct_wins(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    host, peer = (rows[v]["timing"]["device_done"]["median"] for v in ("via_host", "peer"))
    return ratio_verdict("direct_wins", fw, host / peer, 1.0, lower_is_confirmed=False,
                         what="via_host / peer", numbers={"speedup": host / peer})


SCENARIO = Scenario(
    name="gpu_links",
    title="How GPUs talk: peer-to-peer against staging through the host",
    concept=(
        "Two GPUs in one machine can copy to each other directly (peer-to-peer over NVLink or PCIe) or through "
        "host memory, which crosses the slower host link twice. Whether the direct path exists depends on the "
        "topology (nvidia-smi topo -m) and on peer access being enabled; the frameworks enable it for you."
    ),
    variants=(
        Variant("via_host", "device 0 -> host -> device 1"),
        Variant("peer", "device 0 -> device 1 directly (torch .to('cuda:1'), cudaMemcpyPeer, device_put)"),
    ),
    params=lambda: S.params(count=S.dims(1, 4096), dtype=S.float_dtypes("float32")),
    sizes={"smoke": {"count": 1 << 16, "dtype": "float32"},
           "full": {"count": 1 << 26, "dtype": "float32"}},  # 256 MiB
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (0.0, 0.0)}),  # a copy: bit-exact
    devices=2,
    claims=(Claim("direct_wins", "A direct copy between GPUs beats a round trip through the host.",
                  _direct_wins, gpu_only=True),),
    key_apis={
        "torch": ("Tensor.to('cuda:1')", "torch.cuda.can_device_access_peer", "Tensor.cpu()"),
        "cupy": ("cupy.cuda.runtime.memcpyPeerAsync", "cupy.cuda.runtime.deviceCanAccessPeer", "cupy.cuda.Device(1)"),
        "jax": ("jax.device_put(x, jax.devices()[1])", "jax.device_get"),
    },
    framework_notes={
        "torch": "Tensor.to(another GPU) runs cudaMemcpyPeerAsync on the source device's current stream, ordered "
                 "after and before the destination's current stream; torch enables peer access where the topology "
                 "allows. peer does not block the host. via_host does, for both halves: .cpu() waits for the "
                 "download and .to('cuda:1') of a pageable tensor waits for its upload.",
        "cupy": "memcpyPeerAsync works without peer access too (the driver then stages the copy itself). peer "
                "enqueues it on device 0's current stream between event waits on device 1's current stream, as torch "
                "does, and does not block the host. via_host: get() waits for the download; the upload (cp.asarray "
                "on device 1) is asynchronous, and device 0's current stream waits on its event, so that the "
                "harness's synchronize (device 0's) covers it. via_host's host-return therefore leaves the upload "
                "out in CuPy and JAX and holds it in torch; device-done holds it in all three.",
        "jax": "device_put to another device lets XLA pick the path; JAX exposes no peer-access switch. Neither "
               "device_put blocks the host (device_get in via_host does); the harness waits on the outputs "
               "themselves (block_until_ready), wherever they live.",
    },
)
