"""Fuzz target for the launcher's hostfile and --include/--exclude parsers
(tools/zero_launch.py), under atheris (libFuzzer for Python):

    python3 tests/fuzz/hostfile_fuzz.py CORPUS_DIR... [-libfuzzer flags]
    python3 tests/fuzz/hostfile_fuzz.py --replay FILE_OR_DIR...   (no atheris)

An input is `HOSTFILE \\0 INCLUDE \\0 EXCLUDE` (missing parts empty). Any
input either raises HostfileError or selects slots that exist in the
hostfile, and the launch command built from them hands every rank the GPU
slot it was given (rank_env over ZERO_LAUNCH_SLOTS); any other exception,
or a wrong slot, is a crash. tools/fuzz.sh runs it; the suite replays the
corpus (//tests/fuzz:hostfile_replay_test)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import zero_launch as zl  # noqa: E402


def test_one_input(data):
    parts = data.split(b"\0")
    parts += [b""] * (3 - len(parts))
    try:
        text, include, exclude = (p.decode("utf-8") for p in parts[:3])
    except UnicodeDecodeError:
        return  # main() refuses a hostfile that is not UTF-8 before parsing
    try:
        hosts = zl.parse_hostfile(text)
    except zl.HostfileError:
        return
    for h, n in hosts.items():
        assert zl.HOST_RE.fullmatch(h), h
        assert 1 <= n <= zl.MAX_SLOTS, n
    try:
        chosen = zl.select_slots(hosts, include or None, exclude or None)
    except zl.HostfileError:
        return
    assert chosen
    for h, slots in chosen.items():
        assert h in hosts and slots, (h, slots)
        assert all(0 <= s < hosts[h] for s in slots), (h, slots, hosts[h])
        assert len(set(slots)) == len(slots), slots
    cmd = zl.mpirun_command(chosen, "/nonexistent/hostfile", ["prog"], bind_gpus=True)
    total = int(cmd[cmd.index("-n") + 1])
    assert total == sum(len(s) for s in chosen.values())
    env = dict(c.split("=", 1) for c in cmd if c.startswith(zl.SLOTS_ENV + "="))
    flat = [s for slots in chosen.values() for s in slots]
    for rank in range(min(total, 64)):
        got = zl.rank_env({"OMPI_COMM_WORLD_RANK": str(rank), zl.SLOTS_ENV: env[zl.SLOTS_ENV]})
        assert got["CUDA_VISIBLE_DEVICES"] == str(flat[rank]), (rank, got, flat)


def replay(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                files += [os.path.join(root, n) for n in names]
        else:
            files.append(p)
    if not files:
        sys.exit("replay: no inputs")
    for f in sorted(files):
        with open(f, "rb") as fh:
            test_one_input(fh.read())
    print(f"replay: {len(files)} inputs, no crash")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--replay":
        return replay(sys.argv[2:])
    import atheris  # noqa: E402

    # Coverage feedback: without instrumenting the already imported launcher
    # (and this file) atheris mutates blind and never grows a corpus.
    atheris.instrument_all()
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
