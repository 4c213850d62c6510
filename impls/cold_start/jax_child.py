"""cold_start's child in JAX: one fresh process, its phases timed inside it (impls/_shared/child.py).

    python -m impls.cold_start.jax_child PLATFORM CACHE_DIR IN.npy OUT.npz
JAX is imported only here, after the clock starts. The persistent cache is pointed at CACHE_DIR with
no minimum compile time: at JAX's default (1 s) a program this small would never be written.
"""
import sys
import time

from impls._shared.child import as_child, say  # the standard library alone: before the clock

as_child()

t0 = time.perf_counter()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

t_import = time.perf_counter()
from scenarios.cold_start import SCALE  # noqa: E402  (after the clock: hypothesis is no framework's import)


def main(platform: str, cache: str, src: str, dst: str) -> None:
    events: dict[str, float] = {}

    def seen(event: str, **_kw: object) -> None:
        events[event] = events.get(event, 0) + 1

    def took(event: str, seconds: float, **_kw: object) -> None:
        events[event] = events.get(event, 0.0) + seconds

    jax.monitoring.register_event_listener(seen)
    jax.monitoring.register_event_duration_secs_listener(took)
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    t1 = time.perf_counter()
    x = jax.device_put(np.load(src), jax.devices(platform)[0]).block_until_ready()  # backend, context, copy
    t2 = time.perf_counter()

    @jax.jit
    def program(x):
        y = jnp.tanh(x * SCALE)
        return y, jnp.sum(y * x)

    out = jax.block_until_ready(program(x))  # trace, compile (or read the cache), run
    t3 = time.perf_counter()
    jax.block_until_ready(program(x))  # the in-process cache: one dispatch
    t4 = time.perf_counter()
    np.savez(dst, y=np.asarray(out[0]), s=np.asarray(out[1]))
    say({"import_s": t_import - t0, "init_s": t2 - t1, "first_call_s": t3 - t2, "second_call_s": t4 - t3,
         "cache_hits": events.get("/jax/compilation_cache/cache_hits", 0),
         "compile_s": events.get("/jax/core/compile/backend_compile_duration", float("nan"))})


if __name__ == "__main__":
    main(*sys.argv[1:5])
