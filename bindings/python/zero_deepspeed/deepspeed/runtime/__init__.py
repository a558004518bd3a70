"""``deepspeed.runtime``: the modules DeepSpeed's integrations import."""
from . import lr_schedules, utils, zero  # noqa: F401
