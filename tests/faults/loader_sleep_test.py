"""A rank asleep in its data loader: the job stops, naming it.

TRAINC_FAULT=loader_sleep:rank=1:step=5:seconds=600 (runtime/fault) makes
rank 1 of a local two-rank job sleep in load_batch at step 5, as a read
from a stuck file system would: the process lives and its heartbeat goes
on, so the launcher's heartbeat watchdog cannot see it; rank 0 waits in
the step's first all-reduce until Gloo's timeout (20 s) gives up. The job
must then stop (non-zero, long before the 600 s sleep ends) with the
table naming rank 1, in load_batch, behind; and with --trace the trace
says the same. A malformed TRAINC_FAULT is refused before any step.
"""
import json
import os
import re
import subprocess
import unittest

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e

FAULT = "loader_sleep:rank=1:step=5:seconds=600"


def run(fault, *extra, guard=240):
    """The default example on two local ranks with TRAINC_FAULT=fault;
    returns (exit code, output). `guard` bounds a hang: the sleep is 600 s."""
    env = dict(os.environ, TRAINC_FAULT=fault)
    proc = subprocess.run(
        [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2", "--steps", "100000",
         "--no-eval", "--no-metrics", "--log-every", "1", *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=guard)
    return proc.returncode, proc.stdout


class LoaderSleepTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def test_the_table_names_the_sleeping_rank_in_load_batch(self):
        trace = os.path.join(e2e.tmpdir(), "trace.json")
        code, out = run(FAULT, "--trace", trace)
        self.assertNotEqual(code, 0, out)
        # In this order: rank 0's step 3 line (rank 1 cannot end step 4
        # before rank 0 has written it and joined step 4's collectives;
        # rank 0's step 4 line races with rank 1's), rank 1 falls asleep
        # at step 5, the job stops with the table.
        asleep = out.find("[rank 1] train: fault injection (TRAINC_FAULT): rank 1 sleeps 600 s "
                          "in load_batch at step 5")
        self.assertGreaterEqual(asleep, 0, out)
        self.assertLess(out.find("step 3/100000"), asleep, out)
        self.assertGreaterEqual(out.find("step 3/100000"), 0, out)
        self.assertEqual(out.find("step 5/100000"), -1, out)
        table = out.find("where each rank was:\n")
        self.assertGreater(table, asleep, out)
        # The error names the rank behind, not the one that gave up.
        self.assertRegex(out, r"train: error: rank 1 is behind \(step 5, data \"load_batch micro 0\""
                              r" .*\) and rank 0 gave up waiting: ")
        self.assertRegex(out[table:], r"\n  rank 1: step 5, data \"load_batch micro 0\" "
                                      r"\(instruction 0 of \d+\) for [\d.]+ s  <- behind\n")
        self.assertRegex(out[table:], r"\n  rank 0: step 5, [^\n]*\n")
        self.assertNotRegex(out[table:], r"rank 0: [^\n]*<- behind")

        with open(trace) as f:
            written = json.load(f)
        positions = {e["pid"]: e["args"] for e in written["traceEvents"]
                     if e["ph"] == "i" and e.get("cat") == "position"}
        self.assertEqual(sorted(positions), [0, 1])
        self.assertEqual(positions[1]["label"], "data \"load_batch micro 0\"")
        self.assertEqual((positions[1]["step"], positions[1]["instr"]), (5, 0))
        self.assertTrue(positions[1]["behind"])
        self.assertFalse(positions[0]["behind"])
        self.assertEqual(written["metadata"]["stopped"]["behind"], 1)

    def test_a_malformed_fault_is_refused_at_start(self):
        code, out = run("loader_sleep:rank=1:step=five:seconds=600", guard=120)
        self.assertNotEqual(code, 0, out)
        self.assertIn("TRAINC_FAULT: fault 'loader_sleep:rank=1:step=five:seconds=600': "
                      "step=five is not a whole number", out)
        self.assertNotIn("step 1/", out)


if __name__ == "__main__":
    unittest.main()
