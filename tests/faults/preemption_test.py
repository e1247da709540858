"""Long runs that survive: periodic checkpoints, SIGKILL and SIGTERM.

The default MLP example on 1 and 2 ranks:
  - checkpoint_every = N writes step-<N>.safetensors into checkpoint_dir and
    keeps only the newest checkpoint_keep, with no temporary file left;
  - a run killed with SIGKILL (the whole process group, as an OOM killer or
    a lost node would) at several points and resumed with --resume DIR ends
    with the same weights and optimizer state, bit for bit, as the run that
    was never interrupted;
  - SIGTERM to the launcher (Slurm preemption) stops every rank at one step
    boundary: exit code 143, a message naming the step and the checkpoint,
    no rendezvous folder left; resuming from that checkpoint again ends bit
    for bit where the uninterrupted run does;
  - after the launcher has relayed a stop, a second stop signal from outside
    (kill to the rank, or killpg) ends the rank at once, by that signal,
    without waiting for a step boundary.
"""
import glob
import os
import signal
import subprocess
import time
import unittest

import numpy as np

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e

STEPS = 400
EVERY = 50


def common(gpus):
    # micro_batch 64 x accumulate 2 per rank, as the example; no
    # evaluation, no metrics file.
    return [e2e.EXAMPLE, "--device", "cpu", "--gpus", gpus, "--steps", STEPS,
            "--no-eval", "--no-metrics", "--log-every", 100]


def reference(gpus, cache={}):
    if gpus not in cache:
        out = os.path.join(e2e.tmpdir(), f"ref{gpus}.safetensors")
        e2e.train(*common(gpus), "--save", out)
        cache[gpus] = e2e.read_checkpoint(out)[0]
    return cache[gpus]


def step_files(folder, killed=False):
    """The checkpoints in `folder` (weights files), after checking that each
    has its training state beside it and that nothing else is there. A run
    `killed` may leave a state without its weights, an older checkpoint's
    (killed while pruning) or the one being written (between the two
    renames); the next prune removes it. Never weights without state."""
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*")))
    if killed:  # and the temporary file of a write it never finished
        names = [n for n in names if ".safetensors.tmp." not in n]
    weights = [n for n in names if not n.endswith(".train_state.safetensors")]
    states = [n for n in names if n.endswith(".train_state.safetensors")]
    paired = [e2e.training_state_path(n) for n in weights]
    if killed:
        assert set(paired) <= set(states), names
        orphans = sorted(set(states) - set(paired))
        assert all(o < paired[0] or o > paired[-1] for o in orphans), names
    else:
        assert states == paired, names
    return weights


def start(args, tmp, **extra_env):
    """tools/train in its own process group, output to a file."""
    log = open(os.path.join(tmp, "log.txt"), "w")
    env = dict(os.environ, TMPDIR=tmp, **extra_env)  # TMPDIR: the launcher's rendezvous
    return subprocess.Popen([e2e.TRAIN, *map(str, args)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            env=env), log


def wait_for(predicate, proc, timeout=60, what=""):
    give_up = time.time() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended ({proc.returncode}) first")
        if time.time() > give_up:
            raise AssertionError(f"timed out{' waiting until ' if what else ''}{what}")
        time.sleep(0.005)


class PreemptionTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def test_periodic_checkpoints_keep_the_newest(self):
        folder = os.path.join(e2e.tmpdir(), "ckpt")
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 23,
                  "--no-eval", "--no-metrics", "--checkpoint_every", 5,
                  "--checkpoint_keep", 2, "--checkpoint_dir", folder)
        # Steps 5, 10, 15, 20 and the last (23); the newest two kept.
        self.assertEqual(step_files(folder),
                         ["step-00000020.safetensors", "step-00000023.safetensors"])
        tensors, meta = e2e.read_checkpoint(os.path.join(folder, "step-00000023.safetensors"))
        self.assertEqual(meta["step"], "23")
        self.assertTrue(any(n.startswith("optimizer.") for n in tensors))

    def sigkill_then_resume(self, gpus, kill_after_checkpoints):
        tmp = e2e.tmpdir()
        folder = os.path.join(tmp, "ckpt")
        args = common(gpus) + ["--checkpoint_every", EVERY, "--checkpoint_dir", folder]
        proc, log = start(args, tmp)
        def newest_step():
            steps = [int(os.path.basename(p)[5:13])
                     for p in glob.glob(os.path.join(folder, "step-????????.safetensors"))]
            return max(steps, default=0)
        try:
            wait_for(lambda: newest_step() >= kill_after_checkpoints * EVERY, proc)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log.close()
        written = step_files(folder, killed=True)
        self.assertTrue(written, "no checkpoint before the kill")
        out = os.path.join(tmp, "resumed.safetensors")
        resumed = e2e.train(*common(gpus), "--checkpoint_every", EVERY,
                            "--checkpoint_dir", folder, "--resume", folder,
                            "--save", out)
        self.assertIn("resumed from " + folder, resumed.stdout)
        e2e.assert_same_bits(self, e2e.read_checkpoint(out)[0], reference(gpus),
                                  f"{gpus} rank(s), killed after {written[-1]}")

    def test_sigkill_one_rank_early(self):
        self.sigkill_then_resume(1, 1)

    def test_sigkill_one_rank_late(self):
        self.sigkill_then_resume(1, 5)

    def test_sigkill_two_ranks(self):
        self.sigkill_then_resume(2, 3)

    def test_sigterm_stops_at_a_step_boundary_with_a_checkpoint(self):
        tmp = e2e.tmpdir()
        saved = os.path.join(tmp, "preempted.safetensors")
        proc, log = start(common(2) + ["--save", saved], tmp)
        try:
            wait_for(lambda: "step 100/" in open(log.name).read(), proc)
            os.kill(proc.pid, signal.SIGTERM)  # the launcher, as Slurm does
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
        text = open(log.name).read()
        self.assertEqual(code, 128 + signal.SIGTERM, text)
        self.assertRegex(text, r"stopped at step \d+ of 400 \(Terminated")
        self.assertIn("checkpoint " + saved, text)
        self.assertEqual(glob.glob(os.path.join(tmp, "trainc-rendezvous*")), [])
        step = int(e2e.read_checkpoint(saved)[1]["step"])
        self.assertTrue(100 <= step < STEPS, step)
        self.assertEqual(step % 10, 0)  # the ranks agree every 10 steps
        out = os.path.join(tmp, "resumed.safetensors")
        e2e.train(*common(2), "--resume", saved, "--save", out)
        e2e.assert_same_bits(self, e2e.read_checkpoint(out)[0], reference(2),
                                  f"SIGTERM at step {step}")


