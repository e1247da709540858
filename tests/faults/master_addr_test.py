"""Ranks that are given only MASTER_ADDR and MASTER_PORT meet there.

As torchrun's env-var launch, Slurm batch scripts and Kubeflow's PyTorchJob
start them: each rank gets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
and nothing else (no shared folder, no Redis). Rank 0 serves the job's
store on MASTER_ADDR:MASTER_PORT and every rank connects to it with the
job's token (runtime/store). Two ranks started by hand meet and train to
the same bits as the local launcher's job; a rank given another port, a
rank that never comes and a stranger (another secret) are each named,
and the job still meets and trains while strangers, garbage and a flood
of connections hit its port. Under torchrun's agent store, which holds
MASTER_PORT itself, the job's store takes the next port.
"""
import os
import socket
import struct
import subprocess
import time
import unittest

import numpy as np

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e

ARGS = ["--device", "cpu", "--steps", "3", "--no-eval", "--no-metrics"]
# Whatever a launcher or an earlier test left that would pick another way
# to meet.
CLEARED = ("TRAINC_RENDEZVOUS", "TRAINC_RENDEZVOUS_DIR", "TRAINC_LAUNCHER", "TRAINC_POSITION_DIR",
           "TRAINC_JOB_ID", "TRAINC_JOB_SECRET", "TRAINC_STORE_PORT", "LOCAL_RANK",
           "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID")


def free_port(also_next=False):
    """A loopback port nothing listens on (and the one after it)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if not also_next or port == 65535:
            if not also_next:
                return port
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue


def listening(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class MasterAddrTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def start(self, rank, world, port, extra_env=None, args=()):
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        env.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), **(extra_env or {}))
        return subprocess.Popen([e2e.TRAIN, e2e.EXAMPLE, *ARGS, "--gpus", str(world), *args],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)

    @staticmethod
    def finish(procs):
        return [(p.wait(timeout=180), p.stdout.read()) for p in procs]

    def test_two_ranks_meet_on_master_addr_and_train_the_same_bits(self):
        port = free_port()
        out = os.path.join(e2e.tmpdir(), "master.safetensors")
        results = self.finish([self.start(r, 2, port, args=("--save", out)) for r in range(2)])
        for code, text in results:
            self.assertEqual(code, 0, text)
        self.assertIn("step 3/3", results[0][1])
        ref = os.path.join(e2e.tmpdir(), "local.safetensors")
        e2e.train(e2e.EXAMPLE, *ARGS, "--gpus", "2", "--save", ref)
        got, want = e2e.read_checkpoint(out)[0], e2e.read_checkpoint(ref)[0]
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            self.assertTrue(np.array_equal(got[name].view(np.uint32),
                                           want[name].view(np.uint32)), name)

    def test_a_rank_given_another_port_is_refused_clearly(self):
        port, wrong = free_port(), free_port()
        results = self.finish([self.start(0, 2, port), self.start(1, 2, wrong)])
        (code0, text0), (code1, text1) = results
        self.assertNotEqual(code1, 0, text1)
        self.assertIn(f"no job store answered at 127.0.0.1:{wrong} within 20s "
                      "(Connection refused)", text1)
        self.assertNotEqual(code0, 0, text0)
        self.assertIn(f"rank 1 of 2 did not join job trainc within 20s (the job's store at "
                      f"127.0.0.1:{port}, MASTER_ADDR:MASTER_PORT)", text0)

    def test_a_rank_that_never_comes_is_named(self):
        port = free_port()
        results = self.finish([self.start(r, 3, port) for r in range(2)])  # no rank 2
        for code, text in results:
            self.assertNotEqual(code, 0, text)
            self.assertIn("rank 2 of 3 did not join job trainc", text)
            self.assertIn(f"the job's store at 127.0.0.1:{port}", text)

    def hostile_clients(self, port):
        """Garbage, a truncated frame, an announced 4 GiB frame and a flood
        of silent connections at the store; returns the sockets still open."""
        held = []
        for payload in (b"GET / HTTP/1.1\r\n\r\n", os.urandom(3000),
                        struct.pack("<I", 69) + b"\x01\x00",  # half a token frame
                        b"\xff\xff\xff\xff"):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(payload)
            held.append(s)
        for _ in range(100):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        return held

    def test_strangers_and_garbage_are_refused_while_the_job_trains(self):
        port = free_port()
        secret = {"TRAINC_JOB_SECRET": "our secret", "TRAINC_JOB_ID": "job-7"}
        rank0 = self.start(0, 2, port, secret)
        while not listening(port):  # rank 0's store is up (a rank 0 that exits fails here)
            self.assertIsNone(rank0.poll(), "rank 0 exited before serving its store")
            time.sleep(0.05)
        held = self.hostile_clients(port)
        # A rank 1 of another job (another secret), and one with no secret
        # at all (its token is the plan's): both are refused and say so.
        strangers = [self.start(1, 2, port, {"TRAINC_JOB_SECRET": "not ours",
                                             "TRAINC_JOB_ID": "job-7"}),
                     self.start(1, 2, port)]
        refused = self.finish(strangers)
        for code, text in refused:
            self.assertNotEqual(code, 0, text)
            self.assertIn(f"the job's store at 127.0.0.1:{port} refused rank 1", text)
            self.assertNotIn("step 1/", text)
        rank1 = self.start(1, 2, port, secret)
        results = self.finish([rank0, rank1])
        for s in held:
            s.close()
        for code, text in results:
            self.assertEqual(code, 0, text)
        self.assertIn("step 3/3", results[0][1])

    def test_under_torchruns_agent_store_the_job_store_takes_the_next_port(self):
        # torchrun's agent (static rendezvous) holds MASTER_PORT with its own
        # store and says so in TORCHELASTIC_USE_AGENT_STORE. A listener
        # stands in for it; it never answers.
        port = free_port(also_next=True)
        agent = socket.socket()
        agent.bind(("127.0.0.1", port))
        agent.listen(16)
        try:
            torchrun = {"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "none",
                        "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
            results = self.finish([self.start(r, 2, port, dict(torchrun, LOCAL_RANK=str(r)))
                                   for r in range(2)])
            for code, text in results:
                self.assertEqual(code, 0, text)
            self.assertIn("step 3/3", results[0][1])
            # Without the variable the port is refused clearly by both.
            results = self.finish([self.start(r, 2, port) for r in range(2)])
            (code0, text0), (code1, text1) = results
            self.assertNotEqual(code0, 0, text0)
            self.assertIn(f"rank 0 cannot serve the job's store on 127.0.0.1:{port}: "
                          "Address already in use", text0)
            self.assertIn("set TRAINC_STORE_PORT", text0)
            self.assertNotEqual(code1, 0, text1)
            self.assertIn(f"the program listening on 127.0.0.1:{port} is not a trainc job "
                          "store (it said nothing within 10s)", text1)
        finally:
            agent.close()


if __name__ == "__main__":
    unittest.main()
