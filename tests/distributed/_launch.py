"""Run a test script in a fresh Python with N forced CPU devices, or as two local processes of
one `jax.distributed` run (127.0.0.1, a free port, gloo), and read the JSON it prints.

XLA fixes its devices when JAX starts, so multi-device tests run in subprocesses; each process
is killed by its PID when the test's time is up, and its output is kept for the message.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent


def _env(devices: int, **extra) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices} "
               + extra.pop("xla_flags", ""), JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT),
               EFFPPL_CACHE_DIR=os.environ.get("EFFPPL_CACHE_DIR", "off"))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def result(output: str) -> dict:
    """The JSON the script printed on a line starting with `RESULT`."""
    lines = [s for s in output.splitlines() if s.startswith("RESULT")]
    assert lines, f"no RESULT line in the output:\n{output[-4000:]}"
    return json.loads(lines[-1][len("RESULT"):])


def run_script(name: str, *, devices: int, timeout: float, **env) -> dict:
    """Run `tests/distributed/<name>` with `devices` forced CPU devices; its RESULT."""
    proc = subprocess.run([sys.executable, str(HERE / name)], cwd=ROOT, env=_env(devices, **env),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return result(proc.stdout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(name: str, *, num_processes: int = 2, devices: int = 2, timeout: float,
                  **env) -> list:
    """Run `tests/distributed/<name>` as `num_processes` processes of one JAX run (each with
    `devices` CPU devices; `EFFPPL_TEST_COORDINATOR`, `EFFPPL_TEST_PROCESS` and
    `EFFPPL_TEST_NUM_PROCESSES` tell it its place). Returns `[(returncode, stdout, stderr)]`
    per process; processes still running after `timeout` seconds are killed (by PID) and get
    returncode None."""
    address = f"127.0.0.1:{free_port()}"
    procs = []
    try:
        for i in range(num_processes):
            procs.append(subprocess.Popen(
                [sys.executable, str(HERE / name)], cwd=ROOT, text=True,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=_env(devices, EFFPPL_TEST_COORDINATOR=address, EFFPPL_TEST_PROCESS=i,
                         EFFPPL_TEST_NUM_PROCESSES=num_processes, **env)))
        out, deadline = [], time.monotonic() + timeout
        for p in procs:
            try:
                stdout, stderr = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                out.append((p.returncode, stdout, stderr))
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate()
                out.append((None, stdout, stderr))
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
