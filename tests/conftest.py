"""Shared test set-up: hypothesis profiles, the `gpu` and `slow` markers, and the rank groups.

`gpu` marks the GPU suite (`make test-gpu`, `pytest -m gpu`). Tests in it that need a GPU skip
themselves, with the framework's own reason, where there is none; those that don't (equivalence)
also run on the CPU. `slow` marks the long end-to-end runs that `make test` leaves to
`make test-slow` (CI runs both). `group` is one torch and one JAX group of 2 ranks for the whole
session: starting one costs seconds of imports and a rendezvous, and no test that takes it needs a
fresh one (those that kill or plant faults in a group start their own).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness import backends
from harness.backends.xla import use_cublas_gemms
from harness.check.equivalence import register_profiles

register_profiles()
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
# no run the tests start keeps compiled Python in the user's ~/.cache (harness/workers/bytecode.py); the
# tests of that folder name one of their own
os.environ.setdefault("TRIPTYCH_PYCACHE", "off")
use_cublas_gemms()  # as the runner does: JAX's GEMMs through cuBLAS, no Triton autotuning at compile time


def pytest_configure(config: pytest.Config) -> None:
    from hypothesis import settings

    if not config.getoption("hypothesis_profile", None):
        settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "quick"))


# The long end-to-end runs `make test` leaves to `make test-slow` (CI runs both), by node id: each is
# minutes of a whole compare, or the same check again on another scenario of a kind the main suite
# already covers (its first scenario stays there).
SLOW = (
    "tests/test_cli.py::test_compare_smoke_writes_a_valid_result",  # every scenario, a full compare + report
    "tests/test_check.py::test_check_on_ranks_passes_without_a_plant[point_to_point]",
    "tests/test_check.py::test_check_on_ranks_passes_without_a_plant[tensor_parallel]",
    "tests/test_check.py::test_check_on_ranks_reproduces_a_planted_wrong_output[point_to_point]",
    "tests/test_check.py::test_check_on_ranks_reproduces_a_planted_wrong_output[tensor_parallel]",
    "tests/test_check.py::test_check_on_ranks_passes_without_a_plant[ranks_default_world_size]",  # [ranks] stays
    # Chromium opening report.html at both widths (make test keeps the HTML's own checks in test_report.py)
    "tests/test_report.py::test_reports_do_not_scroll_sideways[1400]",
    "tests/test_report.py::test_reports_do_not_scroll_sideways[1280]",
    # The toy scenario through make docs, its tests and compare in a copy of the repository (make test keeps
    # test_the_doc_names_each_step_this_test_takes, which holds the checklist to the steps the slow one takes)
    "tests/test_contributing.py::test_a_toy_scenario_added_by_the_checklist_runs_through_compare",
    # JAX's data-parallel variants against the float64 large batch (make test keeps torch's, and JAX's
    # buckets and hazard tests)
    "tests/test_data_parallel.py::test_every_variant_matches_the_float64_large_batch[jax]",
    # A whole compare with planted faults read back from the file (make test keeps the faults' unit tests and
    # test_a_fault_costs_only_its_own_rows[raise])
    "tests/test_faults.py::test_the_cli_writes_the_result_with_rows_that_say_what_happened",
    # Faults that wait for a timeout or restart workers (a raised fault stays in make test)
    "tests/test_faults.py::test_a_fault_costs_only_its_own_rows[hang]",
    "tests/test_faults.py::test_a_fault_costs_only_its_own_rows[oom]",
    "tests/test_faults.py::test_a_fault_costs_only_its_own_rows[crash]",
    "tests/test_faults.py::test_a_framework_lost_in_equivalence_is_named_and_the_rest_still_checked",
    "tests/test_ranks.py::test_a_failing_rank_ends_its_whole_group[hang-timeout-did not answer within 8 s (group killed)]",
    "tests/test_robust.py::test_sigterm_while_a_rank_is_busy_ends_the_run_at_once",
    # Several processes timed end to end
    "tests/test_selfcheck.py::test_selfcheck_writes_its_rows_and_environment",
    "tests/test_selfcheck.py::test_selfcheck_rows_time_each_kernel_with_both_clocks",
    "tests/test_planted_slowdown.py::test_unchanged_host_paced_rows_are_flagged_at_the_intervals_rate_not_the_bootstraps",
    "tests/test_interleaved_regress.py::test_one_commit_against_itself_torch_and_jax",
    "tests/test_interleaved_regress.py::test_a_planted_slowdown_on_the_candidate_alone_is_the_one_difference",
    "tests/test_ranks_torchrun.py::test_two_torchrun_launchers_on_localhost[torch]",
    "tests/test_ranks_torchrun.py::test_two_torchrun_launchers_on_localhost[jax]",
    # A sweep of damaged files: [with_jsonschema] stays in make test; without it, the fallback checks
    "tests/test_sweep_results.py::test_damaged_files_never_crash_report_or_regress[without_jsonschema]",
    # The quick families of issue 49's hostile sweep (make test holds each family with tests of its own)
    *(f"tests/test_sweep_hostile.py::test_every_hostile_case_of_a_quick_family_holds[{f}]" for f in (1, 2, 3, 4, 10, 11)),
    # A whole compare with timelines drawn (the timeline's unit tests stay in make test)
    "tests/test_timeline.py::test_compare_writes_timelines_next_to_the_result",
    # JAX's cold and warm compile caches, each in fresh child processes
    "tests/test_equivalence.py::test_matches_reference_and_other_frameworks[cold_start-jax-cold_cache]",
    "tests/test_equivalence.py::test_matches_reference_and_other_frameworks[cold_start-jax-warm_cache]",
)
# A stop at each phase: make test keeps what a terminal's Ctrl-C (SIGINT to the group) and `timeout`
# (SIGTERM to the process) send; the other two pairings of each phase run in the slow set.
STOPS = "tests/test_stops.py::test_a_stop_at_each_phase_keeps_the_result["
SLOW_STOPS = ("-SIGINT-process]", "-SIGTERM-group]")
# Every committed report but the newest is re-rendered in the slow set (each costs seconds of drawing).
COMMITTED_REPORTS = "tests/test_report.py::test_committed_reports_equal_what_the_renderer_makes["


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the slow set; under pytest-xdist, every test that takes `group` runs on one
    worker, so the groups start once."""
    reports = sorted(i.nodeid for i in items if i.nodeid.startswith(COMMITTED_REPORTS))  # names start with UTC time
    slow = set(SLOW) | set(reports[:-1]) | {i.nodeid for i in items
                                            if i.nodeid.startswith(STOPS) and i.nodeid.endswith(SLOW_STOPS)}
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
        if xdist and "group" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("ranks"))


