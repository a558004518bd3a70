"""``deepspeed.runtime.engine``."""
from zero.torch.ds_compat import DeepSpeedCompatEngine as DeepSpeedEngine  # noqa: F401
