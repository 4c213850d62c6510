"""launch_overhead: the in-jit loop is one program with no loop left; CUDA graphs replay the same chain."""
from __future__ import annotations

import numpy as np
import pytest

from harness.check.equivalence import compare_outputs
from harness.workers.execute import load_impl, skip_reason
from harness.measure.metrics import collecting
from scenarios import get
from tests.conftest import backend_or_skip, gpu_backend_or_skip

SCN = get("launch_overhead")


def test_graph_needs_a_gpu_in_torch_and_cupy_but_not_in_jax():
    graph = SCN.variant("graph")
    assert graph.needs_gpu("torch") and graph.needs_gpu("cupy") and not graph.needs_gpu("jax")
    t = backend_or_skip("torch")
    if not t.on_gpu:
        assert "needs a CUDA device" in skip_reason(SCN, graph, t, load_impl(SCN.name, "torch"))
    j = backend_or_skip("jax")
    assert skip_reason(SCN, graph, j, load_impl(SCN.name, "jax")) is None


def test_jax_loop_inside_jit_is_unrolled_into_one_program():
    backend_or_skip("jax")
    impl = load_impl(SCN.name, "jax")
    x = np.linspace(-1, 1, 16, dtype=np.float32)
    text = impl.capture.lower(x, ops=9).as_text()
    assert "while" not in text  # no loop left whose counter the host would have to read back
    assert text.count("tanh") >= 1


@pytest.mark.parametrize("fw", ["torch", "jax"])
def test_eager_reports_its_host_cost_per_op(fw):
    b = backend_or_skip(fw)
    impl = load_impl(SCN.name, fw)
    p = {"n": 32, "ops": 20, "dtype": "float32", "seed": 3}
    state = impl.prepare(SCN.make_inputs(p), p, b.device)
    with collecting() as emitted:
        out = impl.run_eager(state)
    b.synchronize(out)
    assert emitted["host_us_per_op"] > 0
    assert compare_outputs(SCN, p, b.to_numpy(out), SCN.reference(SCN.make_inputs(p), p)) is None


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_cuda_graph_replays_the_chain_into_its_static_output(fw):
    b = gpu_backend_or_skip(fw)
    impl = load_impl(SCN.name, fw)
    p = {"n": 1000, "ops": 101, "dtype": "float32", "seed": 5}
    inputs = SCN.make_inputs(p)
    want = SCN.reference(inputs, p)
    state = impl.prepare(inputs, p, b.device)
    for _ in range(3):  # every replay rewrites the poisoned static output from the unchanged input
        impl.poison(state)
        out = impl.run_graph(state)
        b.synchronize(out)
        assert compare_outputs(SCN, p, b.to_numpy(out), want) is None
    with collecting() as eager:
        b.synchronize(impl.run_eager(state))
    with collecting() as graph:
        b.synchronize(impl.run_graph(state))
    assert eager["host_us_per_op"] > 3 * graph["host_us_per_op"], (eager, graph)


def test_list_marks_which_frameworks_need_a_gpu_for_graph():
    from tests.test_cli import run

    r = run("list")
    assert r.returncode == 0
    assert "graph (GPU only in PyTorch, CuPy)" in r.stdout and "prefetched (GPU only in PyTorch, CuPy)" in r.stdout
    assert "h2d_pin_then_copy (GPU only)" in r.stdout  # GPU-only in all three
