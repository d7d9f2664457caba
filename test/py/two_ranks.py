"""Run a W = 2 world as two processes on this one GPU (torch symmetric memory with overlapping devices), for the
GPU tests of the executor and of ditron.ops. Each process prints "rank R: NAME ok" for every program it checked."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_two_ranks(argv: list[str], names: list[str], timeout_s: float = 900) -> None:
    """Start `python argv...` as ranks 0 and 1 and fail the test unless both exit 0 and report every name ok."""
    port = _free_port()
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES="1", DITRON_WAIT_TIMEOUT_S="120",
                   CUDA_DEVICE_MAX_CONNECTIONS="32")
        procs.append(subprocess.Popen([sys.executable, *argv], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"the two-process run did not finish in {timeout_s:.0f} s")
        outputs.append(out)
    for rank, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {rank} failed:\n{out[-4000:]}"
        for name in names:
            assert f"rank {rank}: {name} ok" in out, out[-4000:]
