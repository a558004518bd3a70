"""``deepspeed.ops``."""
from . import adagrad, adam, lion  # noqa: F401
