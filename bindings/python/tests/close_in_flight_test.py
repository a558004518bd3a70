"""Closing a stage-3 engine while a prefetch it started is still in flight:
the close waits for that collective, whose peer may still be running Python
code, so zero.Engine.close() must let other Python threads (thread-
communicator ranks) run meanwhile. A rank ahead of its peer used to close
while holding the GIL, and both ranks timed out in the prefetch
(docs/ARCHITECTURE.md, "Stage 3")."""
import threading
import time

import numpy as np

import zero
from thread_ranks import on_ranks

N = 1000  # elements of each param; the prefetch bucket takes exactly one
INIT = {name: np.linspace(k, k + 1, N, dtype=np.float32) for k, name in enumerate("abc")}


def config():
    return {"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
                                  "stage3_prefetch_bucket_size": N, "overlap_comm": True},
            "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
            "comm_timeout_seconds": 5, "steps_per_print": 0}


def test_close_with_a_prefetch_in_flight_while_the_peer_lags():
    closing = threading.Event()  # set by rank 1 just before its close

    def rank_main(r, comm):
        with zero.Engine(config(), comm=comm) as e:
            return run(r, e)

    def run(r, e):
        for name, value in INIT.items():
            e.register_param(name, value)
        e.finalize()
        for name in "abc":  # the first micro-step: the trace a, b, c
            with e.gathered(name):
                pass
        for name in "abc":
            e.set_grad(name, np.ones(N, np.float32))
        e.step()  # every param -= 0.5 * mean gradient (1)
        # The gather of a prefetches b; the gather of b prefetches c, which
        # nobody gathers before the close: both ranks start it, the close
        # waits for it.
        with e.gathered("a") as (a,):
            got_a = a.copy()
        if r == 0:
            # Behind its peer: the peer closes meanwhile, and this rank
            # needs the GIL back to go on to the gather of b that starts its
            # side of the peer's in-flight prefetch of c.
            closing.wait(timeout=5)
            time.sleep(1.0)
        with e.gathered("b") as (b,):
            got_b = b.copy()
        if r == 1:
            closing.set()
        e.close()
        return got_a, got_b

    results = on_ranks(2, rank_main, timeout=30)
    for got_a, got_b in results:
        np.testing.assert_array_equal(got_a, INIT["a"] - np.float32(0.5))
        np.testing.assert_array_equal(got_b, INIT["b"] - np.float32(0.5))