def rank_children() -> list[int]:
    """Rank processes this test process started that are still alive (zombies included)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"harness.workers.rank_main" in cmd and ppid == os.getpid():
            found.append(int(d.name))
    return found


@pytest.fixture(scope="session", params=("torch", "jax"))
def group(request):
    """A group of 2 ranks of torch (gloo) or JAX (CPU collectives), shared by every test that takes it."""
    from harness.workers.ranks import RankGroup
    from scenarios import _ranks as R

    backend_or_skip(request.param)
    os.environ[R.WORLD_SIZE_ENV] = "2"
    g = RankGroup(request.param, 2)
    info = g.request("hello", timeout=120)
    assert info["available"], info["why"]
    yield g
    pids = set(g.pids)
    g.close()
    assert not pids & set(rank_children()), "a rank outlived close()"


def backend_or_skip(fw: str) -> backends.Backend:
    b = backends.get(fw)
    ok, why = b.available()
    if not ok:
        pytest.skip(f"{fw}: {why}")
    return b


class VirtualClock:
    """time.perf_counter and time.sleep on one virtual clock: each read advances it 1 us, a sleep by its
    length. A test of how the harness spends time then measures its rule, not how a loaded CI host
    schedules sleeps (CI's 2 cores stretched a 10 ms sleep to 19 ms and failed a ratio). Only the thread that
    made it reads it: another thread (an earlier test's worker watching its parent, asleep 0.5 s a turn) gets
    the real functions, and so cannot move this test's clock. So a duration taken across threads (a pool's) would
    mix the two clocks: a test on this clock keeps its timing on one thread."""

    def __init__(self) -> None:
        import threading
        import time

        self.t = 0.0
        self._owner = threading.get_ident()
        self._get_ident = threading.get_ident
        self._real = (time.perf_counter, time.sleep)

    def perf_counter(self) -> float:
        if self._get_ident() != self._owner:
            return self._real[0]()
        self.t += 1e-6
        return self.t

    def sleep(self, seconds: float) -> None:
        if self._get_ident() != self._owner:
            self._real[1](seconds)
            return
        self.t += max(seconds, 0.0)


@pytest.fixture
def virtual_clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    import time

    clock = VirtualClock()
    monkeypatch.setattr(time, "perf_counter", clock.perf_counter)  # what harness.backends.base.wall reads
    monkeypatch.setattr(time, "sleep", clock.sleep)
    return clock


def gpu_backend_or_skip(fw: str) -> backends.Backend:
    b = backend_or_skip(fw)
    if not b.on_gpu:
        pytest.skip(f"{fw} runs on the CPU here: this test needs a CUDA GPU")
    return b


def synthetic_row(variant, done, ret=None, iqr=0.0, link=1, pct=None, floor=None, kernel=None, **metrics):
    """A timing row as the worker writes it, with only what the claims read (for verdict tests); kernel: the
    kernel clock's median, where the row has one."""
    t = {"device_done": {"median": done, "iqr": iqr}, "host_return": {"median": done if ret is None else ret},
         "metrics": {"link_bytes": link, **metrics}}
    if kernel is not None:
        t["kernel"] = {"median": kernel, "iqr": iqr}
    row = {"variant": variant, "timing": t, "check": {"wrong": 0, "checked": 0}}
    if pct is not None:
        row |= {"pct_of_floor": pct, "floor_s": floor}
    return row


def judge_claim(scenario, claim, rows, params, fw="torch"):
    from scenarios import get

    c = next(c for c in get(scenario).claims if c.id == claim)
    return c.judge({r["variant"]: r for r in rows}, fw, params)
