"""The progress bar (tqdm) of a chunked run: MCMC's warmup and sampling, SVI's steps."""

from __future__ import annotations

__all__ = ["advance"]


def advance(bar, num: int, postfix: str) -> None:
    """Count `num` more steps on the progress bar `bar`. After the first chunk, whose call also
    compiled the run's program, the bar's clock restarts: its rate and ETA then measure the run
    alone, not compilation (the elapsed time shown counts from there)."""
    bar.set_postfix_str(postfix, refresh=False)
    if bar.n:
        bar.update(num)
        return
    bar.reset()
    bar.n = bar.last_print_n = bar.initial = num  # a rate from later chunks only; ETA "?" until then
    bar.refresh()