class StopSignalsTest(unittest.TestCase):
    """Signals as terminals, `timeout` and Slurm send them: to the whole
    process group, or to one rank alone. Either way one checkpoint, the
    exit code 128 + the signal, and a resume that continues bit for bit."""

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def stop(self, send, extra):
        tmp = e2e.tmpdir()
        folder = os.path.join(tmp, "ckpt")
        proc, log = start(common(2) + ["--checkpoint_dir", folder] + extra, tmp)
        try:
            wait_for(lambda: "step 100/" in open(log.name).read(), proc)
            send(proc)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            log.close()
        return code, open(log.name).read(), folder

    def resume_matches_reference(self, folder, stopped_at, *extra):
        out = os.path.join(e2e.tmpdir(), "resumed.safetensors")
        resumed = e2e.train(*common(2), "--checkpoint_dir", folder, "--resume", folder,
                            "--save", out, *extra)
        self.assertIn(f"resumed from {folder}/step-{stopped_at:08d}.safetensors",
                      resumed.stdout)
        e2e.assert_same_bits(self, e2e.read_checkpoint(out)[0], reference(2),
                             f"stopped at step {stopped_at}")

    def test_ctrl_c_to_the_process_group_writes_the_checkpoint(self):
        # A terminal's Ctrl-C: SIGINT to the launcher and every rank at once.
        # Without checkpoint_every the checkpoint goes to checkpoint_dir.
        code, text, folder = self.stop(lambda p: os.killpg(p.pid, signal.SIGINT), [])
        self.assertEqual(code, 128 + signal.SIGINT, text)
        written = step_files(folder)
        self.assertEqual(len(written), 1, text)
        step = int(written[0][5:13])
        self.assertIn(f"stopped at step {step} of 400 (Interrupt", text)
        self.assertNotIn("checkpoints/fashion_mlp", text)
        self.resume_matches_reference(folder, step)

    def test_sigterm_to_one_rank_is_a_preemption_between_periodic_checkpoints(self):
        # Slurm's SIGTERM to one task. checkpoint_every = 70 does not divide
        # the stop step unless it is 140 (the ranks stop on multiples of 10).
        def to_rank_1(proc):
            ranks = {e2e.rank_of(pid): pid for pid in e2e.children(proc.pid)}
            os.kill(ranks[1], signal.SIGTERM)
        code, text, folder = self.stop(to_rank_1, ["--checkpoint_every", 70])
        self.assertEqual(code, 128 + signal.SIGTERM, text)
        self.assertNotIn("error", text)
        self.assertIn("a rank was stopped by Terminated", text)
        stopped = [int(n[5:13]) for n in step_files(folder)]
        step = max(stopped)
        self.assertIn(f"checkpoint {folder}/step-{step:08d}.safetensors", text)
        self.assertEqual(stopped, sorted({70 * k for k in range(1, step // 70 + 1)} | {step}))
        self.resume_matches_reference(folder, step)

    def test_sigterm_under_zero_1_gathers_the_sharded_state(self):
        # Each rank holds half of the optimizer state: the stop checkpoint
        # must gather both halves, and the resumed run (ZeRO-1 again) end on
        # the bits of the uninterrupted plain run.
        code, text, folder = self.stop(lambda p: os.kill(p.pid, signal.SIGTERM),
                                       ["--zero", 1, "--checkpoint_every", 70])
        self.assertEqual(code, 128 + signal.SIGTERM, text)
        step = max(int(n[5:13]) for n in step_files(folder))
        self.assertIn(f"checkpoint {folder}/step-{step:08d}.safetensors", text)
        state, _ = e2e.read_checkpoint(os.path.join(folder, f"step-{step:08d}.safetensors"))
        self.assertTrue(all(np.any(state[n] != 0) for n in state if n.endswith("exp_avg_sq")))
        self.resume_matches_reference(folder, step, "--zero", 1)


def read(path):
    with open(path) as f:
        return f.read()


def proc_stat(pid):
    """/proc/PID/stat from its third field (the state) on."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return text[text.rindex(")") + 2:].split()


def pending(pid):
    """The signals sent to process `pid` and not yet delivered (a stopped
    process keeps them), as a set of numbers."""
    with open(f"/proc/{pid}/status") as f:
        mask = int(next(l for l in f if l.startswith("ShdPnd:")).split()[1], 16)
    return {sig for sig in range(1, 65) if mask & (1 << (sig - 1))}


class SecondSignalTest(unittest.TestCase):
    """A second stop signal ends a rank at once (docs/faults.md: "A second signal
    stops at once"). The launcher relays the first; one from elsewhere
    after it is still a first for the rank (the kernel's copy of a group
    signal may arrive after the relay); the next one ends the rank."""

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def second_signal_ends_rank_1(self, send_two):
        """Runs two ranks with rank 1 asleep in its loader (TRAINC_FAULT),
        where no step boundary comes for 600 s; SIGTERMs the launcher,
        freezes it once it has relayed the stop, and calls
        send_two(launcher, rank 1). Returns rank 1's wait status."""
        tmp = e2e.tmpdir()
        proc, log = start(common(2), tmp, TRAINC_FAULT="loader_sleep:rank=1:step=3:seconds=600")
        frozen = []
        try:
            wait_for(lambda: "rank 1 sleeps 600 s in load_batch" in read(log.name), proc)
            ranks = {e2e.rank_of(pid): pid for pid in e2e.children(proc.pid)}
            # Rank 0 frozen keeps the relayed SIGTERM pending, where the
            # test sees it, and cannot time out waiting for rank 1.
            os.kill(ranks[0], signal.SIGSTOP)
            frozen.append(ranks[0])
            # Stopped before the relay comes: a SIGTERM pending beside the
            # SIGSTOP would be delivered first (lower number).
            wait_for(lambda: proc_stat(ranks[0])[0] == "T", proc)
            os.kill(proc.pid, signal.SIGTERM)  # the first: relayed to every rank
            wait_for(lambda: signal.SIGTERM in pending(ranks[0]), proc)
            # The launcher frozen too: it can neither escalate (a second
            # signal of its own) nor reap rank 1, whose status stays readable.
            os.kill(proc.pid, signal.SIGSTOP)
            frozen.append(proc.pid)
            wait_for(lambda: proc_stat(proc.pid)[0] == "T", proc)
            # The relay may still be pending at rank 1 (a loaded machine has
            # not run it yet): a SIGTERM sent now would merge with it and
            # keep the launcher's sender, and so not count. Wait until rank 1
            # has taken it (or never got it: the launcher froze first).
            wait_for(lambda: signal.SIGTERM not in pending(ranks[1]), proc)
            send_two(proc.pid, ranks[1])
            # Nothing else can end rank 1 now: its loader sleeps 600 s, its
            # peer and its launcher are frozen. A hang fails here.
            wait_for(lambda: proc_stat(ranks[1])[0] == "Z", proc,
                     what="rank 1 ended (after its second stop signal)")
            status = int(proc_stat(ranks[1])[-1])  # field 52: the wait status
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            try:
                proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                log.close()
        text = read(log.name)
        self.assertNotEqual(proc.returncode, 0, text)
        self.assertNotIn("stopped at step", text)  # no step boundary, no checkpoint
        self.assertEqual(glob.glob(os.path.join(tmp, "**", "*.safetensors"), recursive=True), [])
        return status

    def test_a_second_kill_to_the_rank_ends_it_at_once(self):
        def kill_rank(launcher, rank):
            os.kill(rank, signal.SIGTERM)
            os.kill(rank, signal.SIGINT)
        status = self.second_signal_ends_rank_1(kill_rank)
        # Killed by whichever of the two it handled second (the kernel
        # delivers pending signals lowest first), not an exit of its own.
        self.assertTrue(os.WIFSIGNALED(status), status)
        self.assertIn(os.WTERMSIG(status), (signal.SIGTERM, signal.SIGINT))

    def test_a_second_killpg_ends_the_rank_at_once(self):
        def killpg(launcher, rank):
            os.killpg(launcher, signal.SIGTERM)
            os.killpg(launcher, signal.SIGINT)
        status = self.second_signal_ends_rank_1(killpg)
        self.assertTrue(os.WIFSIGNALED(status), status)
        self.assertIn(os.WTERMSIG(status), (signal.SIGTERM, signal.SIGINT))


if __name__ == "__main__":
    unittest.main()
