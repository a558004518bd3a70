"""``deepspeed.accelerator.get_accelerator``: the device zero.torch runs on
(a CUDA GPU when torch sees one, else the CPU), with the methods the
integrations call."""
from __future__ import annotations

import os
from typing import Any, Optional

import torch


class ZeroAccelerator:
    def __init__(self) -> None:
        self._name = "cuda" if torch.cuda.is_available() else "cpu"
        self._communication_backend_name = "nccl" if self._name == "cuda" else "gloo"

    def device_name(self, device_index: Optional[int] = None) -> str:
        if device_index is None or self._name == "cpu":
            return self._name
        return f"{self._name}:{device_index}"

    def current_device(self) -> Any:
        return torch.cuda.current_device() if self._name == "cuda" else 0

    def current_device_name(self) -> str:
        if self._name == "cpu":
            return "cpu"
        return f"cuda:{torch.cuda.current_device()}"

    def device(self, device_index: Optional[int] = None) -> torch.device:
        return torch.device(self.device_name(device_index))

    def set_device(self, device_index: int) -> None:
        if self._name == "cuda":
            torch.cuda.set_device(device_index)

    def device_count(self) -> int:
        if self._name == "cuda":
            return torch.cuda.device_count()
        return int(os.environ.get("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1")))

    def is_available(self) -> bool:
        return True

    def communication_backend_name(self) -> str:
        return self._communication_backend_name

    def is_synchronized_device(self) -> bool:
        return self._name == "cpu"

    def synchronize(self, device_index: Optional[int] = None) -> None:
        if self._name == "cuda":
            torch.cuda.synchronize(device_index)

    def empty_cache(self) -> None:
        if self._name == "cuda":
            torch.cuda.empty_cache()

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def is_bf16_supported(self) -> bool:
        return True

    def is_fp16_supported(self) -> bool:
        return True

    def supported_dtypes(self) -> list:
        return [torch.float32, torch.float16, torch.bfloat16]

    def pin_memory(self, tensor: torch.Tensor, align_bytes: int = 1) -> torch.Tensor:
        return tensor.pin_memory() if self._name == "cuda" else tensor

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type == self._name

    def __repr__(self) -> str:
        return f"<zero's DeepSpeed layer accelerator {self._name}>"


_accelerator: Optional[ZeroAccelerator] = None


def get_accelerator() -> ZeroAccelerator:
    global _accelerator
    if _accelerator is None:
        _accelerator = ZeroAccelerator()
    return _accelerator
