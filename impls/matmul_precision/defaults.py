"""Each framework's own float32 matmul setting, read in a fresh child process (default_child.py) started
with none of the harness's pins (harness/backends/pins.py): what a user's process gets, the user's own
settings (CUPY_TF32, JAX_DEFAULT_MATMUL_PRECISION, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE) included. The worker
has its precision pinned, so only a new interpreter can say what the default is. Read once per worker
process, untimed (prepare). Nothing here imports a framework."""
from __future__ import annotations

from typing import Any

from impls._shared.child import child_env, run_child

_READ: dict[str, Any] = {}


def read(framework: str) -> Any:
    """The framework's `own_setting()` as a fresh, unpinned interpreter reports it (cached per process)."""
    if framework not in _READ:
        got = run_child("impls.matmul_precision.default_child", [framework], env=child_env(unpinned=True),
                        timeout=300.0)
        _READ[framework] = got["setting"]
    return _READ[framework]
