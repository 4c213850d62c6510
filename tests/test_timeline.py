"""Timelines: spans are recorded only in the traced run, every ran variant gets a timeline or the reason
why not, JAX traces are read per stream, and the pictures and Chrome traces land next to the result."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.measure import timeline
from harness.workers.execute import load_impl, variant_call
from harness.backends.jax_backend import spans_from_chrome_trace
from harness.measure.timeline import chrome_trace, span, trace_variant, write_timelines
from scenarios import get
from tests.conftest import backend_or_skip, gpu_backend_or_skip

ROOT = Path(__file__).resolve().parent.parent
SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _trace(fw: str, scenario: str, variant: str, **override) -> dict:
    b = backend_or_skip(fw)
    scn = get(scenario)
    params = scn.params_for_size("smoke") | {"seed": 5} | override
    impl = load_impl(scenario, fw)
    return trace_variant(b, impl, variant_call(impl, scn.variant(variant)), scn.make_inputs(params), params)


def backends_on_gpu(fw: str) -> bool:
    return backend_or_skip(fw).on_gpu


def test_span_is_a_shared_no_op_outside_a_traced_run():
    assert timeline._active is None
    a, b = span("copy", "h2d 0"), span("compute", "compute 0")
    assert a is b  # one shared null context: the timed repeats pay for nothing
    with a:
        pass
    assert timeline._active is None


def test_torch_on_the_cpu_records_host_clock_spans_in_order():
    if backends_on_gpu("torch"):
        pytest.skip("on a GPU torch records CUDA events; see the gpu tests")
    tl = _trace("torch", "copy_compute_overlap", "serial")
    assert tl["why"] == "" and tl["lanes"] == ["main"] and "host wall clock" in tl["clock"]
    n = get("copy_compute_overlap").params_for_size("smoke")["batches"]
    assert [s[1] for s in tl["spans"]] == [f"{k} {i}" for i in range(n) for k in ("h2d", "compute")]
    ends = [s[3] for s in tl["spans"]]
    assert all(0 <= s[2] <= s[3] for s in tl["spans"]) and ends == sorted(ends)


def test_jax_on_the_cpu_reads_xla_ops_from_the_profiler():
    if backends_on_gpu("jax"):
        pytest.skip("on a GPU JAX's trace has device streams; see the gpu tests")
    tl = _trace("jax", "copy_compute_overlap", "overlapped")
    assert tl["spans"], tl["why"]
    assert "jax.profiler" in tl["clock"] and all(lane.startswith("XLA CPU thread") for lane in tl["lanes"])
    assert min(s[2] for s in tl["spans"]) == 0.0


def test_a_failing_traced_run_is_recorded_not_raised(monkeypatch):
    b = backend_or_skip("torch")
    impl = load_impl("copy_compute_overlap", "torch")
    scn = get("copy_compute_overlap")
    p = scn.params_for_size("smoke") | {"seed": 1}

    def broken(state):
        raise RuntimeError("planted")

    tl = trace_variant(b, impl, broken, scn.make_inputs(p), p)
    assert tl["spans"] == [] and "planted" in tl["why"]
    assert timeline._active is None


GPU_TRACE = {"traceEvents": [
    {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
    {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}},
    {"ph": "M", "pid": 2, "tid": 7, "name": "thread_name", "args": {"name": "Stream #7(Compute)"}},
    {"ph": "M", "pid": 2, "tid": 9, "name": "thread_name", "args": {"name": "Stream #9(MemcpyH2D)"}},
    {"ph": "M", "pid": 2, "tid": 1, "name": "thread_name", "args": {"name": "XLA Ops"}},
    {"ph": "X", "pid": 1, "tid": 3, "ts": 5.0, "dur": 900.0, "name": "PjitFunction(step)"},
    {"ph": "X", "pid": 2, "tid": 9, "ts": 100.0, "dur": 300.0, "name": "MemcpyH2D"},
    {"ph": "X", "pid": 2, "tid": 7, "ts": 250.0, "dur": 400.0, "name": "loop_fusion",
     "args": {"hlo_op": "fusion.3", "hlo_module": "jit_step"}},
    {"ph": "X", "pid": 2, "tid": 1, "ts": 250.0, "dur": 400.0, "name": "fusion.3"},  # derived line: not a stream
]}


def test_jax_gpu_trace_gives_one_lane_per_stream():
    tl = spans_from_chrome_trace(GPU_TRACE)
    assert "CUPTI" in tl["clock"] and tl["why"] == ""
    assert tl["spans"] == [["Stream #9(MemcpyH2D)", "MemcpyH2D", 0.0, 300e-6],
                           ["Stream #7(Compute)", "fusion.3", 150e-6, 550e-6]]


def test_a_trace_without_device_work_says_why():
    tl = spans_from_chrome_trace({"traceEvents": GPU_TRACE["traceEvents"][:1]})
    assert tl["spans"] == [] and "/host:CPU" in tl["why"]


def _doc(panels: dict) -> dict:
    rows = [{"framework": fw, "variant": v, "status": "ok", "timeline": tl} for (fw, v), tl in panels.items()]
    rows.append({"framework": "cupy", "variant": "serial", "status": "skipped", "reason": "no GPU"})
    return {"scenarios": {"copy_compute_overlap": {"rows": rows}, "sync_points": {"rows": []}}}


def test_write_timelines_writes_a_png_and_a_chrome_trace(tmp_path):
    tl = {"clock": "CUDA events", "lanes": ["copy", "compute"],
          "spans": [["copy", "h2d 0", 0.0, 1e-3], ["compute", "compute 0", 1e-3, 2e-3], ["copy", "h2d 1", 1e-3, 2e-3]],
          "why": ""}
    doc = _doc({("torch", "overlapped"): tl, ("jax", "overlapped"): {"clock": "", "spans": [], "why": "no streams"}})
    written = write_timelines(doc, tmp_path, "run1")
    entry = doc["scenarios"]["copy_compute_overlap"]
    assert entry["timelines"] == {"png": "run1/timeline_copy_compute_overlap.png",
                                  "trace": "run1/timeline_copy_compute_overlap.trace.json"}
    assert "timelines" not in doc["scenarios"]["sync_points"]  # nothing traced there: nothing drawn
    assert sorted(p.name for p in written) == ["timeline_copy_compute_overlap.png",
                                               "timeline_copy_compute_overlap.trace.json"]
    assert all(set(p.name) <= SAFE for p in written)
    assert (tmp_path / entry["timelines"]["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    trace = json.loads((tmp_path / entry["timelines"]["trace"]).read_text())
    names = {(e["name"], e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "M" and "name" in e["args"]}
    assert ("process_name", "torch · overlapped") in names and ("thread_name", "compute") in names
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["tid"], e["ts"], e["dur"]) for e in xs] == [
        ("h2d 0", 1, 0.0, 1000.0), ("compute 0", 2, 1000.0, 1000.0), ("h2d 1", 1, 1000.0, 1000.0)]
    assert trace["otherData"]["notes"] == {"jax · overlapped": "no streams"}


def test_a_picture_that_cannot_be_drawn_is_recorded(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise ValueError("planted")

    monkeypatch.setattr(timeline, "render_png", broken)
    doc = _doc({("torch", "serial"): {"clock": "", "spans": [["main", "op", 0.0, 1.0]], "why": ""}})
    assert write_timelines(doc, tmp_path, "run2") == []
    assert "planted" in doc["scenarios"]["copy_compute_overlap"]["timelines"]["why"]


def test_chrome_trace_keeps_lane_order():
    tl = {"lanes": ["b", "a"], "spans": [["a", "x", 0.0, 1.0], ["b", "y", 0.5, 1.0]], "clock": "c"}
    ev = chrome_trace("s", [("torch · v", tl)])["traceEvents"]
    assert {e["name"]: e["tid"] for e in ev if e["ph"] == "X"} == {"x": 2, "y": 1}


def test_compare_writes_timelines_next_to_the_result(tmp_path):
    """A CPU run still yields honest timelines (host clock for torch, XLA's threads for JAX) or the
    reason why none could be made, referenced from the result JSON by relative paths."""
    out = tmp_path / "res"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "harness", "compare", "--scenarios", "copy_compute_overlap",
                        "--frameworks", "torch,jax", "--size", "smoke", "--examples", "1", "--seed", "3",
                        "--out", str(out)], cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    (result,) = out.glob("*.json")
    doc = json.loads(result.read_text())
    entry = doc["scenarios"]["copy_compute_overlap"]
    assert (out / entry["timelines"]["png"]).is_file() and (out / entry["timelines"]["trace"]).is_file()
    assert Path(entry["timelines"]["png"]).parent.name == result.stem
    for row in entry["rows"]:
        if row["status"] == "ok":
            tl = row["timeline"]
            assert tl["spans"] or tl["why"], row["variant"]
            assert tl["clock"] or tl["why"]
        else:
            assert "timeline" not in row
    assert "timelines:" in r.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("fw", ["torch", "cupy"])
def test_event_timeline_shows_kernels_side_by_side(fw):
    """The CUDA-event path: many_streams' spans sit on their own lanes and overlap in time."""
    gpu_backend_or_skip(fw)
    tl = _trace(fw, "concurrent_kernels", "many_streams", jobs=4, elems=4096, iters=1 << 16)
    assert "CUDA events" in tl["clock"] and tl["why"] == ""
    assert len(tl["lanes"]) == 4 and len(tl["spans"]) == 4
    spans = sorted(tl["spans"], key=lambda s: s[2])
    assert all(0 <= s[2] < s[3] for s in spans)
    assert spans[1][2] < spans[0][3], f"no two kernels overlapped: {spans}"


@pytest.mark.gpu
def test_jax_gpu_timeline_comes_from_device_streams():
    gpu_backend_or_skip("jax")
    tl = _trace("jax", "copy_compute_overlap", "overlapped", batches=4, rows=512, dim=1024, features=512)
    assert tl["spans"], tl["why"]
    assert "CUPTI" in tl["clock"] and all("Stream" in lane for lane in tl["lanes"])
