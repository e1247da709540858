"""viz FILE.train --trace T --metrics M draws the plan that ran: the real
`train` started with overrides records them (and the plan's hash) in its
trace and metrics log, and `viz` compiles the file with them. A file edited
since the run, and a trace and a metrics log of two runs, are refused
naming what differs; an older trace is drawn as written, with a warning."""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import e2e_lib  # noqa: E402

VIZ = e2e_lib.runfile("tools/viz/viz")


def viz(*args):
    """Runs tools/viz; returns (returncode, stdout, stderr)."""
    proc = subprocess.run([VIZ, *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


class PlanThatRanTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(e2e_lib.FASHION):
            raise unittest.SkipTest("Fashion-MNIST is not installed (dataset-fashion-mnist)")
        cls.d = e2e_lib.tmpdir()
        cls.train_file = os.path.join(cls.d, "mlp.train")
        shutil.copy(e2e_lib.EXAMPLE, cls.train_file)
        os.chmod(cls.train_file, 0o644)
        with open(cls.train_file) as f:
            cls.text = f.read()
        # The file says 2 ranks x 64 x 2 = 256 for 10 epochs; the run does
        # micro-batch 4 for 6 steps.
        cls.trace = os.path.join(cls.d, "t.json")
        cls.metrics = os.path.join(cls.d, "m.jsonl")
        e2e_lib.train(cls.train_file, "--micro_batch", 4, "--steps", 6, "--no-eval",
                      "--trace", cls.trace, "--metrics", cls.metrics)
        with open(cls.trace) as f:
            cls.recorded = json.load(f)["metadata"]["plan"]

    def tearDown(self):
        with open(self.train_file, "w") as f:  # as the run compiled it
            f.write(self.text)

    def test_the_report_shows_the_runs_batch_arithmetic(self):
        out_html = os.path.join(self.d, "r.html")
        rc, out, err = viz(self.train_file, "--trace", self.trace, "--metrics", self.metrics,
                           "-o", out_html)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"drawing the plan that ran: {self.train_file} --micro_batch 4 --steps 6",
                      out)
        self.assertIn("global batch 16 = 2 rank(s) x micro-batch 4 x 2 micro-step(s)", out)
        self.assertNotIn("micro-batch 64", out)
        self.assertEqual(err, "")
        with open(out_html) as f:
            html = f.read()
        batch = re.search(r'<p id="batch">(.*?)</p>', html).group(1)
        self.assertIn("micro-batch 4 ", batch)
        self.assertIn("0 epoch(s), 6 step(s)", batch)
        # The run's own record names its overrides and its plan.
        self.assertEqual(self.recorded["overrides"], [["micro_batch", "4"], ["steps", "6"]])
        with open(self.metrics) as f:
            run = json.loads(f.readline())
        self.assertEqual(run["plan"], self.recorded)

    def test_a_file_edited_since_the_run_is_refused(self):
        with open(self.train_file, "w") as f:
            f.write(self.text.replace("accumulate  = 2", "accumulate  = 4"))
        rc, out, err = viz(self.train_file, "--trace", self.trace, "-o",
                           os.path.join(self.d, "e.html"))
        self.assertEqual(rc, 1, out + err)
        self.assertIn(f"{self.train_file} is not the plan that ran (recorded in {self.trace}): "
                      "the file changed since the run", err)
        self.assertIn(f"plan hash: {self.recorded['hash']} in the run", err)
        self.assertIn(f"text hash of {self.train_file}: {self.recorded['source_hash']}", err)
        self.assertIn(f"accumulate: 2 in the run, 4 in {self.train_file}", err)
        self.assertIn(f"global_batch: 16 in the run, 32 in {self.train_file}", err)

    def test_a_trace_and_a_metrics_log_of_two_runs_are_refused(self):
        other = os.path.join(self.d, "other.jsonl")
        e2e_lib.train(self.train_file, "--gpus", 1, "--micro_batch", 4, "--steps", 2,
                      "--no-eval", "--metrics", other)
        rc, out, err = viz(self.train_file, "--trace", self.trace, "--metrics", other,
                           "-o", os.path.join(self.d, "two.html"))
        self.assertEqual(rc, 1, out + err)
        self.assertIn(f"{self.trace} and {other} are of two different runs", err)
        self.assertIn(f"gpus: 2 in the trace's run, 1 in {other}", err)
        self.assertIn(f"steps: 6 in the trace's run, 2 in {other}", err)

    def test_a_plan_file_is_compared_by_its_hash(self):
        same = os.path.join(self.d, "same.plan")
        own = os.path.join(self.d, "own.plan")
        e2e_lib.train("--compile-only", self.train_file, "--micro_batch", 4, "--steps", 6,
                      "-o", same)
        e2e_lib.train("--compile-only", self.train_file, "-o", own)
        rc, out, err = viz(same, "--trace", self.trace, "-o", os.path.join(self.d, "p.html"))
        self.assertEqual(rc, 0, err)
        self.assertIn("micro-batch 4", out)
        rc, out, err = viz(own, "--trace", self.trace, "-o", os.path.join(self.d, "p.html"))
        self.assertEqual(rc, 1, out + err)
        self.assertIn(f"{own} is not the plan that ran", err)
        self.assertIn(f"micro_batch: 4 in the run, 64 in {own}", err)

    def test_an_older_trace_is_drawn_as_written_with_a_warning(self):
        with open(self.trace) as f:
            doc = json.load(f)
        del doc["metadata"]["plan"]
        old = os.path.join(self.d, "old.json")
        with open(old, "w") as f:
            json.dump(doc, f)
        rc, out, err = viz(self.train_file, "--trace", old, "-o", os.path.join(self.d, "o.html"))
        self.assertEqual(rc, 0, err)
        self.assertIn(f"{old} records no plan", err)
        self.assertIn("could not be checked", err)
        self.assertIn("micro-batch 64", out)


if __name__ == "__main__":
    unittest.main()
