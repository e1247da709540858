"""Overlap and failures, on the real binary with two ranks.

- The trace of a two-rank run shows the first bucket's all-reduce starting
  before that rank's backward pass has ended.
- A rank that dies (SIGKILL) or hangs (SIGSTOP) stops the whole job within
  30 seconds, with a message naming the rank, and leaves no process behind.
- With --trace, the trace of a job stopped by a hung rank holds where each
  rank was, the hung one marked behind.
- A rank stopped before it joins the job (before its heartbeat starts) is
  the rank named, in every run, not the peer that gave up waiting for it.
"""
import json
import os
import re
import signal
import subprocess
import time
import unittest

import e2e_lib as e2e


children = e2e.children
rank_of = e2e.rank_of


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class OverlapTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def test_first_bucket_all_reduce_starts_during_backward(self):
        # Two ranks on a 2-core machine: each rank's comm thread competes
        # with both compute threads for a core, so on many steps the
        # scheduler runs it only after the backward. The plan's promise is
        # checked where it is observable: on some traced step of every rank
        # (the --no-overlap test below shows the contrast on every step).
        d = e2e.tmpdir()
        trace = f"{d}/trace.json"
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--steps", 24,
                  "--no-eval", "--trace", trace, "--trace-steps", 20)
        with open(trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        self.assertEqual({e["pid"] for e in events}, {0, 1})
        for rank in (0, 1):
            steps = sorted({e["args"]["step"] for e in events if e["pid"] == rank})
            self.assertEqual(len(steps), 20)
            early = 0
            for step in steps:
                mine = [e for e in events
                        if e["pid"] == rank and e["args"]["step"] == step]
                backward_end = max(e["ts"] + e["dur"] for e in mine
                                   if e["cat"] == "backward")
                reduces = sorted((e for e in mine if e["cat"] == "comm"),
                                 key=lambda e: e["args"]["bucket"])
                self.assertGreaterEqual(len(reduces), 2, "one bucket cannot overlap")
                early += reduces[0]["ts"] < backward_end
            self.assertGreaterEqual(early, 1,
                                    f"rank {rank}: bucket 0 waited for the "
                                    f"whole backward on {len(steps) - early} "
                                    f"of {len(steps)} steps")

    def test_no_overlap_waits_for_the_backward(self):
        # The baseline the benchmark compares against, and a check that the
        # test above can fail: with --no-overlap no all-reduce may start
        # before the backward pass has ended.
        d = e2e.tmpdir()
        trace = f"{d}/trace.json"
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--steps", 6,
                  "--no-eval", "--no-overlap", "--trace", trace)
        with open(trace) as f:
            events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
        for e in events:
            if e["cat"] != "comm":
                continue
            backward_end = max(b["ts"] + b["dur"] for b in events
                               if b["pid"] == e["pid"] and b["cat"] == "backward"
                               and b["args"]["step"] == e["args"]["step"])
            self.assertGreaterEqual(e["ts"], backward_end - 1e-3)


def stop_positions(test, path):
    """The positions a stopped job's trace holds, by rank, and its reason."""
    with open(path) as f:
        trace = json.load(f)
    positions = {e["pid"]: e for e in trace["traceEvents"]
                 if e["ph"] == "i" and e.get("cat") == "position"}
    test.assertEqual(sorted(positions), [0, 1], trace["traceEvents"][-3:])
    test.assertIn("stopped", trace["metadata"])
    return positions, trace


class FaultTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def run_and_break(self, how, *extra):
        proc = subprocess.Popen(
            [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2",
             "--steps", "100000", "--no-eval", "--log-every", "1", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            for line in proc.stdout:
                if line.startswith("step "):
                    break
            workers = children(proc.pid)
            self.assertEqual(len(workers), 2, workers)
            victim = next(pid for pid in workers if rank_of(pid) == 1)
            os.kill(victim, how)
            rest = proc.stdout.read()
            proc.wait(timeout=120)  # a hang; the order below is the check
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("rank 1", rest)
        # A rank stopped while it reports its error writes the whole line.
        self.assertNotRegex(rest, r"(?m)^(\[rank \d+\] )?train: error: *$")
        for pid in workers:
            if how == signal.SIGSTOP and alive(pid):
                os.kill(pid, signal.SIGCONT)
            self.assertFalse(alive(pid), f"worker {pid} outlived the job")
        return rest

    def test_cluster_ranks_print_where_each_rank_was(self):
        # As srun starts them: no trainc launcher, a shared rendezvous
        # folder. Rank 1 is stopped; rank 0's watchdog ends the job and
        # prints every rank's position from the folder, rank 1 behind.
        d = e2e.tmpdir()
        trace = os.path.join(e2e.tmpdir(), "trace.json")
        procs = []
        for r in range(2):
            env = dict(os.environ, SLURM_PROCID=str(r), SLURM_NTASKS="2", SLURM_LOCALID=str(r),
                       TRAINC_RENDEZVOUS_DIR=d, TRAINC_JOB_ID="fault")
            for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TRAINC_POSITION_DIR", "MASTER_ADDR",
                      "TRAINC_LAUNCHER", "TRAINC_RENDEZVOUS", "OMPI_COMM_WORLD_RANK"):
                env.pop(v, None)
            procs.append(subprocess.Popen(
                [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2", "--steps", "100000",
                 "--no-eval", "--log-every", "1", "--watchdog", "3", "--trace", trace],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        try:
            for line in procs[0].stdout:
                if line.startswith("step 2"):
                    break
            os.kill(procs[1].pid, signal.SIGSTOP)
            rest = procs[0].stdout.read()
            procs[0].wait(timeout=120)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stdout.close()
        self.assertNotEqual(procs[0].returncode, 0)
        self.assertIn("rank 0: no step finished for", rest)
        self.assertIn("where each rank was:", rest)
        self.assertRegex(rest, r"rank 0: step \d+, in ")
        self.assertRegex(rest, r"rank 1: step \d+, .*  <- behind")
        # Rank 0 wrote the trace before it left, with both positions.
        self.assertIn(f"train: the stopped job's trace: {trace}", rest)
        positions, stopped = stop_positions(self, trace)
        self.assertTrue(positions[1]["args"]["behind"], positions)
        self.assertFalse(positions[0]["args"]["behind"], positions)
        self.assertEqual(stopped["metadata"]["stopped"]["behind"], 1)
        self.assertIn("rank 0: no step finished for", stopped["metadata"]["stopped"]["reason"])

    def stop_rank_1_at_start(self, proc):
        """SIGSTOPs rank 1 of the launcher `proc` as soon as it runs train
        (its environment says RANK=1); returns its pid."""
        while proc.poll() is None:
            for pid in children(proc.pid):
                try:
                    rank = rank_of(pid)
                except (OSError, KeyError, ValueError):
                    continue  # gone, or not yet exec'ed
                if rank == 1:
                    os.kill(pid, signal.SIGSTOP)
                    return pid
            time.sleep(0.001)
        self.fail("the job ended before rank 1 started")

    def test_rank_stopped_before_it_joins_is_named_every_time(self):
        # Rank 1 is stopped as soon as it starts, so before it joins the
        # rendezvous, and before its heartbeat pulse starts (the launcher's
        # watchdog does not watch it). Rank 0 gives up waiting after Gloo's
        # timeout; the summary names rank 1 in every run, wherever the stop
        # caught it (before Gloo's first context, between two, in the
        # handshake). Three jobs at once: the test takes one timeout.
        jobs = [subprocess.Popen(
            [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2", "--steps", "100000",
             "--no-eval", "--log-every", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(3)]
        stopped = []
        try:
            stopped = [self.stop_rank_1_at_start(proc) for proc in jobs]
            outs = [proc.communicate(timeout=120)[0] for proc in jobs]
        finally:
            for proc in jobs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        for out in outs:
            # Stopped before the run began: no rank printed its first line.
            self.assertNotIn("training fashion_mlp", out)
            self.assertRegex(out, r"(?m)^train: error: rank 1 is stopped \(SIGSTOP\?\) and "
                                  r"rank 0 gave up waiting: ")
            self.assertNotRegex(out, r"(?m)^train: error: rank 0 failed")
        for pid in stopped:
            self.assertFalse(alive(pid), f"rank 1 ({pid}) outlived its job")

    def test_dead_rank_stops_the_job(self):
        self.run_and_break(signal.SIGKILL)

    def test_hung_rank_stops_the_job(self):
        trace = os.path.join(e2e.tmpdir(), "trace.json")
        rest = self.run_and_break(signal.SIGSTOP, "--trace", trace)
        # The launcher says where every rank was (runtime/position): the
        # stopped rank, wherever SIGSTOP caught it (an instruction of its
        # step, a collective), marked behind; the other waiting for it in a
        # collective of that step (a bucket's all-reduce, the loss sum
        # after them) or of the next.
        self.assertIn("where each rank was:", rest)
        stopped = re.search(r"rank 1: step (\d+), .*\(instruction \d+ of \d+\).*  <- behind",
                            rest)
        self.assertIsNotNone(stopped, rest)
        waiting = re.search(r"rank 0: step (\d+), in (all-reduce of bucket \d+|the loss sum|the stop vote)",
                            rest)
        self.assertIsNotNone(waiting, rest)
        self.assertIn(int(waiting.group(1)) - int(stopped.group(1)), (0, 1), rest)
        # The trace says the same: rank 0, told by the launcher while it
        # waited, wrote every rank's last position, rank 1 behind, and
        # tools/viz can draw it.
        positions, stopped_trace = stop_positions(self, trace)
        meta = stopped_trace["metadata"]["stopped"]
        self.assertEqual(meta["behind"], 1, meta)
        self.assertIn("rank 1 sent no heartbeat", meta["reason"])
        behind = positions[1]
        self.assertEqual(behind["name"], "rank 1: stopped here (behind)")
        self.assertTrue(behind["args"]["behind"])
        self.assertEqual(behind["args"]["step"], int(stopped.group(1)))
        # The table's line for rank 1, but for the seconds (read later).
        seconds = re.compile(r"for [\d.]+ s")
        self.assertIn(seconds.sub("for N s", f"rank 1: {behind['args']['where']}  <- behind"),
                      seconds.sub("for N s", rest))
        self.assertFalse(positions[0]["args"]["behind"])
        self.assertEqual(positions[0]["args"]["step"], int(waiting.group(1)))
        self.assertRegex(positions[0]["args"]["state"],
                         r"^in (all-reduce of bucket \d+|the loss sum|the stop vote)$")
        # How long rank 1 sat there is wall-clock time: only its type is
        # the trace format's; the table's line above is the check.
        self.assertIsInstance(positions[1]["args"]["seconds"], (int, float))


if __name__ == "__main__":
    unittest.main()
