"""`mpirun -np 2 train`: the ranks meet through MPI (--comm auto picks the
MPI communicator under mpirun) and, in deterministic mode, train to the
same bits as the local launcher's 2 ranks over Gloo, with and without
ZeRO-1 (reduce-scatter + all-gather); --comm mpi without mpirun, and Gloo
under mpirun without a rendezvous, are clear errors. Skips where Open
MPI's mpirun is not installed (tools/setup.sh installs it)."""
import os
import shutil
import signal
import subprocess
import unittest

import e2e_lib as e2e

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]


def mpirun_env():
    env = dict(os.environ)
    for v in ("TRAINC_RENDEZVOUS_DIR", "TRAINC_RENDEZVOUS", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    return env


def descendants(pid):
    """Every live process below `pid` (mpirun's ranks, wherever it forks them)."""
    out, todo = [], [pid]
    while todo:
        kids = e2e.children(todo.pop())
        out += kids
        todo += kids
    return out


def mpi_rank_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    return int(env[b"OMPI_COMM_WORLD_RANK"]) if b"OMPI_COMM_WORLD_RANK" in env else None


def mpirun(n, *args, check=True):
    env = mpirun_env()
    proc = subprocess.run(MPIRUN + ["-np", str(n), e2e.TRAIN, *map(str, args)],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"mpirun -np {n} train {' '.join(map(str, args))} failed "
                             f"({proc.returncode}):\n{proc.stdout}")
    return proc


class MpiTest(unittest.TestCase):

    def setUp(self):
        if shutil.which("mpirun") is None:
            self.skipTest("mpirun not found (apt-get install openmpi-bin)")
        e2e.need_fashion_mnist(self)
        self.dir = e2e.tmpdir()

    def test_same_bits_as_the_local_launcher(self):
        for zero in (0, 1):
            common = [e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--steps", 20,
                      "--no-eval", "--deterministic", "true", "--zero", zero]
            local = f"{self.dir}/local{zero}.safetensors"
            mpi = f"{self.dir}/mpi{zero}.safetensors"
            e2e.train(*common, "--save", local)
            mpirun(2, *common, "--save", mpi)
            e2e.assert_same_bits(self, e2e.read_checkpoint(mpi)[0],
                                 e2e.read_checkpoint(local)[0],
                                 f"zero {zero}: mpirun vs local launcher")

    def test_a_stopped_rank_ends_the_job_through_the_watchdog(self):
        # Open MPI's collectives never time out: without the watchdog the
        # job below would wait for the stopped rank forever.
        proc = subprocess.Popen(
            MPIRUN + ["-np", "2", e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2",
                      "--steps", "100000", "--no-eval", "--no-metrics", "--log-every", "1",
                      "--watchdog", "3"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=mpirun_env())
        stopped = []
        try:
            text = ""
            for line in proc.stdout:
                text += line
                if "step " in line:  # (a live line under mpirun's pty: ESC[K first)
                    break
            ranks = {mpi_rank_of(p): p for p in descendants(proc.pid)}
            self.assertIn(1, ranks, text)
            os.kill(ranks[1], signal.SIGSTOP)
            stopped.append(ranks[1])
            text += proc.communicate(timeout=240)[0]
        finally:
            for pid in stopped + descendants(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertNotEqual(proc.returncode, 0, text)
        self.assertIn("rank 0: no step finished for", text)
        self.assertIn("stopping the job (--watchdog 3)", text)
        # ... and says where it is: waiting in a collective (a bucket's
        # all-reduce, or the loss sum after the step's buckets).
        self.assertRegex(text, r"rank 0 is at step \d+, in "
                               r"(all-reduce of bucket \d+|the loss sum|the stop vote)")

    def test_mpi_without_mpirun_is_an_error(self):
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--steps", 1, "--comm", "mpi",
                         check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("not started by mpirun", proc.stdout)

    def test_gloo_under_mpirun_needs_a_rendezvous(self):
        proc = mpirun(2, e2e.EXAMPLE, "--device", "cpu", "--steps", 1, "--no-eval",
                      "--comm", "gloo", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("Gloo needs a rendezvous", proc.stdout)


if __name__ == "__main__":
    unittest.main()
