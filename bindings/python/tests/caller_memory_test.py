"""zero.Engine with the caller's own memory (C ABI 1.8): no stale stage-3
weights (a step with a param still gathered as a copy raises, naming it),
gather_into at every stage, gradients handed in from any float dtype, and
zero.convert with the runtime's rounding."""
import numpy as np
import pytest

import zero
from thread_ranks import on_ranks

ADAMW = {"type": "AdamW", "params": {"lr": 0.05}}
W = np.linspace(-2, 2, 1200, dtype=np.float32).reshape(40, 30)


def config(stage, **extra):
    cfg = {"zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 100},
           "optimizer": ADAMW, "steps_per_print": 0}
    cfg.update(extra)
    return cfg


def grad(r, t):
    i = np.arange(W.size, dtype=np.float32).reshape(W.shape)
    return ((i * 13 + t * 7 + r * 3) % 17 - 8) / 32.0 + np.float32(1e-3) * np.sin(i)


def test_stale_stage3_port_is_refused_naming_the_param():
    # The port: gather once, never release, step. Refused before anything
    # moves; released, the step gives what a release/gather loop gives.
    def rank_main(r, comm):
        with zero.Engine(config(3), comm=comm) as a, zero.Engine(config(3), comm=comm) as b:
            for e in (a, b):
                e.register_param("w", W)
                e.finalize()
            held = a.gather("w")
            for t in range(3):
                a.set_grad("w", grad(r, t))
                with pytest.raises(zero.FailedPreconditionError, match=r"'w' \(1\)"):
                    a.step()
                a.release("w")
                a.step()
                held = a.gather("w")
                with b.gathered("w"):
                    pass
                b.set_grad("w", grad(r, t))
                b.step()
                with b.gathered("w") as (wb,):
                    np.testing.assert_array_equal(held, wb)
            assert not np.array_equal(held, W)
            a.release("w")

    on_ranks(2, rank_main)


def test_step_inside_gathered_raises_at_stage3_only():
    for stage in range(4):
        with zero.Engine(config(stage)) as e:
            e.register_param("w", W)
            e.finalize()
            with e.gathered("w") as (w,):
                e.set_grad("w", grad(0, 0))
                if stage == 3:
                    with pytest.raises(zero.FailedPreconditionError, match="still gathered"):
                        e.step()
                else:
                    e.step()  # the resident copy, updated in place
                    np.testing.assert_array_equal(w, e.read_master("w"))
            if stage == 3:
                e.step()  # released: the refused step runs now
            out = e.gather_into("w", np.empty(W.shape, np.float32))
            e.set_grad("w", grad(0, 1))
            with pytest.raises(zero.FailedPreconditionError, match="gather_into is a copy|every gather"):
                e.step()
            e.release("w")
            e.step()
            assert out.shape == W.shape


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_gather_into_equals_gather_bit_for_bit(stage):
    def rank_main(r, comm):
        with zero.Engine(config(stage, bf16={"enabled": True}), comm=comm) as e:
            e.register_param("w", W)
            e.finalize()
            for t in range(2):
                with e.gathered("w") as (ref,):
                    ref = ref.copy()
                out = e.gather_into("w", np.zeros(W.shape, np.uint16))
                np.testing.assert_array_equal(out, ref)
                e.release("w")
                e.set_grad("w", grad(r, t))
                e.step()

    on_ranks(2, rank_main)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_fp32_gradient_equals_caller_rounding_then_grad_buffer(stage, precision):
    # Engine A takes fp32 gradients (rounded inside); engine B the caller's
    # rounding (zero.convert) written into grad_buffer: the same weights,
    # bit for bit, over three steps on 2 thread ranks.
    def rank_main(r, comm):
        cfg = config(stage, **{precision: {"enabled": True}})
        if precision == "fp16":
            cfg["fp16"]["loss_scale"] = 1.0
        with zero.Engine(cfg, comm=comm) as a, zero.Engine(cfg, comm=comm) as b:
            for e in (a, b):
                e.register_param("w", W)
                e.finalize()
            for t in range(3):
                a.set_grad("w", grad(r, t))
                buf = b.grad_buffer("w")
                buf[...] = zero.convert(grad(r, t), b.dtype)
                b.grad_ready("w")
                a.step()
                b.step()
                with a.gathered("w") as (wa,), b.gathered("w") as (wb,):
                    np.testing.assert_array_equal(wa, wb)
            np.testing.assert_array_equal(a.read_master("w"), b.read_master("w"))

    on_ranks(2, rank_main)


def test_set_grad_refuses_a_wrong_size_naming_the_param():
    with zero.Engine(config(1, bf16={"enabled": True})) as e:
        e.register_param("w", W)
        e.finalize()
        with pytest.raises(zero.InvalidArgumentError, match="set_grad 'w'"):
            e.set_grad("w", np.zeros(7, np.float32))


def test_convert_uses_round_to_nearest_even():
    x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -0.0, np.inf, np.nan, 65520.0,
                  2.0**-25, 2.0**-24, 3e-8], dtype=np.float32)
    bf = zero.convert(x, "bf16")
    assert bf.dtype == np.uint16
    np.testing.assert_array_equal(bf, zero.float32_to_bf16(x))
    assert bf[1] == 0x3F80 and bf[2] == 0x3F82  # ties to even, down and up
    h = zero.convert(x, "fp16")
    np.testing.assert_array_equal(h.view(np.uint16), x.astype(np.float16).view(np.uint16))
    back = zero.convert(h, "fp32")
    np.testing.assert_array_equal(back[:5], x.astype(np.float16).astype(np.float32)[:5])
    np.testing.assert_array_equal(zero.convert(bf, "fp32", src_dtype="bf16")[:5],
                                  zero.bf16_to_float32(bf)[:5])
    with pytest.raises(zero.InvalidArgumentError):
        zero.convert(np.zeros(3, np.int32), "bf16")
