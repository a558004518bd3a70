"""The shared libraries the wheel's libzero_c.so needs from the system
(Debian 12 packages), and the message an import gives when one is missing.

The wheel states them in its METADATA (``Requires-External``); ``import
zero`` checks them when the extension fails to load.
"""
from __future__ import annotations

import ctypes
import glob
import os
import re
from typing import List, Optional, Tuple

#: (a soname libzero_c.so links, the Debian package that ships it).
REQUIRED: List[Tuple[str, str]] = [
    ("libabsl_status.so.20220623", "libabsl20220623"),
    ("libabsl_strings.so.20220623", "libabsl20220623"),
    ("libhwy.so.1", "libhwy1"),
    ("liburing.so.2", "liburing2"),
    ("libxxhash.so.0", "libxxhash0"),
    ("libmpi.so.40", "libopenmpi3"),
    ("libgomp.so.1", "libgomp1"),
    ("libatomic.so.1", "libatomic1"),
]

_PREFIXES = [
    ("libabsl_", "libabsl20220623"),
    ("libhwy", "libhwy1"),
    ("liburing", "liburing2"),
    ("libxxhash", "libxxhash0"),
    ("libmpi", "libopenmpi3"),
    ("libopen-pal", "libopenmpi3"),
    ("libopen-rte", "libopenmpi3"),
    ("libgomp", "libgomp1"),
    ("libatomic", "libatomic1"),
]


def package_for(soname: str) -> Optional[str]:
    """The Debian package of a library soname (None if not one of ours)."""
    for prefix, pkg in _PREFIXES:
        if soname.startswith(prefix):
            return pkg
    return None


def missing(required: Optional[List[Tuple[str, str]]] = None) -> List[Tuple[str, str]]:
    """The (soname, package) pairs the dynamic loader cannot open."""
    out = []
    for soname, pkg in (REQUIRED if required is None else required):
        try:
            ctypes.CDLL(soname)
        except OSError:
            out.append((soname, pkg))
    return out


def missing_message(pairs: List[Tuple[str, str]]) -> str:
    libs = ", ".join(s for s, _ in pairs)
    pkgs = " ".join(sorted({p for _, p in pairs}))
    return (f"zero: the runtime library libzero_c.so needs {libs}, which the "
            f"system lacks; install it with: apt-get install {pkgs}")


def explain_import_error(err: BaseException, package_dir: str) -> Optional[str]:
    """A clear message for a failed ``from . import _zero_c`` (None: keep
    the original error)."""
    text = str(err)
    m = re.search(r"([\w.+-]+\.so[\w.]*): cannot open shared object file", text)
    if m and m.group(1) not in ("libzero_c.so", "libzero_c.so.1", "_zero_c.so"):
        lib = m.group(1)
        pairs = missing() or [(lib, package_for(lib) or "?")]
        if not any(s == lib for s, _ in pairs):
            pairs.insert(0, (lib, package_for(lib) or "?"))
        return missing_message(pairs)
    if not glob.glob(os.path.join(package_dir, "_zero_c*.so")):
        return (f"zero: the extension _zero_c is not in {package_dir}. This is "
                "the source tree (bindings/python/zero), which Python picked up "
                "because it runs from bindings/python (or has it on sys.path); the "
                "built package lives elsewhere. Run from another directory with "
                "the wheel installed (bazel build //bindings/python:wheel; pip "
                "install bazel-bin/bindings/python/zero-*.whl) or through the "
                "bazel targets.")
    return None
