"""rows.py on outputs shaped as the programs print them: a pass, and each
way the GPU check must call a failure (a skip, a crash, a timeout's cut
log, a loss off by more than the tolerance, a missing PyTorch figure)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rows  # noqa: E402

GTEST_PASS = """Running main() from gmock_main.cc
[==========] Running 2 tests from 1 test suite.
[ RUN      ] CudaDeviceTest.A
[       OK ] CudaDeviceTest.A (3 ms)
[ RUN      ] CudaDeviceTest.B
[       OK ] CudaDeviceTest.B (1 ms)
[==========] 2 tests from 1 test suite ran. (4 ms total)
[  PASSED  ] 2 tests.
"""

GTEST_SKIP = """[ RUN      ] NcclCommunicatorTest.SingleRankCollectives
runtime/comm/nccl/nccl_communicator_test.cc:113: Skipped
no CUDA GPU: CudaDeviceCount() == 0 (no driver or device on this machine)
[  SKIPPED ] NcclCommunicatorTest.SingleRankCollectives (0 ms)
[==========] 4 tests from 1 test suite ran. (0 ms total)
[  PASSED  ] 3 tests.
[  SKIPPED ] 1 test, listed below:
[  SKIPPED ] NcclCommunicatorTest.SingleRankCollectives
"""

GTEST_FAIL = """[ RUN      ] CudaBf16Test.GptMatchesCpu
x.cc:10: Failure
[  FAILED  ] CudaBf16Test.GptMatchesCpu (5 ms)
[==========] 3 tests from 1 test suite ran. (9 ms total)
[  PASSED  ] 2 tests.
[  FAILED  ] 1 test, listed below:
[  FAILED  ] CudaBf16Test.GptMatchesCpu

 1 FAILED TEST
"""

GTEST_CRASH = """[ RUN      ] CudaDeviceTest.A
[       OK ] CudaDeviceTest.A (3 ms)
[ RUN      ] CudaDeviceTest.Hangs
"""

CONFORMANCE_CPU_ONLY = GTEST_PASS.replace(
    "[ RUN      ] CudaDeviceTest.B\n",
    "[ RUN      ] CudaDeviceTest.B\n[ SKIPPED  ] the CUDA half: no GPU (no driver)\n")

UNITTEST_OK = """test_a (__main__.GpuTest.test_a) ... ok
test_b (__main__.GpuTest.test_b) ... ok

----------------------------------------------------------------------
Ran 2 tests in 3.1s

OK
"""

UNITTEST_SKIP = """test_a (__main__.GpuTest.test_a) ... skipped 'no CUDA GPU on this machine: x'
test_b (__main__.GpuTest.test_b) ... skipped 'no CUDA GPU on this machine: x'

----------------------------------------------------------------------
Ran 2 tests in 0.1s

OK (skipped=2)
"""

ATTENTION = """causal attention, bf16 operands, f32 accumulation, forward and forward + backward
shape                      |    fwd ms   TFLOP/s    f+b ms   TFLOP/s |  SDPA fwd   TFLOP/s  SDPA f+b   TFLOP/s
B8 T1024 H12/12 d64        |     1.000      25.0     5.000      17.5 |     0.100     250.0     0.400     218.8
B16 T1024 H12/12 d64       |     2.000      25.0    10.000      17.5 |         -
B1 T8192 H16/16 d64        | CUDA error: out of memory
"""

GPT = """
GPT, precision = bf16, one NVIDIA H200 (dense bf16 peak 989 TFLOP/s), fixed random tokens; MFU = (6N + 12 L d T) tokens / time / peak
model         mb                     ms/step     tokens/s     MFU   mem GiB  memory is
tiny_gpt      32  trainc                2.10       975238    0.6%      0.05  planned arena + bf16 staging
tiny_gpt      32  torch eager           9.00       227555    0.1%      0.10  torch.cuda.max_memory_allocated
tiny_gpt      32  torch compile         5.00       409600    0.3%      0.09  torch.cuda.max_memory_allocated
                  trainc at 2.38x torch.compile's tokens/s
gpt2_small    16  trainc              179.40        91326    8.0%     16.30  planned arena + bf16 staging
gpt2_small    16  torch eager          71.90       227866   20.0%     16.00  torch.cuda.max_memory_allocated
gpt2_small    16  torch compile        34.40       476279   41.0%     12.40  torch.cuda.max_memory_allocated
                  trainc at 0.19x torch.compile's tokens/s
