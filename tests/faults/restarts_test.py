"""Automatic restarts: `--max_restarts N` on the local launcher.

The default MLP on two ranks, a checkpoint every 10 steps:
  - SIGKILL from outside to a random rank at a random step (the killer
    follows rank 0's step lines; each kill is aimed at the start that is
    running, found by its TRAINC_RESTART_COUNT), three times: each restart
    is logged with its cause (the rank, its signal, its step) and starts
    every rank from the newest checkpoint; the run ends bit for bit on the
    uninterrupted run's weights and optimizer state;
  - killed once more than --max_restarts allows: exit code 75, a message
    naming the rank and the checkpoint to resume from, and resuming from
    it ends on the same bits;
  - with --min_gpus 1 (deterministic = true), the failure after the last
    restart goes on with one rank, the same global batch, from the newest
    checkpoint, and ends on the bits of the uninterrupted two-rank run;
  - ranks started as torchrun --max-restarts starts them again
    (TORCHELASTIC_RESTART_COUNT=1, the same command line) continue from
    the newest checkpoint, and end on the same bits.
"""
import os
import random
import re
import signal
import subprocess
import unittest

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e
from preemption_test import start, wait_for

STEPS = 400
EVERY = 10
RESTART_LINE = re.compile(
    r"\ntrain: restart (\d+) of (\d+) \(--max_restarts\): rank (\d) died of signal 9 "
    r"\(Killed\) at step (\d+); every rank starts again from (\S+)")


def common(*extra):
    return [e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--steps", STEPS, "--no-eval",
            "--no-metrics", "--log-every", 1, "--seed", e2e.SEED, *extra]


def reference(*extra, cache={}):
    if extra not in cache:
        out = os.path.join(e2e.tmpdir(), "ref.safetensors")
        e2e.train(*common(*extra), "--save", out)
        cache[extra] = e2e.read_checkpoint(out)[0]
    return cache[extra]


def ranks_of_start(launcher, restarts):
    """{rank: pid} of the launcher's workers of start `restarts` (0: the first)."""
    ranks = {}
    for pid in e2e.children(launcher):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue  # gone meanwhile
        if int(env.get(b"TRAINC_RESTART_COUNT", b"-1")) == restarts:
            ranks[int(env[b"RANK"])] = pid
    return ranks


def starts(text):
    """The log cut at each restart line: what each start printed."""
    return re.split(r"\ntrain: restart \d+ of", text)


class RestartsTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)
        self.rng = random.Random(e2e.SEED)

    def kill_randomly(self, kills, max_restarts, *extra):
        """Runs the job, SIGKILLs a random rank of each of the first `kills`
        starts once it has logged a random number of steps (and written a
        checkpoint of its own); returns (exit code, log, killed ranks, out)."""
        tmp = e2e.tmpdir()
        folder = os.path.join(tmp, "ckpt")
        out = os.path.join(tmp, "out.safetensors")
        proc, log = start(common(*extra) + ["--checkpoint_every", EVERY, "--checkpoint_dir",
                                            folder, "--max_restarts", max_restarts, "--save",
                                            out], tmp)
        def text():
            with open(log.name) as f:
                return f.read()
        killed = []
        try:
            for k in range(kills):
                lines = self.rng.randint(EVERY + 1, 3 * EVERY)
                def due():
                    this = starts(text())[k:]
                    return (len(this) == 1 and "checkpoint " + folder in this[0] and
                            len(re.findall(r"(?m)^step \d+/", this[0])) >= lines)
                wait_for(due, proc, what=f"start {k} logged {lines} steps")
                ranks = ranks_of_start(proc.pid, k)
                rank = self.rng.choice(sorted(ranks))
                os.kill(ranks[rank], signal.SIGKILL)
                killed.append(rank)
                if k + 1 < kills:
                    wait_for(lambda: len(starts(text())) > k + 1, proc,
                             what=f"restart {k + 1}")
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log.close()
        return code, text(), killed, out, folder

    def test_killed_three_times_ends_on_the_uninterrupted_bits(self):
        code, text, killed, out, folder = self.kill_randomly(3, max_restarts=3)
        self.assertEqual(code, 0, text)
        restarts = RESTART_LINE.findall(text)
        self.assertEqual(len(restarts), 3, text)
        for i, (number, total, rank, step, checkpoint) in enumerate(restarts):
            self.assertEqual((int(number), int(total)), (i + 1, 3), text)
            self.assertEqual(int(rank), killed[i], text)  # the rank killed, not a peer
            # The newest checkpoint at the kill: at most EVERY steps behind it
            # (the step's own when the kill came as it was written).
            written = int(re.fullmatch(re.escape(folder) + r"/step-(\d{8})\.safetensors",
                                       checkpoint).group(1))
            self.assertTrue(0 <= int(step) - written <= EVERY + 1, (step, written, text))
            self.assertIn(f"resumed from {checkpoint} at step {written} ", text)
        self.assertIn("summary", starts(text)[3])
        e2e.assert_same_bits(self, e2e.read_checkpoint(out)[0], reference(),
                             f"killed ranks {killed} at steps {[r[3] for r in restarts]}")

    def test_more_failures_than_max_restarts_exit_75_naming_the_checkpoint(self):
        code, text, killed, out, folder = self.kill_randomly(2, max_restarts=1)
        self.assertEqual(code, 75, text)
        self.assertEqual(len(RESTART_LINE.findall(text)), 1, text)
        gave_up = re.search(
            r"train: error: rank (\d) exited with signal 9 \(Killed\)[^\n]*\n(?:.*\n)*?"
            r"gave up after 1 restart\(s\) \(--max_restarts 1\): rank (\d) died of signal 9 "
            r"\(Killed\) at step (\d+); the run can continue from (\S+): run the same "
            r"command with --resume (\S+) \(exit code 75\)\n", text)
        self.assertIsNotNone(gave_up, text)
        self.assertEqual(int(gave_up.group(2)), killed[1], text)
        checkpoint = gave_up.group(4)
        self.assertEqual(gave_up.group(5), checkpoint)
        self.assertTrue(checkpoint.startswith(folder + "/step-"), text)
        self.assertFalse(os.path.exists(out), "a failed run saved its final weights")
        resumed = os.path.join(e2e.tmpdir(), "resumed.safetensors")
        e2e.train(*common(), "--resume", checkpoint, "--save", resumed)
        e2e.assert_same_bits(self, e2e.read_checkpoint(resumed)[0], reference(),
                             f"resumed from {checkpoint}")

    def test_a_rank_that_fails_after_its_restarts_leaves_one_rank_on_the_same_bits(self):
        deterministic = ("--deterministic", "true")
        code, text, killed, out, folder = self.kill_randomly(2, 1, "--min_gpus", 1,
                                                             *deterministic)
        self.assertEqual(code, 0, text)
        self.assertEqual(len(RESTART_LINE.findall(text)), 1, text)
        fewer = re.search(
            r"\ntrain: rank (\d) died of signal 9 \(Killed\) at step (\d+) after 1 restart\(s\): "
            r"going on with 1 of 2 ranks \(--min_gpus 1\), global batch 256 = 1 ranks x 64 "
            r"micro_batch x 4 accumulate, from (\S+)\n", text)
        self.assertIsNotNone(fewer, text)
        self.assertEqual(int(fewer.group(1)), killed[1], text)
        after = text[fewer.end():]
        self.assertIn("training fashion_mlp on 1 cpu rank(s): global_batch 256 = 1 x 64 "
                      "micro_batch x 4 accumulate", after)
        self.assertIn(f"resumed from {fewer.group(3)} at step ", after)
        e2e.assert_same_bits(self, e2e.read_checkpoint(out)[0], reference(*deterministic),
                             f"one rank from {fewer.group(3)}")

    def by_hand(self, job, steps, folder, out, **extra_env):
        """Two ranks as torchrun starts them (RANK, WORLD_SIZE, a shared
        rendezvous folder), the same command line; returns their outputs."""
        rendezvous = os.path.join(e2e.tmpdir(), "rendezvous")
        os.makedirs(rendezvous, exist_ok=True)
        args = common() + ["--checkpoint_every", EVERY, "--checkpoint_dir", folder, "--save", out]
        args[args.index("--steps") + 1] = steps
        procs = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                       TRAINC_RENDEZVOUS_DIR=rendezvous, TRAINC_JOB_ID=job, **extra_env)
            for name in ("TRAINC_RENDEZVOUS", "TRAINC_LAUNCHER"):
                env.pop(name, None)
            procs.append(subprocess.Popen([e2e.TRAIN, *map(str, args)], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        outputs = [(p.wait(timeout=120), p.stdout.read()) for p in procs]
        for code, text in outputs:
            self.assertEqual(code, 0, text)
        return outputs[0][1]

    def test_ranks_torchrun_restarts_continue_from_the_newest_checkpoint(self):
        tmp = e2e.tmpdir()
        folder, out = os.path.join(tmp, "ckpt"), os.path.join(tmp, "out.safetensors")
        # The first start stops after 35 steps (as if its job had been lost
        # there); torchrun's restart runs the whole command again.
        first = self.by_hand("first", 35, folder, out)
        self.assertNotIn("resum", first)
        again = self.by_hand("again", STEPS, folder, out, TORCHELASTIC_RESTART_COUNT="1")
        self.assertIn("restarted (TORCHELASTIC_RESTART_COUNT=1): resuming from the newest "
                      "checkpoint in " + folder, again)
        self.assertIn(f"resumed from {folder}/step-00000035.safetensors at step 35 ", again)
        e2e.assert_same_bits(self, e2e.read_checkpoint(out)[0], reference(),
                             "restarted by torchrun at step 35")


if __name__ == "__main__":
    unittest.main()
