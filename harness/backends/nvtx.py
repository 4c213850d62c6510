"""NVTX ranges through the NVTX C library, for a framework with no Python binding of its own (JAX).

torch (torch.cuda.nvtx) and CuPy (cupyx.profiler.time_range) push NVTX ranges themselves; JAX's
jax.profiler.TraceAnnotation is a TSL TraceMe, recorded only while jax.profiler traces, and never an
NVTX range: under Nsight Systems a JAX process shows XLA's own NVTX ranges (domain "TSL": XlaModule,
Thunk), not the caller's. This loads libnvToolsExt (pip's nvidia-nvtx wheel, which the CUDA builds of
torch install, or a CUDA toolkit's) so that a JAX row's ranges carry the same names as torch's and
CuPy's. Its calls do nothing unless a tool injected itself at process start (nsys does).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import sys
from typing import Any


def load() -> tuple[Any, str]:
    """(the library with nvtxRangePushA / nvtxRangePop, where it came from) or (None, why not)."""
    candidates = [p for base in sys.path if base and os.path.isdir(os.path.join(base, "nvidia"))
                  for p in sorted(glob.glob(os.path.join(base, "nvidia", "**", "libnvToolsExt.so*"), recursive=True))]
    found = ctypes.util.find_library("nvToolsExt")
    candidates += [found] if found else []
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
            lib.nvtxRangePushA.argtypes, lib.nvtxRangePushA.restype = [ctypes.c_char_p], ctypes.c_int
            lib.nvtxRangePop.argtypes, lib.nvtxRangePop.restype = [], ctypes.c_int
        except (OSError, AttributeError):
            continue
        return lib, path
    return None, "no libnvToolsExt found (pip's nvidia-nvtx wheel or a CUDA toolkit's)"
