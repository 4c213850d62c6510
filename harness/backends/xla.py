"""XLA's settings that every JAX process of a run shares, set where JAX starts: the harness's JAX
backend (harness/backends/jax_backend.py), its ranks (dist.py) and JAX opened as a guest by another
framework's impl (impls/dlpack_handoff/jax_impl.py guest). Nothing here imports JAX."""
from __future__ import annotations

import os

from harness.backends.pins import pin

TRITON_GEMM_FLAG = "--xla_gpu_enable_triton_gemm=false"


def use_cublas_gemms() -> None:
    """XLA:GPU's matrix products through cuBLAS, as torch's and CuPy's are, instead of Triton GEMMs that XLA
    autotunes at compile time. On the H200 (jax 0.11.2, results/probes/jax_triton_gemm.md) that
    autotuning made the first call of data_parallel's full-size step take 17.6 s instead of 0.35 s; the
    step itself took 0.91 ms against 1.12, but 1.04 against 0.92 with two micro-batches (one probe each). In
    the full runs, data_parallel single_process took 2.48-2.52 ms against 2.67-2.68 and tensor_parallel dense
    2.47-2.56 against 2.85; other rows moved within the runs' noise (results/journal.md).
    XLA reads XLA_FLAGS once, when its backend starts: set before then, in this process and (through the
    environment) in every process it starts. A flag the user set on the same option wins."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_enable_triton_gemm" not in flags:
        pin("XLA_FLAGS", f"{flags} {TRITON_GEMM_FLAG}".strip())
