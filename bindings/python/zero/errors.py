"""Exceptions raised by zero: one ZeroError subclass per C status code.

Every failed C call raises the subclass of its ``zero_status``; the exception
carries the code (``.status``) and the library's message (``.message``), which
names the problem, e.g. the config key path of a bad value.
"""
from __future__ import annotations

from typing import Dict, Type


class ZeroError(Exception):
    """Base class of every error reported by the zero runtime."""

    #: The C ``zero_status`` value of this error class.
    status: int = -1

    def __init__(self, message: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class InvalidArgumentError(ZeroError, ValueError):
    """Bad value: config key, shape, NULL, id (ZERO_INVALID_ARGUMENT)."""
    status = 1


class FailedPreconditionError(ZeroError, RuntimeError):
    """Call in the wrong state or order, or on a closed handle."""
    status = 2


class NotFoundError(ZeroError, KeyError):
    """Unknown param name or missing file (ZERO_NOT_FOUND)."""
    status = 3

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class OutOfMemoryError(ZeroError, MemoryError):
    """Allocation or live-parameter budget exceeded (ZERO_OUT_OF_MEMORY)."""
    status = 4


class TimeoutError(ZeroError, TimeoutError):  # noqa: A001 - mirrors builtin
    """A collective's peer did not arrive (ZERO_TIMEOUT)."""
    status = 5


class IOError(ZeroError, OSError):  # noqa: A001
    """File system failure (ZERO_IO_ERROR)."""
    status = 6


class DataLossError(ZeroError):
    """Corrupt or truncated data (ZERO_DATA_LOSS)."""
    status = 7


class UnimplementedError(ZeroError, NotImplementedError):
    """Feature not built into the library (ZERO_UNIMPLEMENTED)."""
    status = 8


class InternalError(ZeroError):
    """A bug in zero (ZERO_INTERNAL)."""
    status = 9


class AbortedError(ZeroError):
    """The communicator broke earlier (ZERO_ABORTED)."""
    status = 10


class MismatchError(ZeroError):
    """Ranks disagree on params or config (ZERO_MISMATCH)."""
    status = 11


ERRORS_BY_STATUS: Dict[int, Type[ZeroError]] = {
    cls.status: cls
    for cls in (InvalidArgumentError, FailedPreconditionError, NotFoundError,
                OutOfMemoryError, TimeoutError, IOError, DataLossError,
                UnimplementedError, InternalError, AbortedError, MismatchError)
}


def error_from_status(status: int, message: str) -> ZeroError:
    """The exception for a C status code and message (unknown codes: ZeroError)."""
    cls = ERRORS_BY_STATUS.get(int(status))
    if cls is None:
        return ZeroError(message, status=int(status))
    return cls(message)
