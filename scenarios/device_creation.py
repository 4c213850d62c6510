"""device_creation — make data where it will be used.

Two kinds of data (a params dimension, `kind`): a random normal draw and a deterministic fill (a
formula of the index). The baseline makes the data on the host and copies it to the device; the
concept makes it on the device, where nothing crosses the link. Random draws differ between
generators (numpy, torch's CPU and CUDA generators, CuPy's XORWOW, JAX's threefry), so the normal
draw is compared by distribution (see scenarios.spec.Distribution); the fill must match bit for bit.
Nothing comes from the host's inputs: making the data is the work.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from hypothesis import strategies as st

from scenarios import _strategies as S
from scenarios.spec import Claim, Distribution, Params, Scenario, Tolerance, Variant, Verdict

# The fill: x[i] = (i mod PERIOD) * STEP - SHIFT. Every intermediate is exact in float32 (integers
# below 2**24, a power-of-two step, results on a 1/8 grid below 256), so a fused multiply-add, a
# CPU or any GPU give the same bits; SHIFT is off the grid, so no element is zero.
FILL_PERIOD, FILL_STEP, FILL_SHIFT = 1021, 0.25, 127.875
NORMAL = Distribution(alpha=1e-9)
FULL_N = 16 << 20  # float32 elements: 64 MiB, the host draw alone takes ~0.2 s


def host_numpy(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """The data made with NumPy on the host (CuPy's and JAX's host path), float32."""
    if kind == "normal":
        return rng.standard_normal(n, dtype=np.float32)
    i = np.arange(n, dtype=np.int32)
    return (i % FILL_PERIOD).astype(np.float32) * np.float32(FILL_STEP) - np.float32(FILL_SHIFT)


def make_inputs(p: Params) -> dict[str, np.ndarray]:
    return {}  # the variants make the data themselves (seeded from params["seed"])


def reference(inputs: Mapping[str, np.ndarray], p: Params) -> dict[str, np.ndarray]:
    n = int(p["n"])
    if p["kind"] == "normal":
        # An independent draw from N(0, 1) (its own stream of the seed): compared by distribution.
        return {"normal": np.random.default_rng([int(p["seed"]), 1]).standard_normal(n)}
    return {"fill": (np.arange(n) % FILL_PERIOD) * FILL_STEP - FILL_SHIFT}


def nbytes(p: Params) -> int:
    return int(p["n"]) * 4  # float32


def floor(p: Params, machine: Mapping[str, float], variant: str) -> float | None:
    if variant == "host_then_copy":
        return nbytes(p) / machine["h2d_Bps"] if "h2d_Bps" in machine else None  # the copy alone
    return nbytes(p) / machine["hbm_Bps"] if "hbm_Bps" in machine else None  # writing the array once


def _link(row: dict[str, Any]) -> float:
    return row["timing"]["metrics"].get("link_bytes", float("nan"))


def _device_faster(rows: Mapping[str, dict], fw: str, p: Params) -> Verdict:
    h, d = rows["host_then_copy"], rows["on_device"]
    if not _link(h) > 0:
        return Verdict("device_faster", fw, "inconclusive", "no link here: the framework's device is the host", {})
    th, td = h["timing"]["device_done"], d["timing"]["device_done"]
    diff = th["median"] - td["median"]
    noise = (th["iqr"] + td["iqr"]) / 2
    verdict = "confirmed" if diff > noise else ("refuted" if diff < -noise else "inconclusive")
    create = h["timing"]["metrics"].get("host_create_s", float("nan"))
    return Verdict("device_faster", fw, verdict,
                   f"on the device {td['median'] * 1e3:.3g} ms vs host+copy {th['median'] * 1e3:.3g} ms "
                   f"(of which making it on the host {create * 1e3:.3g} ms; {th['median'] / td['median']:.3g}x); "
                   f"{_link(d) / 1e6:.3g} vs {_link(h) / 1e6:.3g} MB over the link; spread ±{noise * 1e3:.2g} ms",
                   {"on_device_s": td["median"], "host_then_copy_s": th["median"], "host_create_s": create,
                    "speedup": th["median"] / td["median"], "link_bytes_on_device": _link(d),
                    "link_bytes_host_then_copy": _link(h)})


SCENARIO = Scenario(
    name="device_creation",
    title="Create data where it will be used",
    concept=(
        "Data made on the host must cross the host-device link before the device can use it; data made on the "
        "device never crosses it. A random draw made on the host costs the host generator's time plus the copy; "
        "made on the device it is one kernel that writes device memory at its own bandwidth. The generators differ "
        "between frameworks, so random draws are compared by distribution (Welch's t, Brown-Forsythe and "
        "two-sample Kolmogorov-Smirnov tests against a NumPy N(0, 1) draw, each at alpha/3 with alpha = 1e-9: a "
        "correct generator fails with probability at most 1e-9 per comparison); a deterministic fill must match "
        "bit for bit."
    ),
    variants=(
        Variant("host_then_copy", "make the data on the host (the framework's CPU path or NumPy), copy it to the "
                                  "device"),
        Variant("on_device", "make the data on the device: nothing crosses the link"),
    ),
    params=lambda: S.params(kind=st.sampled_from(["normal", "fill"]),
                            n=st.one_of(st.sampled_from([1, 31, 32, 1021, 1022, 1 << 16]), st.integers(1, 1 << 16))),
    sizes={
        "smoke": [{"kind": "normal", "n": 1 << 16, "label": "normal 256 KiB"},
                  {"kind": "fill", "n": 1 << 16, "label": "fill 256 KiB"}],
        # 64 MiB: above the 60 MB L2; the host's normal draw (~0.1-0.2 s) keeps each framework's point short.
        "full": [{"kind": "normal", "n": FULL_N, "label": "normal 64 MiB"},
                 {"kind": "fill", "n": FULL_N, "label": "fill 64 MiB"}],
    },
    make_inputs=make_inputs,
    reference=reference,
    tolerance=Tolerance({"float32": (0.0, 0.0)}),  # the fill is exact; the draw goes by distribution
    distributions={"normal": NORMAL},
    claims=(
        Claim("device_faster", "Creating directly on the device is more efficient than creating on the host "
                               "and transferring.", _device_faster, gpu_only=True),
    ),
    floor=floor,
    key_apis={
        "torch": ("torch.randn(n, device=, generator=)", "torch.arange(n, device=)", "Tensor.to(device)"),
        "cupy": ("cupy.random.default_rng(seed).standard_normal(n, dtype=)", "cupy.arange", "cupy.asarray(numpy)"),
        "jax": ("jax.random.normal(jax.random.key(seed), shape)", "jnp.arange inside jax.jit", "jax.device_put(numpy)"),
    },
    framework_notes={
        "torch": "host_then_copy: torch.randn and the fill on CPU tensors (torch's CPU threads), then .to(device) "
                 "from pageable memory: the host waits for the whole copy. on_device: the same calls with device=, "
                 "torch.randn drawing from a CUDA generator (Philox); the fill is four small kernels.",
        "cupy": "host_then_copy: NumPy makes the data (numpy.random.Generator, one thread), cupy.asarray copies it "
                "through a buffer from CuPy's pinned memory pool. on_device: cupy.random.default_rng (XORWOW) and "
                "the same array code as NumPy: CuPy mirrors NumPy's API.",
        "jax": "host_then_copy: NumPy makes the data, jax.device_put copies it. on_device: one jitted function "
               "(jax.random.normal from a threefry key, or the fill, which XLA fuses into one kernel); the seed is a "
               "device scalar put there once, so nothing crosses the link per run.",
    },
    metrics_doc={
        "link_bytes": "bytes sent over the host-device link per run, counted by construction: the array's size for "
                      "host_then_copy on a GPU, 0 for on_device (and on a CPU device, where there is no link)",
        "host_create_s": "seconds the host spent making the data before the copy (host_then_copy)",
    },
)
