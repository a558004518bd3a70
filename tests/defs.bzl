"""Test macros: multi-rank tests under mpirun."""

def mpi_test(name, binary, np, args = [], size = "medium", **kwargs):
    """Runs `binary` under `mpirun -np <np>` on shared memory, as root too."""
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//tests:run_mpi.sh"],
        args = [str(np), "$(location %s)" % binary] + args,
        data = [binary],
        **kwargs
    )
