"""XLA's settings that every JAX process of a run shares, set where JAX starts: the harness's JAX
backend (harness/backends/jax_backend.py), its ranks (dist.py) and JAX opened as a guest by another
framework's impl (impls/dlpack_handoff/jax_impl.py guest). Nothing here imports JAX."""
from __future__ import annotations

import os

from harness.backends.pins import pin

TRITON_GEMM_FLAG = "--xla_gpu_enable_triton_gemm=false"


def use_cublas_gemms() -> None:
    """XLA:GPU's matrix products through cuBLAS, as torch's and CuPy's are, instead of Triton GEMMs that XLA
    autotunes at compile time. Why: the autotuning made a training step's first call take seconds, and
    cuBLAS runs the steps as fast (docs/design/jax_gemms.md).
    XLA reads XLA_FLAGS once, when its backend starts: set before then, in this process and (through the
    environment) in every process it starts. A flag the user set on the same option wins."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_enable_triton_gemm" not in flags:
        pin("XLA_FLAGS", f"{flags} {TRITON_GEMM_FLAG}".strip())
