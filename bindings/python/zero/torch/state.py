"""The phase of a micro-step a ZeroTorchEngine is in, as its grad hooks and
step() need to know it (FSDP2 keeps its TrainingState the same way)."""
import enum


class TrainingState(enum.Enum):
    """Which backward the engine's gradients come from.

    * ``IDLE``: no backward since the last step, or only engine.backward's,
      which completed itself.
    * ``BACKWARD``: engine.backward is running; the grad hooks hand the
      gradients in and engine.backward completes the backward.
    * ``PLAIN_BACKWARD``: a grad hook ran outside engine.backward since the
      last step (a plain ``loss.backward()``); step() completes that backward
      or refuses it (ZeroTorchEngine._finish_plain_backward).

    engine.backward restores the state it found, so a plain backward before
    it is still completed at the step. Two things are kept beside it, not in
    it, because they nest with every phase: ``_inside_no_sync`` (the no_sync
    context, around forwards and backwards alike) and ``_busy`` (a count,
    > 0 while the engine itself moves params: the stage-3 guard stands back).
    """

    IDLE = "idle"
    BACKWARD = "backward"
    PLAIN_BACKWARD = "plain_backward"
