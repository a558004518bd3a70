"""Writes a PEP 427 wheel from files given on the command line.

    build_wheel.py OUT.whl NAME VERSION TAG  DEST=SRC ...

Each DEST=SRC puts the file SRC at DEST inside the wheel (e.g.
zero/engine.py=bindings/python/zero/engine.py). Adds the .dist-info files
(METADATA, WHEEL, RECORD with sha256 hashes). Deterministic: fixed
timestamps and sorted entries, so the same inputs give the same bytes.
"""
import base64
import hashlib
import stat
import sys
import zipfile

EPOCH = (1980, 1, 1, 0, 0, 0)


def _hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def main(argv):
    out, name, version, tag = argv[1:5]
    files = {}
    for spec in argv[5:]:
        dest, src = spec.split("=", 1)
        with open(src, "rb") as f:
            files[dest] = f.read()
    dist_info = f"{name}-{version}.dist-info"
    files[f"{dist_info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {name}\n"
        f"Version: {version}\n"
        "Summary: ZeRO sharded data-parallel training runtime (Python binding)\n"
        "Requires-Python: >=3.11,<3.12\n"
        "Requires-Dist: numpy\n"
        "Provides-Extra: torch\n"
        "Requires-Dist: torch; extra == \"torch\"\n"
        # System libraries libzero_c.so links (Debian 12 packages); `import
        # zero` names the missing one and its package (zero/_requirements.py).
        "Requires-External: libabsl20220623\n"
        "Requires-External: libhwy1\n"
        "Requires-External: liburing2\n"
        "Requires-External: libxxhash0\n"
        "Requires-External: libopenmpi3\n"
        "Requires-External: openmpi-bin\n").encode()
    files[f"{dist_info}/WHEEL"] = (
        "Wheel-Version: 1.0\n"
        "Generator: zero build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n").encode()
    record = "".join(f"{d},{_hash(b)},{len(b)}\n" for d, b in sorted(files.items()))
    record += f"{dist_info}/RECORD,,\n"
    files[f"{dist_info}/RECORD"] = record.encode()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for dest in sorted(files):
            info = zipfile.ZipInfo(dest, EPOCH)
            executable = dest.endswith(".so")
            mode = 0o755 if executable else 0o644
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, files[dest])


if __name__ == "__main__":
    main(sys.argv)
