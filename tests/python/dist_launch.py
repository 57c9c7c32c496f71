"""Starting real multi-process jobs for the distributed tests: torchrun (python -m
torch.distributed.run) on a free localhost port, or the ranks as plain processes when torchrun's
own policy would get in the way (it kills every rank as soon as one dies)."""
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKERS = os.path.join(HERE, "dist_workers")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    # The workers import torch_npu from this checkout (its compiled parts from the install).
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def worker(name: str) -> str:
    return os.path.join(WORKERS, name)


def start(cmd: list[str], env: dict) -> subprocess.Popen:
    # A session of its own: on a timeout the whole job (torchrun and its ranks) is killed, so
    # no rank outlives the test holding the output pipe open.
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=REPO, start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> subprocess.CompletedProcess:
    """Waits for `proc`; past `timeout` kills its whole process group and raises
    TimeoutExpired with the output so far."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        out, _ = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, output=out) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out)


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def torchrun(script: str, nproc: int, *args: str, env: dict | None = None, timeout: float = 240,
             nnodes: int = 1, node_rank: int = 0, port: int | None = None,
             popen: bool = False):
    """Runs `script` under torchrun; returns the CompletedProcess (stdout and stderr joined),
    or the Popen when popen=True (then finish() it)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
           f"--nnodes={nnodes}", f"--node_rank={node_rank}", "--master_addr=127.0.0.1",
           f"--master_port={port or free_port()}", script, *args]
    proc = start(cmd, job_env(env))
    return proc if popen else finish(proc, timeout)


def ranks(script: str, world: int, *args: str, env: dict | None = None, timeout: float = 120):
    """Starts the ranks of `script` as plain processes (the environment torchrun would give
    them); returns [(returncode, output)] per rank and the wall time until all ended."""
    port = free_port()
    procs = []
    began = time.monotonic()
    for rank in range(world):
        rank_env = job_env(env)
        rank_env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port))
        procs.append(start([sys.executable, script, *args], rank_env))
    results = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, timeout - (time.monotonic() - began)))
            results.append((p.returncode, out))
    finally:
        for p in procs:
            if p.poll() is None:
                kill(p)
                p.wait()
    return results, time.monotonic() - began
