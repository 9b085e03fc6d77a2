"""The long run of the random models: `python -m tests.random_models.long_run --count 100000`.

Runs `--count` random models (hypothesis draws them, seeded by `--seed`; no shrinking), each through
`compare.check` (one in 8 with `log_likelihood`, one in 16 compiled; `--seconds` stops it early),
and writes one JSON line per mismatch to `--log` (the model's description, its seed, the error) and
a summary line every `--every` models: how many ran, how many mismatched, and the distinct errors
(their kind and first line). Run it on one core:
`taskset -c 0 python -m tests.random_models.long_run`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
import warnings

import jax
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as seeded
from hypothesis import strategies as st


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or '').splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", default="random_models_long_run.jsonl")
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=None,
                        help="stop after this many seconds (the summary counts the models run)")
    args = parser.parse_args(argv)
    os.environ.setdefault("EFFPPL_CACHE_DIR", "off")
    jax.config.update("jax_enable_x64", True)
    warnings.simplefilter("ignore")

    from . import spec as S
    from .compare import check
    from .strategy import models

    state = {"ran": 0, "mismatches": 0, "distinct": {}, "start": time.time()}

    def summary(final=False):
        line = {"ran": state["ran"], "mismatches": state["mismatches"],
                "distinct": state["distinct"], "seconds": round(time.time() - state["start"]),
                "final": final}
        with open(args.log, "a") as f:
            f.write(json.dumps({"summary": line}) + "\n")
        print(json.dumps(line), flush=True)

    class _Stop(Exception):
        pass

    @settings(max_examples=args.count, deadline=None, database=None, derandomize=False,
              phases=["generate"], suppress_health_check=list(HealthCheck))
    @given(models(), st.integers(0, 2 ** 16))
    def one(model, seed):
        if args.seconds is not None and time.time() - state["start"] > args.seconds:
            raise _Stop
        try:
            check(model, seed, pointwise=seed % 8 == 0, compiled=seed % 16 == 1)
        except Exception as err:  # a mismatch, or effppl raising where the evaluator does not
            state["mismatches"] += 1
            head = f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
            state["distinct"][head] = state["distinct"].get(head, 0) + 1
            with open(args.log, "a") as f:
                f.write(json.dumps({"model": S.show(model), "repr": repr(model), "seed": seed,
                                    "error": head, "traceback": traceback.format_exc()[-3000:]})
                        + "\n")
        state["ran"] += 1
        if state["ran"] % args.every == 0:
            summary()

    try:
        seeded(args.seed)(one)()
    except _Stop:
        pass
    summary(final=True)


if __name__ == "__main__":
    main()
