"""Runs pytest on the files given as arguments (the main of every py_test).

Exit code 5 (no tests collected) becomes a failure: a test target that runs
nothing must not pass.
"""
import sys

import pytest

if __name__ == "__main__":
    # -rs: each skip says why in the log (tools/test.sh counts them).
    code = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *sys.argv[1:]])
    sys.exit(1 if code == 5 else int(code))
