"""A slow rank is named while the job trains.

TRAINC_FAULT=loader_slow:rank=1:ms=10 (runtime/fault) makes rank 1's data
loader sleep 10 ms in every load_batch: 20 ms a step of two micro-batches,
against about 2 ms of compute (CPU time) per step for this model, 10x, far
over the 2x at which a rank is named. The log names rank 1 during the run
with where its time goes (data, not compute), the metrics log records it,
the summary lists it; a normal run names no rank.
"""
import json
import os
import re
import subprocess
import unittest

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e

STEPS = 60


def run(fault):
    """The default example on two local ranks; returns (output, metrics records)."""
    metrics = os.path.join(e2e.tmpdir(), "m.jsonl")
    env = dict(os.environ, TRAINC_FAULT=fault)
    proc = subprocess.run(
        [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2", "--steps", str(STEPS),
         "--no-eval", "--metrics", metrics, "--log-every", "10"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    if proc.returncode != 0:
        raise AssertionError(f"train failed ({proc.returncode}):\n{proc.stdout}")
    with open(metrics) as f:
        return proc.stdout, [json.loads(line) for line in f]


class StragglerTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def test_the_slowed_rank_is_named_with_where_its_time_goes(self):
        out, records = run("loader_slow:rank=1:ms=10")
        named = re.search(
            r"(?m)^straggler: rank 1 was busy ([\d.]+)x as long as the others over steps "
            r"(\d+)-(\d+): ([\d.]+) ms per step \(data ([\d.]+), compute ([\d.]+)\), waiting "
            r"([\d.]+); the others busy ([\d.]+) ms, waiting ([\d.]+)$", out)
        self.assertIsNotNone(named, out)
        # While training: before the last step's line.
        self.assertLess(named.start(), out.index(f"step {STEPS}/{STEPS}"), out)
        ratio, data, compute = float(named.group(1)), float(named.group(5)), float(named.group(6))
        self.assertGreaterEqual(ratio, 2, out)
        # 20 ms of sleep a step: the time goes to data.
        self.assertGreaterEqual(data, 20, out)
        self.assertGreater(data, compute, out)
        self.assertNotRegex(out, r"straggler: rank 0")
        self.assertRegex(out[out.index("\nsummary\n"):],
                         r"\n  straggler       rank 1: busy [\d.]+x as long as the others "
                         r"\(steps \d+-\d+; per step data [\d.]+ ms, compute [\d.]+ ms, "
                         r"waiting [\d.]+ ms\)\n")
        stragglers = [r for r in records if r["kind"] == "straggler"]
        self.assertEqual([r["rank"] for r in stragglers], [1], stragglers)
        self.assertGreaterEqual(stragglers[0]["data_ms"], 20)
        self.assertEqual(stragglers[0]["step"], int(named.group(3)))

    def test_a_normal_run_names_no_rank(self):
        out, records = run("")
        self.assertNotIn("straggler", out)
        self.assertEqual([r for r in records if r["kind"] == "straggler"], [])


if __name__ == "__main__":
    unittest.main()
