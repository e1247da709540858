"""Ranks that share no folder meet through Redis.

A real redis-server (Debian's, tools/setup.sh) is started on a loopback
port by the test. Three ranks are started by hand, as a cluster launcher
would on three machines (RANK, WORLD_SIZE, LOCAL_RANK), with
TRAINC_RENDEZVOUS=redis://127.0.0.1:PORT/JOB and no shared folder: they
train the default example, and end with the same weights, bit for bit, as
the same job launched locally over the file store. Reusing a job name is a
clear error, at once, not a hang.
"""
import os
import shutil
import socket
import subprocess
import time
import unittest

import numpy as np

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
ARGS = ["--device", "cpu", "--gpus", 3, "--steps", 12, "--no-eval", "--no-metrics"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisRendezvousTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(REDIS):
            raise unittest.SkipTest("redis-server is not installed (tools/setup.sh installs it)")
        cls.port = free_port()
        cls.server = subprocess.Popen(
            [REDIS, "--port", str(cls.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        give_up = time.time() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", cls.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if time.time() > give_up:
                raise AssertionError("redis-server did not start")
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        cls.server.wait()

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def run_by_hand(self, job, out):
        procs = []
        for rank in range(3):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="3", LOCAL_RANK=str(rank),
                       TRAINC_RENDEZVOUS=f"redis://127.0.0.1:{self.port}/{job}")
            env.pop("TRAINC_RENDEZVOUS_DIR", None)
            # One command line for every rank, as a cluster launcher runs it
            # (rank 0 writes the checkpoint).
            procs.append(subprocess.Popen(
                [e2e.TRAIN, e2e.EXAMPLE, *map(str, ARGS), "--save", out], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        return [(p.wait(timeout=120), p.stdout.read()) for p in procs]

    def test_three_ranks_meet_through_redis(self):
        out = os.path.join(e2e.tmpdir(), "redis.safetensors")
        results = self.run_by_hand("job-one", out)
        for code, text in results:
            self.assertEqual(code, 0, text)
        ref = os.path.join(e2e.tmpdir(), "files.safetensors")
        e2e.train(e2e.EXAMPLE, *ARGS, "--save", ref)
        got, want = e2e.read_checkpoint(out)[0], e2e.read_checkpoint(ref)[0]
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            self.assertTrue(np.array_equal(got[name].view(np.uint32),
                                           want[name].view(np.uint32)), name)

        # The same job name again: every rank says so (run_by_hand's wait
        # bounds a hang) instead of timing out in the rendezvous.
        again = self.run_by_hand("job-one", os.path.join(e2e.tmpdir(), "x.safetensors"))
        for code, text in again:
            self.assertNotEqual(code, 0, text)
            self.assertIn("was used before on the Redis server", text)

    def test_a_bad_address_is_an_error_naming_the_variable(self):
        proc = e2e.train(e2e.EXAMPLE, *ARGS, "--rendezvous", "redis://127.0.0.1:99999/x",
                         check=False)
        self.assertEqual(proc.returncode, 2, proc.stdout)
        self.assertIn("the port is not a number in [1, 65535]", proc.stdout)
        self.assertIn("--rendezvous redis://127.0.0.1:99999/x:", proc.stdout)


if __name__ == "__main__":
    unittest.main()
