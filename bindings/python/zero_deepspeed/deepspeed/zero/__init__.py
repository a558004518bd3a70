"""``deepspeed.zero``: zero.torch's GatheredParameters and Init."""
from zero.torch import GatheredParameters  # noqa: F401

from ..runtime.zero.partition_parameters import Init, ZeroParamStatus  # noqa: F401
from ..runtime.zero import register_external_parameter  # noqa: F401
