"""Exceptions raised by zero: one ZeroError subclass per C status code.

Every failed C call raises the subclass of its ``zero_status``; the exception
carries the code (``.status``) and the library's message (``.message``), which
names the problem, e.g. the config key path of a bad value.

The status codes come from the header (``_abi_tables.STATUS``, generated from
``zero_c.h``); the classes below add each code's Python base classes. A code
the header has and this module does not name still gets its own subclass.
"""
from __future__ import annotations

from typing import Dict, Tuple, Type

from ._abi_tables import STATUS

#: zero_status value by name ("INVALID_ARGUMENT" -> 1), from the header.
STATUS_CODES: Dict[str, int] = {name: code for name, code, _ in STATUS}


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
    status = STATUS_CODES["INVALID_ARGUMENT"]


class FailedPreconditionError(ZeroError, RuntimeError):
    """Call in the wrong state or order, or on a closed handle."""
    status = STATUS_CODES["FAILED_PRECONDITION"]


class NotFoundError(ZeroError, KeyError):
    """Unknown param name or missing file (ZERO_NOT_FOUND)."""
    status = STATUS_CODES["NOT_FOUND"]

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class OutOfMemoryError(ZeroError, MemoryError):
    """Allocation or live-parameter budget exceeded (ZERO_OUT_OF_MEMORY)."""
    status = STATUS_CODES["OUT_OF_MEMORY"]


class TimeoutError(ZeroError, TimeoutError):  # noqa: A001 - mirrors builtin
    """A collective's peer did not arrive (ZERO_TIMEOUT)."""
    status = STATUS_CODES["TIMEOUT"]


class IOError(ZeroError, OSError):  # noqa: A001
    """File system failure (ZERO_IO_ERROR)."""
    status = STATUS_CODES["IO_ERROR"]


class DataLossError(ZeroError):
    """Corrupt or truncated data (ZERO_DATA_LOSS)."""
    status = STATUS_CODES["DATA_LOSS"]


class UnimplementedError(ZeroError, NotImplementedError):
    """Feature not built into the library (ZERO_UNIMPLEMENTED)."""
    status = STATUS_CODES["UNIMPLEMENTED"]


class InternalError(ZeroError):
    """A bug in zero (ZERO_INTERNAL)."""
    status = STATUS_CODES["INTERNAL"]


class AbortedError(ZeroError):
    """The communicator broke earlier (ZERO_ABORTED)."""
    status = STATUS_CODES["ABORTED"]


class MismatchError(ZeroError):
    """Ranks disagree on params or config (ZERO_MISMATCH)."""
    status = STATUS_CODES["MISMATCH"]


class CancelledError(ZeroError):
    """A progress callback asked to stop (ZERO_CANCELLED, C ABI 1.6)."""
    status = STATUS_CODES["CANCELLED"]


_NAMED: Tuple[Type[ZeroError], ...] = (
    InvalidArgumentError, FailedPreconditionError, NotFoundError,
    OutOfMemoryError, TimeoutError, IOError, DataLossError,
    UnimplementedError, InternalError, AbortedError, MismatchError, CancelledError)


def _class_for(name: str, code: int, doc: str) -> Type[ZeroError]:
    """The class of ZERO_<name>: the one above whose status it is, or a new
    ZeroError subclass named after it (InvalidArgumentError style)."""
    for cls in _NAMED:
        if cls.status == code:
            return cls
    words = "".join(w.capitalize() for w in name.split("_"))
    return type(words if words.endswith("Error") else words + "Error", (ZeroError,),
                {"status": code, "__doc__": f"{doc} (ZERO_{name}).",
                 "__module__": __name__})


#: The exception class of every zero_status but ZERO_OK.
ERRORS_BY_STATUS: Dict[int, Type[ZeroError]] = {
    code: _class_for(name, code, doc) for name, code, doc in STATUS if code != 0
}


def error_from_status(status: int, message: str) -> ZeroError:
    """The exception for a C status code and message (unknown codes: ZeroError)."""
    cls = ERRORS_BY_STATUS.get(int(status))
    if cls is None:
        return ZeroError(message, status=int(status))
    return cls(message)
