"""selfcheck: the harness's clock against the frameworks' own tools, written with its environment."""
from __future__ import annotations

import json

import pytest

from harness import handlers, selfcheck
from tests.conftest import backend_or_skip, gpu_backend_or_skip


def test_selfcheck_rows_time_each_kernel_with_both_clocks():
    backend_or_skip("torch")
    rows = handlers.selfcheck("torch")
    assert {r["kernel"].split("_")[0] for r in rows} == {"gemm", "add", "sum"}
    for r in rows:
        assert r["harness_s"] > 0 and r["tool_s"] > 0 and r["tool"].startswith("torch.utils.benchmark")
        assert r["tool_back_to_back_s"] > 0  # blocked_autorange, shown beside the like-for-like number


def test_selfcheck_writes_its_rows_and_environment(tmp_path):
    backend_or_skip("torch")
    code = selfcheck.run_selfcheck(["torch"], tmp_path)
    (path,) = tmp_path.glob("selfcheck_*.json")
    doc = json.loads(path.read_text())
    assert doc["environment"]["frameworks"]["torch"]["env"]["version"]
    assert doc["environment"]["host"]["python"]
    assert len(doc["rows"]) == 3
    # On the CPU nothing is judged, so the exit status is 0; on a GPU it is 0 only if the clocks agree.
    on_gpu = doc["rows"][0]["on_gpu"]
    agree = all(abs(r["harness_s"] / r["tool_s"] - 1) <= selfcheck.AGREE for r in doc["rows"])
    assert code == (0 if (not on_gpu or agree) else 1)


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_harness_clock_agrees_with_the_frameworks_own_tool(fw):
    gpu_backend_or_skip(fw)
    for r in handlers.selfcheck(fw):
        assert abs(r["harness_s"] / r["tool_s"] - 1) <= selfcheck.AGREE, r
