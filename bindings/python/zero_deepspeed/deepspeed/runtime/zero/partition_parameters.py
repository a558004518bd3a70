"""``deepspeed.runtime.zero.partition_parameters``: Init, ZeroParamStatus and
the tensor-constructor wrapper transformers patches (prevent_arange_dtype_change)."""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

import zero.torch as _zt
from zero.torch.ds_compat import ZeroParamStatus  # noqa: F401

from ...accelerator import get_accelerator  # noqa: F401

_orig_torch_arange = torch.arange
_orig_torch_empty = torch.empty
_orig_torch_zeros = torch.zeros
_orig_torch_ones = torch.ones
_orig_torch_full = torch.full


def zero_wrapper_for_fp_tensor_constructor(fn: Callable[..., torch.Tensor], target_fp_dtype: torch.dtype,
                                           target_device: Any = None) -> Callable[..., torch.Tensor]:
    """As DeepSpeed's: ``fn`` making its tensors on ``target_device`` (when
    none is given) and floating ones in ``target_fp_dtype``."""
    @functools.wraps(fn)
    def wrapped_fn(*args: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") is None and target_device is not None:
            kwargs["device"] = target_device
        tensor = fn(*args, **kwargs)
        if tensor.is_floating_point():
            tensor = tensor.to(target_fp_dtype)
        return tensor
    return wrapped_fn


class Init(_zt.Init):
    """``deepspeed.zero.Init``: zero.torch.Init (each module built by its own
    init code, this rank keeping its shard). DeepSpeed's arguments are
    accepted; ``enabled`` is honoured, ``config_dict_or_path``/``dtype`` are
    taken at initialize from the config, ``remote_device`` other than none/cpu,
    ``mpu`` and ``sequence_data_parallel_group`` are refused."""

    def __init__(self, module: Any = None, data_parallel_group: Any = None, mem_efficient_linear: bool = True,
                 remote_device: Any = None, pin_memory: bool = False, config_dict_or_path: Any = None,
                 config: Any = None, enabled: bool = True, dtype: Any = None, mpu: Any = None,
                 zero_param_parallel_group: Any = None, zero_quantized_weights: bool = False,
                 zero_quantized_nontrainable_weights: bool = False,
                 sequence_data_parallel_group: Any = None, param_swapper: Any = None) -> None:
        from zero.errors import UnimplementedError
        if module is not None:
            raise UnimplementedError(
                "deepspeed.zero.Init(module=...): partitioning an already built module; "
                "build it inside the context, or let deepspeed.initialize partition it")
        if remote_device not in (None, "none", "cpu"):
            raise UnimplementedError(
                f"deepspeed.zero.Init(remote_device={remote_device!r}): use the config's "
                "offload_param section")
        for name, value in (("mpu", mpu), ("sequence_data_parallel_group", sequence_data_parallel_group),
                            ("zero_param_parallel_group", zero_param_parallel_group)):
            if value is not None:
                raise UnimplementedError(f"deepspeed.zero.Init({name}=...): model parallelism")
        if zero_quantized_weights or zero_quantized_nontrainable_weights:
            raise UnimplementedError("deepspeed.zero.Init: quantized weights (ZeRO++)")
        super().__init__(enabled=enabled)
