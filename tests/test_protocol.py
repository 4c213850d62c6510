"""The worker protocol (harness/workers/protocol.py): typed requests and replies, and the one serve loop that
process workers and rank processes share."""
from __future__ import annotations

import json
import pickle
import signal

import pytest

from harness.measure import timing
from harness.workers import faults, protocol
from harness.workers.protocol import Reply, Request


@pytest.fixture(autouse=True)
def _signals():
    """serve() ignores SIGINT and SIGTERM, as a worker child does: not in pytest's process after the test."""
    saved = {s: signal.getsignal(s) for s in protocol.STOPS}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_a_request_carries_the_seed_as_a_field_and_survives_the_wire():
    req = Request.make("time", "torch", "sync_points", {"steps": 4, "seed": 7}, timing.preset("smoke"), False)
    assert req.seed == 7 and "seed" not in req.params and req.point() == {"steps": 4, "seed": 7}
    wire = json.loads(json.dumps(req.to_dict()))  # plain data: JSON holds it (the timing config included)
    assert Request.from_dict(wire) == req
    assert Request.make("equiv", "jax", "ranks", {"rows": 2}, seed=3).point() == {"rows": 2, "seed": 3}
    with pytest.raises(ValueError, match="Request.seed"):
        Request("equiv", "torch", "ranks", {"seed": 1})
    with pytest.raises(ValueError, match="disagree"):
        Request.make("equiv", "torch", "ranks", {"seed": 1}, seed=2)
    with pytest.raises(ValueError, match="unknown request"):
        Request("melt", "torch")


def test_variants_to_time_cross_the_wire_and_a_request_for_all_reads_as_an_older_trees_did():
    """A time request may name variants (an interleaved run's later pairs); one that names none leaves the
    field off the wire, so that a worker of a tree from before the field reads it (its from_dict takes
    every key as a field), and a wire without the field reads as every variant."""
    some = Request.make("time", "torch", "sync_points", {"steps": 4}, timing.preset("smoke"), False, seed=1,
                        variants=("on_device",))
    wire = json.loads(json.dumps(some.to_dict()))
    assert wire["variants"] == ["on_device"] and Request.from_dict(wire) == some
    every = Request.make("time", "torch", "sync_points", {"steps": 4}, timing.preset("smoke"), False, seed=1)
    assert "variants" not in every.to_dict() and Request.from_dict(every.to_dict()) == every
    assert Request.from_dict(every.to_dict()).variants == ()


class _Conn:
    """One end of a pipe: the requests to read, then EOF; what was sent."""

    def __init__(self, *incoming) -> None:
        self.incoming, self.sent = list(incoming), []

    def recv(self):
        if not self.incoming:
            raise EOFError
        return self.incoming.pop(0)

    def send(self, msg) -> None:
        self.sent.append(msg)


def _handle(req, progress):
    if req.op == "equiv":
        raise ValueError(f"no {req.scenario}\nsecond line")
    progress("half way")
    return {"point": req.point()}


def test_the_serve_loop_answers_notes_and_failures_and_stops_on_none(monkeypatch):
    monkeypatch.delenv(faults.ENV, raising=False)
    hello = Request.make("time", "torch", "ranks", {"rows": 2, "seed": 5}, timing.preset("smoke"))
    later = Request("hello", "torch")
    conn = _Conn(hello.to_dict(), Request("equiv", "torch", "ranks", {}).to_dict(), None, later.to_dict())
    protocol.serve(conn, "torch", _handle)
    assert conn.incoming == [later.to_dict()]  # None ended the loop
    note, ok, failed = conn.sent
    assert protocol.receive(_Conn(note)) == "half way"
    assert protocol.receive(_Conn(ok)) == Reply(True, {"point": {"rows": 2, "seed": 5}})
    bad = protocol.receive(_Conn(failed))
    assert (bad.ok, bad.status, bad.error) == (False, "error", "ValueError: no ranks")
    assert "second line" in bad.traceback
    with pytest.raises(protocol.WorkerError, match="^rank 1: ValueError: no ranks$"):
        bad.result("rank 1: ")
    protocol.serve(_Conn(), "torch", _handle)  # EOF: the parent is gone, the loop ends


class _PicklingConn(_Conn):
    """A pipe that refuses what pickle refuses (here: a function in the message)."""

    def send(self, msg) -> None:
        pickle.dumps(msg)
        super().send(msg)


def test_a_reply_that_cannot_be_sent_comes_back_as_the_handlers_error(monkeypatch):
    """The worker lives on and says why, as when the handler raises, instead of dying as 'crashed'."""
    monkeypatch.delenv(faults.ENV, raising=False)
    conn = _PicklingConn(Request("hello", "torch").to_dict(), None)
    protocol.serve(conn, "torch", lambda req, progress: {"f": lambda: 1})
    (failed,) = conn.sent
    bad = protocol.receive(_Conn(failed))
    assert (bad.ok, bad.status) == (False, "error") and "pickle" in bad.error.lower()


def test_a_planted_fault_wraps_the_handler_only_in_the_serve_loop(monkeypatch):
    monkeypatch.setenv(faults.ENV, "ranks:torch:raise:equiv")
    conn = _Conn(Request("equiv", "torch", "ranks", {}).to_dict(), Request("equiv", "torch", "collectives", {}).to_dict())
    protocol.serve(conn, "torch", lambda req, _p: req.scenario)
    planted, other = (protocol.receive(_Conn(m)) for m in conn.sent)
    assert not planted.ok and planted.error.startswith("InjectedFault: planted by TRIPTYCH_FAULT")
    assert other == Reply(True, "collectives")
