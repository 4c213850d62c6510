"""A result file shaped like an H200 run, for the report's tests: every kind of row the report must show.

Built by hand (no GPU here), it holds what a real result can hold: three frameworks with device events
for torch and CuPy only, machine ceilings and floors, a sweep with labelled points, a hazard variant
that went wrong in some runs, skipped, error and timeout rows, a row without a floor, a scenario with a
timeline picture and one whose picture is missing, and one that was not timed.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from harness.results.results import SCHEMA


def stats(median: float, rel: float = 0.02) -> dict[str, float]:
    q1, q3 = median * (1 - rel / 2), median * (1 + rel / 2)
    return {"median": median, "q1": q1, "q3": q3, "mean": median, "min": q1 * 0.99, "max": q3 * 1.01, "n": 20,
            "iqr": q3 - q1}


def ok_row(scn: str, fw: str, variant: str, done: float, ret: float, *, point: int = 0, label: str = "",
           hazard: bool = False, wrong: int = 0, floor: float | None = None, rel: float = 0.02,
           metrics: dict[str, float] | None = None, syncs: int | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "scenario": scn, "framework": fw, "variant": variant, "hazard": hazard, "status": "ok",
        "timing": {"first_call_s": done * 3, "host_return": stats(ret, rel), "device_done": stats(done, rel),
                   "device_events": stats(done * 0.98) if fw in ("torch", "cupy") else None,
                   "metrics": metrics or {}, "checked_repeats": 20 if hazard else 2,
                   "wrong_repeats": wrong, "worst": "x: 3 of 1048576 elements differ" if wrong else ""},
        "check": {"against": "reference", "checked": 20 if hazard else 2, "wrong": wrong,
                  "worst": "x: 3 of 1048576 elements differ" if wrong else ""},
        "host_syncs": syncs, "sync_method": "", "sync_why": "", "point": point, "label": label,
    }
    if floor is not None:
        row["floor_s"], row["pct_of_floor"] = floor, 100 * floor / done
    return row


def bad_row(scn: str, fw: str, variant: str, status: str, reason: str, point: int = 0, label: str = "") -> dict:
    return {"scenario": scn, "framework": fw, "variant": variant, "hazard": False, "status": status,
            "reason": reason, "point": point, "label": label}


def claim(cid: str, text: str, fw: str, verdict: str, evidence: str, numbers: dict, point: int = 0,
          label: str = "") -> dict:
    return {"claim": cid, "text": text, "framework": fw, "verdict": verdict, "evidence": evidence,
            "numbers": numbers, "point": point, "label": label}


def variant(name: str, doc: str, hazard: bool = False, gpu_only: bool = False) -> dict[str, Any]:
    return {"name": name, "doc": doc, "hazard": hazard, "gpu_only": gpu_only}


def timeline_png() -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 1.5), dpi=60)
    ax = fig.add_subplot()
    ax.broken_barh([(0, 3), (4, 2)], (0, 1), color="tab:blue")
    ax.set_title("a timeline")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def fake_doc() -> dict[str, Any]:
    fws = {"torch": {"available": True, "why": "NVIDIA H200", "on_gpu": True,
                     "env": {"version": "2.11.0+cu130", "device": "NVIDIA H200", "float32_matmul": "highest (TF32 off)",
                             "cuda": "13.0"}},
           "cupy": {"available": True, "why": "NVIDIA H200", "on_gpu": True,
                    "env": {"version": "14.2.0", "device": "NVIDIA H200", "runtime": "13020"}},
           "jax": {"available": True, "why": "cuda:0", "on_gpu": True,
                   "env": {"version": "0.11.2", "device": "cuda:0", "float32_matmul": "highest",
                           "preallocate": "false"}}}
    a = "async_dispatch"
    ad_rows = []
    for fw, ret in (("torch", 0.00055), ("cupy", 0.00079), ("jax", 0.00115)):
        ad_rows += [ok_row(a, fw, "sync_each", 0.0890, 0.0889, floor=0.0860),
                    ok_row(a, fw, "async", 0.0875, ret, floor=0.0860),
                    ok_row(a, fw, "async_poll", 0.0950 if fw == "jax" else 0.0877, 0.0876, floor=0.0860,
                           rel=0.18 if fw == "jax" else 0.02, metrics={"cpu_iters_while_waiting": 41233.0})]
    ad_claims = [claim("returns_early", "The host does not wait.", fw, "confirmed", f"ratio = {r:.3g} < 0.1",
                       {"host_return_s": r * 0.0875, "device_done_s": 0.0875})
                 for fw, r in (("torch", 0.006), ("cupy", 0.009), ("jax", 0.013))]
    ad_claims.append(claim("host_free", "While the device computes, the host is free.", "jax", "refuted",
                           "iterations = 12 ≤ 100", {"cpu_iters": 12}))
    p = "pinned_transfer"
    labels = ["4 MiB", "64 MiB", "1 GiB"]
    pt_rows: list[dict[str, Any]] = []
    pt_claims = []
    for i, (lab, nbytes) in enumerate(zip(labels, (4 << 20, 64 << 20, 1 << 30))):
        floor = nbytes / 54.8e9
        for fw in ("torch", "cupy", "jax"):
            pt_rows.append(ok_row(p, fw, "pageable", nbytes / 8.3e9, nbytes / 8.3e9, point=i, label=lab, floor=floor,
                                  syncs=1 if fw == "torch" else None))
            if fw == "jax":
                pt_rows.append(bad_row(p, fw, "pinned", "skipped", "JAX cannot pin a user's numpy array", i, lab))
                pt_rows.append(bad_row(p, fw, "read_before_sync", "error",
                                       "RuntimeError: <pinned> [memory] kind 'pinned_host' | not supported", i, lab))
            else:
                pt_rows.append(ok_row(p, fw, "pinned", nbytes / 54e9, 2e-5, point=i, label=lab, floor=floor))
                pt_rows.append(ok_row(p, fw, "read_before_sync", nbytes / 54e9, 2e-5, point=i, label=lab,
                                      hazard=True, wrong=17 if i == 2 else 0))
            pt_claims.append(claim("pinned_faster", "Pinned memory makes copies faster.", fw,
                                   "inconclusive" if fw == "jax" else "confirmed",
                                   "variant 'pinned' did not run" if fw == "jax" else "6.5x faster",
                                   {} if fw == "jax" else {"speedup": 6.5}, i, lab))
    s = "sync_points"
    sp_rows = [ok_row(s, "torch", "item_each_step", 0.052, 0.052, syncs=100),
               ok_row(s, "torch", "on_device", 0.013, 0.013, syncs=1),
               bad_row(s, "cupy", "item_each_step", "timeout", "the worker did not answer within 900 s"),
               bad_row(s, "cupy", "on_device", "timeout", "the worker did not answer within 900 s"),
               ok_row(s, "jax", "item_each_step", 0.048, 0.048, syncs=100),
               bad_row(s, "jax", "on_device", "crashed", "the worker died (signal 11)")]
    return {
        "schema": SCHEMA, "created": "2026-12-02T10:00:00+00:00", "finished": "2026-12-02T10:09:00+00:00",
        "command": ["python -m harness", "compare"], "size": "full", "seed": 1234, "examples": 25,
        "isolation": "process",
        "environment": {"gpu": "NVIDIA H200", "host": {"python": "3.12.3", "platform": "Linux", "cpus": 16,
                                                       "numpy": "2.5.2", "driver": "580.159.04"},
                        "frameworks": fws,
                        "machine": {"hbm_Bps": 4.228e12, "h2d_Bps": 54.8e9, "d2h_Bps": 54.7e9, "fp32_flops": 51e12}},
        "scenarios": {
            a: {"title": "The host enqueues, the device computes", "concept": "Calls queue | kernels <and> return.",
                "variants": [variant("sync_each", "wait every step"), variant("async", "enqueue all"),
                             variant("async_poll", "poll")],
                "equivalence": {"status": "passed", "examples": 25, "frameworks": ["torch", "cupy", "jax"],
                                "message": ""},
                "points": [{"m": 8192, "n": 4096, "steps": 16, "dtype": "float32", "seed": 1234}],
                "rows": ad_rows, "claims": ad_claims, "cross_framework": [],
                "timelines": {"png": "timelines/async_dispatch.png", "trace": "timelines/async_dispatch.trace.json"}},
            p: {"title": "Pinned memory, fast copies", "concept": "Pageable host memory is staged.",
                "variants": [variant("pageable", "np array"), variant("pinned", "page-locked", gpu_only=True),
                             variant("read_before_sync", "reads before the copy is done", hazard=True, gpu_only=True)],
                "equivalence": {"status": "passed", "examples": 25, "frameworks": ["torch", "cupy", "jax"],
                                "message": ""},
                "points": [{"nbytes": n, "label": lab, "seed": 1234} for n, lab in
                           zip((4 << 20, 64 << 20, 1 << 30), labels)],
                "rows": pt_rows, "claims": pt_claims,
                "cross_framework": [{"frameworks": ["torch", "cupy"], "status": "agree", "elements": 65536,
                                     "problems": [], "point": 2, "label": "1 GiB"}],
                "timelines": {"png": "timelines/missing.png"}},
            s: {"title": "Reading a value syncs; reading metadata does not", "concept": "Reading a value waits.",
                "variants": [variant("item_each_step", "read every step"), variant("on_device", "read once")],
                "equivalence": {"status": "failed", "examples": 3, "frameworks": ["torch", "jax"],
                                "message": "losses differ: jax vs torch\nrerun: python -m harness check ..."},
                "points": [{"steps": 100, "seed": 1234}], "rows": sp_rows, "claims": [], "cross_framework": []},
            "event_sync": {"title": "Events order streams", "concept": "Not timed in this run.",
                           "variants": [variant("device_sync", "sync all")],
                           "equivalence": {"status": "passed", "examples": 25, "frameworks": ["torch"], "message": ""},
                           "points": [{"n": 4, "seed": 1234}], "rows": []},
        },
    }


def write_fake_result(folder: Path) -> Path:
    """The fake result as results/<name>.json with its timeline picture beside it; returns the JSON's path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "timelines").mkdir(exist_ok=True)
    (folder / "timelines" / "async_dispatch.png").write_bytes(timeline_png())
    path = folder / "20261202T100000Z_nvidia-h200_full.json"
    path.write_text(json.dumps(fake_doc(), indent=1))
    return path
