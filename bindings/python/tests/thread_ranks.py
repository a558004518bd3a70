"""Runs a function on thread ranks (zero.Comm.threads), for the tests."""
import threading

import zero


def on_ranks(world, fn, timeout=120):
    """fn(rank, comm) on `world` thread ranks; returns results by rank.
    Whatever a rank raised fails the caller, with the rank."""
    comms = zero.Comm.threads(world)
    results, errors = [None] * world, []

    def main(r):
        try:
            results[r] = fn(r, comms[r])
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((r, e))

    threads = [threading.Thread(target=main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout)
    for c in comms:
        c.close()
    assert not errors, errors
    return results
