"""Progress of long work: checkpoint save, load, export and reshard, and the
NVMe tier's preallocation and first write at finalize (C ABI 1.6,
``zero_progress_fn``).

Every such call takes ``progress=``:

* ``None`` (the default): a tqdm-style line on stderr when stderr is a
  terminal (rank 0 only, for an engine's calls), nothing otherwise;
* ``False``: nothing;
* a callable ``fn(what, done, total)``: ``what`` names the work (``"save"``,
  ``"load"``, ``"export"``, ``"reshard"``, ``"nvme preallocate"``,
  ``"nvme initialize"``), ``done`` bytes of ``total`` on this rank, rising to
  ``total``. Return ``False`` to cancel (the call raises
  :class:`zero.CancelledError`); anything else goes on. An exception it
  raises cancels too, and is raised again from the call. It runs on an
  engine thread, holding the GIL, and must not call the engine.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Callable, Optional, TextIO, Union

from .errors import CancelledError

ProgressFn = Callable[[str, int, int], Any]
ProgressArg = Union[None, bool, ProgressFn]


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class TerminalLine:
    """A progress line redrawn in place, as tqdm draws it::

        save:  45%|█████████           | 12.3/27.0 MB [00:01<00:02, 9.8 MB/s]

    at most ``10`` times a second and at the end of each piece of work
    (then a newline)."""

    WIDTH = 20

    def __init__(self, stream: Optional[TextIO] = None, min_interval: float = 0.1):
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval = min_interval
        self._what: Optional[str] = None
        self._start = 0.0
        self._last = 0.0

    def __call__(self, what: str, done: int, total: int) -> bool:
        now = time.monotonic()
        if what != self._what:
            self._what, self._start, self._last = what, now, 0.0
        elif done < total and now - self._last < self.min_interval:
            return True
        self._last = now
        self.stream.write(self.format(what, done, total, now - self._start))
        if done >= total:
            self.stream.write("\n")
            self._what = None
        self.stream.flush()
        return True

    @classmethod
    def format(cls, what: str, done: int, total: int, elapsed: float) -> str:
        frac = done / total if total > 0 else 1.0
        fill = int(frac * cls.WIDTH)
        rate = done / elapsed if elapsed > 0 else 0.0
        left = (total - done) / rate if rate > 0 else 0.0
        return (f"\r{what}: {int(frac * 100):3d}%|{'█' * fill}{' ' * (cls.WIDTH - fill)}| "
                f"{done / 1e6:.1f}/{total / 1e6:.1f} MB "
                f"[{_clock(elapsed)}<{_clock(left)}, {rate / 1e6:.1f} MB/s]")


class Reporter:
    """One call's progress: the callable ``progress=`` chose, wrapped so that
    its exception cancels the work and is raised again after it.

    ``with Reporter(progress, show) as r: c_call(..., r.callback)``."""

    def __init__(self, progress: ProgressArg, show: bool = True,
                 stream: Optional[TextIO] = None):
        if progress is None:
            s = stream if stream is not None else sys.stderr
            isatty = getattr(s, "isatty", None)
            fn = TerminalLine(s) if show and isatty is not None and isatty() else None
        elif progress is False:
            fn = None
        elif progress is True:
            fn = TerminalLine(stream)
        elif callable(progress):
            fn = progress
        else:
            raise TypeError(f"progress: expected None, a bool or a callable, got {progress!r}")
        self._fn = fn
        self.error: Optional[BaseException] = None

    @property
    def callback(self) -> Optional[Callable[[str, int, int], bool]]:
        """What the C call gets: None when nothing is reported."""
        return None if self._fn is None else self._call

    def _call(self, what: str, done: int, total: int) -> bool:
        try:
            return self._fn(what, done, total) is not False  # type: ignore[misc]
        except BaseException as e:  # noqa: B902 - re-raised after the call
            self.error = e
            return False

    def __enter__(self) -> "Reporter":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.error is not None and isinstance(exc, CancelledError):
            raise self.error from exc
        return False
