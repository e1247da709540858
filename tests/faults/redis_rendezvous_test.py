"""Ranks that share no folder meet through Redis.

A real redis-server (Debian's, tools/setup.sh) is started on a loopback
port by the test. Three ranks are started by hand, as a cluster launcher
would on three machines (RANK, WORLD_SIZE, LOCAL_RANK), with
TRAINC_RENDEZVOUS=redis://127.0.0.1:PORT/JOB and no shared folder: they
train the default example, and end with the same weights, bit for bit, as
the same job launched locally over the file store. Reusing a job name is a
clear error, at once, not a hang. A rank frozen (SIGSTOP) in a job that
meets through Redis is named in the table the watchdog's rank prints from
what every rank published to the server.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import unittest

import numpy as np

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
ARGS = ["--device", "cpu", "--gpus", 3, "--steps", 12, "--no-eval", "--no-metrics"]


def redis_get(port, key):
    """GET through the Redis protocol on a socket of our own (None: no key)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        k = key.encode()
        s.sendall(b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(k), k))
        reply = b""
        while b"\r\n" not in reply:
            reply += s.recv(4096)
        head, _, body = reply.partition(b"\r\n")
        if head == b"$-1":
            return None
        n = int(head[1:])
        while len(body) < n + 2:
            body += s.recv(4096)
        return body[:n].decode()


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
        # Until it answers; one that exits fails here, one that hangs runs
        # into Bazel's timeout.
        while True:
            try:
                with socket.create_connection(("127.0.0.1", cls.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        break
            except OSError:
                pass
            if cls.server.poll() is not None:
                raise AssertionError("redis-server exited before answering")
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

    def test_a_frozen_rank_is_named_from_the_positions_in_redis(self):
        # Two ranks by hand, no shared folder: rank 1 is stopped after
        # rank 0's second step; rank 0's watchdog ends the job and prints
        # every rank's position, read from the server, rank 1 behind (its
        # alive key expired). Its trace (PATH.rank0.json: no shared folder)
        # holds the same.
        trace = os.path.join(e2e.tmpdir(), "trace.json")
        procs = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                       TRAINC_RENDEZVOUS=f"redis://127.0.0.1:{self.port}/frozen")
            for v in ("TRAINC_RENDEZVOUS_DIR", "TRAINC_POSITION_DIR", "TRAINC_LAUNCHER"):
                env.pop(v, None)
            procs.append(subprocess.Popen(
                [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2", "--steps", "100000",
                 "--no-eval", "--no-metrics", "--log-every", "1", "--watchdog", "3",
                 "--trace", trace],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        try:
            for line in procs[0].stdout:
                if line.startswith("step 2"):
                    break
            # Once rank 1 has published a position in a step (stage 1,
            # runtime/position's record) it is stopped. It publishes every
            # 100 ms while it runs; a rank that never does hangs the test
            # into Bazel's timeout, one that exits fails here.
            while True:
                published = redis_get(self.port, "trainc/frozen/positions/1")
                if published and published.split()[0] == "1":
                    break
                self.assertIsNone(procs[1].poll(), "rank 1 exited without publishing a step")
                time.sleep(0.05)
            os.kill(procs[1].pid, signal.SIGSTOP)
            rest = procs[0].stdout.read()
            procs[0].wait(timeout=120)  # a hang; the order below is the check
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stdout.close()
        self.assertNotEqual(procs[0].returncode, 0, rest)
        self.assertIn("rank 0: no step finished for", rest)
        table = rest.find("where each rank was:\n")
        self.assertGreater(table, rest.find("rank 0: no step finished for"), rest)
        self.assertRegex(rest[table:], r"\n  rank 0: step \d+, ")
        self.assertRegex(rest[table:], r"\n  rank 1: step \d+, [^\n]*  <- behind\n")
        with open(trace + ".rank0.json") as f:
            written = json.load(f)
        behind = [e["pid"] for e in written["traceEvents"]
                  if e["ph"] == "i" and e.get("cat") == "position" and e["args"]["behind"]]
        self.assertEqual(behind, [1])

    def test_a_bad_address_is_an_error_naming_the_variable(self):
        proc = e2e.train(e2e.EXAMPLE, *ARGS, "--rendezvous", "redis://127.0.0.1:99999/x",
                         check=False)
        self.assertEqual(proc.returncode, 2, proc.stdout)
        self.assertIn("the port is not a number in [1, 65535]", proc.stdout)
        self.assertIn("--rendezvous redis://127.0.0.1:99999/x:", proc.stdout)


if __name__ == "__main__":
    unittest.main()
