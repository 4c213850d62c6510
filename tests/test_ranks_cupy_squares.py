"""ranks: CuPy's fused sum of squares (a RawKernel into partial sums of rows, then the partials
summed) against numpy, on shapes and row strides the rank shares take: data[r::N], fewer rows than a
chunk, more chunks than one, no rows at all. GPU only (CuPy has no CPU path)."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import gpu_backend_or_skip


@pytest.mark.gpu
def test_the_fused_sum_of_squares_matches_numpy_on_every_share():
    gpu_backend_or_skip("cupy")
    import cupy as cp

    from impls.ranks import cupy_impl

    rng = np.random.default_rng(3)
    for rows, cols in ((1, 1), (5, 3), (255, 257), (256, 1024), (1000, 33), (70000, 7)):
        data = rng.integers(-8, 9, size=(rows, cols)).astype(np.float32)
        on_gpu = cp.asarray(data)
        for n in (1, 2, 3, 8):
            for r in range(n):
                got = cp.asnumpy(cupy_impl._squares(on_gpu[r::n]))
                want = (data[r::n].astype(np.float64) ** 2).sum(axis=0)
                np.testing.assert_array_equal(got, want, err_msg=f"rows {rows}, cols {cols}, share {r} of {n}")
