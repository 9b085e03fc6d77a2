"""Ctrl-C during a chunked run: stop between chunks and keep what was done.

A chunked run (MCMC's warmup and sampling, SVI's steps) waits for each compiled chunk through
`Stopper.wait`, in a helper thread, so that the main thread stays responsive to Ctrl-C (a
`KeyboardInterrupt` is raised in the main thread only; while it blocks inside XLA it would wait
for the chunk to end anyway). The first Ctrl-C lets the chunk in flight finish, so its work is
kept, and stops the run after it has been committed; a second one stops at once, dropping that
chunk. `Stopper.catching()` turns either into `stopper.interrupted = True`, with no traceback.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import signal
import sys
import threading

import jax

__all__ = ["Stopper", "InterruptedWarning"]


class InterruptedWarning(UserWarning):
    """A run was interrupted (Ctrl-C): what it kept, and how to continue."""


class _Stop(Exception):
    """Raised between chunks after a Ctrl-C, once the chunk in flight has been committed."""


@functools.cache
def _waiter() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="effppl-wait")


class Stopper:
    """Ctrl-C handling of one chunked run (see the module's docstring).

    - `wait(outputs)`: `outputs` (a pytree of arrays) once computed.
    - `check()`: after a chunk is committed: stops the run if Ctrl-C was pressed during it.
    - `catching()`: a context in which the run's chunks run; `interrupted` says whether it
      stopped early.
    """

    def __init__(self, api: str):
        self.api = api
        self.requested = False
        self.interrupted = False

    def wait(self, outputs):
        future = _waiter().submit(jax.block_until_ready, outputs)
        try:
            return future.result()
        except KeyboardInterrupt:
            if self.requested:
                raise
            self.requested = True
            print(f"\n{self.api}: interrupted; finishing the chunk in progress to keep it (press "
                  "Ctrl-C again to stop at once) ...", file=sys.stderr, flush=True)
            return future.result()  # a second Ctrl-C raises from here

    def check(self) -> None:
        if self.requested:
            raise _Stop

    @contextlib.contextmanager
    def shielded(self):
        """A block that Ctrl-C does not cut (a checkpoint's save and the bookkeeping of what it
        saved: cut between them, the next save would append the same draws again): a Ctrl-C
        during it counts as a request to stop, seen by the next `check`. Only in the main
        thread (where Python delivers signals); elsewhere the block runs as it is."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)

        def request(signum, frame):
            self.requested = True

        signal.signal(signal.SIGINT, request)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    @contextlib.contextmanager
    def catching(self):
        try:
            yield self
        except (KeyboardInterrupt, _Stop):
            self.interrupted = True
