"""A safetensors export of a checkpoint opens with the `safetensors` package
and holds exactly the gathered fp32 master params (or their bf16 rounding);
the zero-ckpt CLI verifies, inspects and reshards."""
import json
import os
import shutil
import subprocess
import unittest

import numpy as np
from safetensors.numpy import load_file


def runfile(path):
    return os.path.join(os.environ["TEST_SRCDIR"], "zero", path)


CLI = runfile("tools/zero-ckpt")


def run(*args):
    return subprocess.run([CLI, *args], capture_output=True, text=True)


def bf16_bits(x):
    """Round-to-nearest-even fp32 -> bf16, as uint16 (finite inputs)."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


class ExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = os.environ["TEST_TMPDIR"]
        subprocess.run([runfile("tests/ckpt_export_helper"), cls.tmp], check=True)
        with open(os.path.join(cls.tmp, "expected.json")) as f:
            cls.expected = json.load(f)
        cls.ckpt = os.path.join(cls.tmp, "ckpt")
        cls.shapes = {"embed": (8,), "fc1.weight": (25, 8), "fc1.bias": (25,),
                      "fc2.weight": (3, 25), "fc2.bias": (3,)}

    def test_fp32_export_equals_gathered_master(self):
        out = os.path.join(self.tmp, "model.safetensors")
        r = run("-v", "export", self.ckpt, "t", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("bytes (100%)", r.stderr)  # progress with -v
        tensors = load_file(out)
        self.assertEqual(sorted(tensors), sorted(self.expected["names"]))
        for name in self.expected["names"]:
            t = tensors[name]
            self.assertEqual(t.dtype, np.float32, name)
            self.assertEqual(t.shape, self.shapes[name], name)
            want = np.array(self.expected["params"][name], np.float32)
            np.testing.assert_array_equal(t.ravel(), want, err_msg=name)

    def test_progress_line_on_a_terminal(self):
        """stderr a terminal: one line redrawn in place, ending at 100%."""
        out = os.path.join(self.tmp, "model_tty.safetensors")
        master, slave = os.openpty()
        try:
            r = subprocess.run([CLI, "export", self.ckpt, "t", out], stdout=subprocess.PIPE,
                               stderr=slave)
            os.close(slave)
            slave = -1
            text = b""
            while True:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the other end is closed
                    break
                if not chunk:
                    break
                text += chunk
        finally:
            if slave >= 0:
                os.close(slave)
            os.close(master)
        self.assertEqual(r.returncode, 0, text)
        line = text.decode()
        self.assertIn("\rzero-ckpt: export 100% |####################|", line)
        self.assertTrue(line.rstrip("\r\n").endswith("MB/s"), line)
        self.assertEqual(line.count("\n"), 1, line)  # one line, redrawn

    def test_bf16_export_is_rounded_master(self):
        out = os.path.join(self.tmp, "model_bf16.safetensors")
        r = run("export", self.ckpt, out, "--bf16")  # TAG omitted: latest
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            import torch
            from safetensors.torch import load_file as load_torch
        except ImportError:  # numpy has no bfloat16
            self.skipTest("torch not available to read BF16")
        tensors = load_torch(out)
        for name in self.expected["names"]:
            t = tensors[name]
            self.assertEqual(t.dtype, torch.bfloat16, name)
            self.assertEqual(tuple(t.shape), self.shapes[name], name)
            got = t.view(torch.int16).numpy().view(np.uint16).ravel()
            want = bf16_bits(self.expected["params"][name])
            np.testing.assert_array_equal(got, want, err_msg=name)

    def test_cli_verify_inspect_and_corruption(self):
        r = run("verify", self.ckpt)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("inspect", self.ckpt, "t")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("world size 3, stage 2", r.stdout)
        self.assertIn("global 3, skipped 0", r.stdout)
        self.assertIn("fc1.weight", r.stdout)
        bad = os.path.join(self.tmp, "bad")
        shutil.copytree(self.ckpt, bad)
        path = os.path.join(bad, "t", "rank_00002.bin")
        with open(path, "r+b") as f:
            f.seek(3)
            b = f.read(1)
            f.seek(3)
            f.write(bytes([b[0] ^ 0x80]))
        r = run("verify", bad, "t")
        self.assertEqual(r.returncode, 1)
        self.assertIn("rank_00002.bin: section '", r.stderr)
        self.assertIn("checksum mismatch", r.stderr)
        r = run("export", bad, "t", os.path.join(self.tmp, "x.safetensors"))
        self.assertEqual(r.returncode, 1)
        self.assertIn("rank_00002.bin", r.stderr)
        self.assertEqual(run("frobnicate").returncode, 2)

    def test_cli_reshard_keeps_every_value(self):
        out_dir = os.path.join(self.tmp, "resharded")
        r = run("-v", "reshard", self.ckpt, "t", out_dir, "2")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("inspect", out_dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("world size 2, stage 2", r.stdout)
        self.assertIn("rank_00001.bin", r.stdout)
        self.assertNotIn("rank_00002.bin", r.stdout)
        self.assertEqual(run("verify", out_dir).returncode, 0)
        out = os.path.join(self.tmp, "resharded.safetensors")
        self.assertEqual(run("export", out_dir, "t", out).returncode, 0)
        tensors = load_file(out)
        for name in self.expected["names"]:
            np.testing.assert_array_equal(
                tensors[name].ravel(), np.array(self.expected["params"][name], np.float32))


if __name__ == "__main__":
    unittest.main()
