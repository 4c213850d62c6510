"""Labels that several outputs (list, report, docs) must word alike."""
from __future__ import annotations

from typing import Any

NAMES = {"torch": "PyTorch", "cupy": "CuPy", "jax": "JAX"}


def gpu_needs(variant: Any) -> str:
    """"GPU only", "GPU only in PyTorch, CuPy" or "": from the spec's gpu_only (a Variant, or a variant
    as a result file records it), per framework: a variant JAX runs on the CPU is not "GPU only"."""
    g = variant.get("gpu_only") if isinstance(variant, dict) else variant.gpu_only
    if not g:
        return ""
    if g is True:
        return "GPU only"
    return f"GPU only in {', '.join(NAMES.get(f, f) for f in g)}"


def gpu_label(variant: Any, before: str = " ", style: str = "({})") -> str:
    needs = gpu_needs(variant)
    return before + style.format(needs) if needs else ""
