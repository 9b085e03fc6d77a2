"""Where a run is cut into compiled chunks: fixed sizes, or, with a checkpoint, sizes that grow
until a chunk takes about `SECONDS`.

A chunk's number of transitions is an argument of the one compiled chunk (`Span.num`), and each
transition's key and adaptation-schedule row are indexed by its step, so where the chunks cut a
run changes no draw (`tests/inference/test_checkpoint.py` and `benchmarks/checkpoint_bench.py`
assert the draws of chunked and unchunked runs equal). A chunk costs a dispatch and a copy of its
draws to the host (a few ms on an idle CPU, 30-60 ms measured on a loaded one, where the
threads handing a chunk over wait for a core), which 100 chunks of a run of a second or two make
a quarter of its time; sizes that follow the time a chunk takes keep that cost to a few percent
of any run, while Ctrl-C and the checkpoint's saves still come within about `SECONDS`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

__all__ = ["Chunks", "SECONDS", "GROWTH"]

SECONDS = 2.0  # what a timed chunk aims to take (at most a fifth of the checkpoint's interval)
GROWTH = 4  # a chunk has at most this many times the transitions of the one before


class Chunks:
    """The sizes of a run's chunks (`spans`).

    **Arguments:** `first`: transitions of the first chunk, and the fewest of any chunk but a
    phase's last; `seconds`: what a chunk aims to take, or `0` for chunks of `first` throughout.
    """

    def __init__(self, first: int, seconds: float = 0.0):
        if first < 1:
            raise ValueError(f"a chunk has at least one transition, not {first}")
        self.first, self.seconds, self._size = first, seconds, first

    def spans(self, start: int, end: int, cap: int | None = None) -> Iterator[tuple[int, int]]:
        """`(start, num)` chunks covering steps `[start, end)`, at most `cap` transitions each.

        With `seconds > 0`, the time between one yield and the next (the caller running the
        chunk) sets the next chunk's size: the transitions that take `seconds` at that chunk's
        pace, at least `first`, at most `GROWTH` times the chunk's."""
        while start < end:
            num = min(self._size, end - start, cap or self._size)
            began = time.perf_counter()
            yield start, num
            if self.seconds > 0:
                took = max(time.perf_counter() - began, 1e-9)
                self._size = max(self.first, min(round(self.seconds * num / took), GROWTH * num))
            start += num
