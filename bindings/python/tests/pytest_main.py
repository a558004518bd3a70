"""Runs pytest on the files given as arguments (the main of every py_test).

Exit code 5 (no tests collected) becomes a failure: a test target that runs
nothing must not pass.
"""
import sys

import pytest

if __name__ == "__main__":
    code = pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]])
    sys.exit(1 if code == 5 else int(code))