gpt2_small   128  trainc          failed: RESOURCE_EXHAUSTED: out of memory
"""

PLAIN = """gpt2_small on h100_nvlink_ib (ring all-reduce, overlap on), bucket_mb 25: 6 buckets
  gpus global_batch   step(ms)  backward(ms)  all-reduce(ms)  hidden(ms)  exposed(ms)  efficiency
     1           16    120.000        80.000           0.000       0.000        0.000      100.0%
     2           32    125.000        80.000           9.000       9.000        0.000       96.0%
"""

CALIBRATED = """calibrated from /tmp/trace.json (1 rank)
  op                          events  measured(us)  modelled(us)    scale
  attention                       12        3000.0         214.0   14.019
  attention_grad                  12        5000.0         533.5    9.372
  linear                          39        1500.0        2194.9    0.683
  optimizer                       15         500.0         468.2    1.068
  this run, rank 0 (measured -> predicted): step 150.000 -> 151.000 ms, backward 88.811 -> 88.811 ms
  calibrated profile written to /tmp/prof.txt
"""


class RowsTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def file(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def metrics(self, name, losses):
        lines = [json.dumps({"kind": "run", "step": 0})]
        lines += ['{"kind":"train","step":%d,"loss":%s,"lr":1e-05}' % (i + 1, l)
                  for i, l in enumerate(losses)]
        return self.file(name, "\n".join(lines) + "\n")

    def result(self, line):
        name, result, reference = line.split("\t")
        return result

    def test_gtest(self):
        self.assertEqual(self.result(rows.gtest("t", self.file("a", GTEST_PASS), "0")),
                         "pass 2/2")
        skip = self.result(rows.gtest("t", self.file("b", GTEST_SKIP), "0"))
        self.assertTrue(skip.startswith("FAIL 1 skipped"), skip)
        fail = self.result(rows.gtest("t", self.file("c", GTEST_FAIL), "1"))
        self.assertTrue(fail.startswith("FAIL 1 failed (CudaBf16Test.GptMatchesCpu)"), fail)
        crash = self.result(rows.gtest("t", self.file("d", GTEST_CRASH), "124"))
        self.assertTrue(crash.startswith("FAIL exit 124 in CudaDeviceTest.Hangs"), crash)
        half = self.result(rows.gtest("t", self.file("e", CONFORMANCE_CPU_ONLY), "0"))
        self.assertIn("the CUDA half", half)
        self.assertTrue(half.startswith("FAIL"), half)
        exit_only = self.result(rows.gtest("t", self.file("f", GTEST_PASS), "1"))
        self.assertTrue(exit_only.startswith("FAIL exit 1"), exit_only)

    def test_unittest(self):
        self.assertEqual(self.result(rows.unittest("t", self.file("a", UNITTEST_OK), "0")),
                         "pass 2/2")
        skip = self.result(rows.unittest("t", self.file("b", UNITTEST_SKIP), "0"))
        self.assertTrue(skip.startswith("FAIL 2 skipped (no CUDA GPU"), skip)
        cut = self.result(rows.unittest("t", self.file("c", "test_a ... "), "124"))
        self.assertTrue(cut.startswith("FAIL exit 124"), cut)

    def test_losses(self):
        cpu = self.metrics("cpu", ["5.5388", "5.5269", "5.5153"])
        near = self.metrics("near", ["5.5388", "5.5270", "5.5153"])
        far = self.metrics("far", ["5.5388", "5.6269", "5.5153"])
        nan = self.metrics("nan", ["5.5388", "NaN", "5.5153"])
        ok = self.result(rows.losses("t", cpu, near, "1e-4"))
        self.assertTrue(ok.startswith("pass max rel. diff 1.81e-05 (step 2)"), ok)
        off = self.result(rows.losses("t", cpu, far, "1e-2"))
        self.assertTrue(off.startswith("FAIL max rel. diff 1.81e-02 (step 2)"), off)
        self.assertTrue(self.result(rows.losses("t", cpu, nan, "1e-2")).startswith("FAIL"))
        missing = self.result(rows.losses("t", cpu, os.path.join(self.dir, "none"), "1"))
        self.assertTrue(missing.startswith("FAIL no losses from the CUDA run: (cannot read"),
                        missing)
        self.file("failed.out", "train: error: no CUDA GPU\n")
        failed = self.result(rows.losses("t", cpu, os.path.join(self.dir, "failed.jsonl"), "1"))
        self.assertEqual(failed, "FAIL no losses from the CUDA run: train: error: no CUDA GPU")
        self.assertTrue(self.result(rows.same("t", cpu, cpu)).startswith("pass 3 steps"))
        self.assertTrue(self.result(rows.same("t", cpu, near)).startswith("FAIL differ at step 2"))

    def test_attention(self):
        out = rows.attention(self.file("a", ATTENTION), "0").splitlines()
        self.assertEqual(len(out), 3)
        name, result, ref = out[0].split("\t")
        self.assertEqual(name, "attention B8 T1024 H12/12 d64")
        self.assertEqual(result, "f+b 17.5 TFLOP/s (5.000 ms), fwd 25.0 TFLOP/s")
        self.assertIn("ours at 0.08x", ref)
        self.assertIn("no figure", out[1].split("\t")[2])
        self.assertTrue(out[2].split("\t")[1].startswith("FAIL CUDA error: out of memory"))
        none = rows.attention(self.file("b", "attention_bench: no GPU here (x)\n"), "0")
        self.assertTrue(none.split("\t")[1].startswith("FAIL exit 0, no table"))
        # The tensor-core run (--no-torch) under its own label.
        mma = rows.attention(self.file("c", ATTENTION.replace("|         -", "| --no-torch")),
                             "0", "attention mma").splitlines()
        self.assertEqual(mma[1].split("\t"), ["attention mma B16 T1024 H12/12 d64",
                                              "f+b 17.5 TFLOP/s (10.000 ms), fwd 25.0 TFLOP/s",
                                              "beside the row attention B16 T1024 H12/12 d64"])
        none = rows.attention(self.file("d", "x\n"), "1", "attention mma")
        self.assertTrue(none.startswith("attention mma_bench\tFAIL exit 1"))

    def test_gpt(self):
        out = rows.gpt(self.file("a", GPT), "1").splitlines()
        self.assertEqual([l.split("\t")[0] for l in out],
                         ["tiny_gpt bf16 mb 32", "gpt2_small bf16 mb 16", "gpt2_small bf16 mb 128"])
        name, result, ref = out[1].split("\t")
        self.assertEqual(result, "91.3k tok/s, 179.4 ms, MFU 8.0%, 16.3 GiB")
        self.assertIn("compile 476.3k tok/s, 34.4 ms, MFU 41.0%, 12.4 GiB", ref)
        self.assertIn("eager 227.9k tok/s", ref)
        self.assertIn("trainc at 0.19x compile", ref)
        self.assertTrue(out[2].split("\t")[1].startswith("FAIL failed: RESOURCE_EXHAUSTED"))
        none = rows.gpt(self.file("b", "gpt rows: UNAVAILABLE: no CUDA GPU\n"), "1")
        self.assertTrue(none.split("\t")[1].startswith("FAIL exit 1, no table"))

    def test_simulate(self):
        out = rows.simulate(self.file("p", PLAIN), self.file("c", CALIBRATED)).splitlines()
        self.assertEqual(out[0].split("\t")[1:], ["predicted 120.0 ms/step",
                                                  "traced 150.0 ms/step (kernel by kernel): -20%"])
        self.assertEqual(out[1].split("\t")[1], "predicted 151.0 ms/step")
        self.assertEqual(out[2].split("\t")[1],
                         "attention_grad 50%, attention 30%, linear 15%, optimizer 5%")
        untraced = rows.simulate(self.file("p1", PLAIN), self.file("c1", "error: y\n"))
        self.assertEqual([l.split("\t")[1] for l in untraced.splitlines()],
                         ["predicted 120.0 ms/step", "FAIL no calibration: error: y"])
        failed = rows.simulate(self.file("p2", "error: x\n"), self.file("c2", "error: y\n"))
        self.assertEqual([l.split("\t")[1][:4] for l in failed.splitlines()], ["FAIL", "FAIL"])


if __name__ == "__main__":
    unittest.main()
