"""The cost of checkpoints: `MCMC.run` with and without `checkpoint=` on the six harness models.

Per model (`models/`, the harness's data of `--size`), in one process, NUTS with the harness's
settings of `--mode` (`quick`: 100 warmup steps, 100 draws, 2 chains, tree depth 6; `paper`: 500,
1000, 4 chains, depth 10), `progress_bar=False`, three variants:

- `plain`: `mcmc.run(key, ...)` without a checkpoint (each phase one compiled call: the fastest
  way effppl runs);
- `checkpoint`: the same with `checkpoint=Checkpoint(<fresh folder>, every=--every)` (default:
  the default interval, 10 s): compiled chunks growing from a hundredth of the run until one
  takes about 2 s, the saves that interval asks for and the last one, a fresh store each run
  (its creation counted);
- `every_chunk`: `Checkpoint(<fresh folder>, every=0)`: 100 chunks of a hundredth of the run
  and a save after each, the most a checkpoint can cost.

All compile first (one untimed run each), then run `--repeats` times in alternation (keys 1,
2, ...), so a change in the machine's load falls on all alike. Reported per model: the median
wall and CPU seconds (`time.process_time`, all threads) of each, the overhead against `plain`
(median / median of `plain` - 1) in wall and CPU time, the same per chunk (the extra wall time
divided by the variant's chunks, counted, in ms), the saves per run and the seconds they took (timed inside
the store, so the machine's load moves them least). The draws of all variants must be equal
(asserted).

Usage: `python -m benchmarks.checkpoint_bench [--mode quick|paper] [--size quick]
[--models proportion_test,hmm] [--repeats 3] [--every 10] [--variants plain,checkpoint]
[--json PATH]`.
"""

import argparse
import json
import platform
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import jax
import numpy as np

from ._config import MODEL_NAMES, MODES

RESULTS = Path(__file__).resolve().parent / "results"


def _instrumented():
    """Patch the checkpoint store to add up the seconds its saves take, and the run's record to
    count its chunks: `(seconds, chunks, undo)` (the lists are appended to)."""
    from effppl.infer import _checkpoint_store as _checkpoint
    from effppl.infer.mcmc._checkpoint import RunRecord

    seconds, chunks, save, wait = [], [], _checkpoint.Store.save, RunRecord.wait

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        save(self, *args, **kwargs)
        seconds.append(time.perf_counter() - start)

    def counted(self, *args, **kwargs):
        chunks.append(1)
        return wait(self, *args, **kwargs)

    _checkpoint.Store.save, RunRecord.wait = timed, counted

    def undo():
        _checkpoint.Store.save, RunRecord.wait = save, wait

    return seconds, chunks, undo


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench_model(name, mode, size, repeats, every, folder, variants=("checkpoint", "every_chunk")):
    import importlib

    from effppl.infer import MCMC, NUTS, Checkpoint, DivergenceWarning

    module = importlib.import_module(f"models.{name}")
    args, kwargs = module.make_data(size)
    mcmc = MCMC(NUTS(module.effppl_model, max_tree_depth=mode.max_tree_depth),
                num_warmup=mode.num_warmup, num_samples=mode.num_samples,
                num_chains=mode.num_chains, progress_bar=False)
    runs = iter(range(10_000))
    every_of = {"plain": None, "checkpoint": every, "every_chunk": 0.0}
    every_of = {v: e for v, e in every_of.items() if v == "plain" or v in variants}

    def run(key, variant):
        path = None if every_of[variant] is None else \
            Checkpoint(folder / f"{name}-{next(runs)}.zarr", every=every_of[variant])
        mcmc.run(jax.random.key(key), *args, checkpoint=path, **kwargs)
        return jax.block_until_ready(mcmc.get_samples(group_by_chain=True))

    seconds, chunks, undo = _instrumented()
    figures = {v: [] for v in every_of}
    saves = {v: [] for v in every_of if v != "plain"}
    counts = {v: [] for v in saves}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DivergenceWarning)
            first = {v: _timed(lambda v=v: run(0, v)) for v in every_of}
            for key in range(1, repeats + 1):
                draws = {}
                for variant in every_of:
                    seconds.clear()
                    chunks.clear()
                    figures[variant].append(_timed(
                        lambda v=variant: draws.__setitem__(v, run(key, v))))
                    if variant in saves:
                        saves[variant].append((len(seconds), sum(seconds)))
                        counts[variant].append(len(chunks))
                for variant in saves:
                    for site, value in draws["plain"].items():
                        np.testing.assert_array_equal(np.asarray(value),
                                                      np.asarray(draws[variant][site]))
    finally:
        undo()
    med = {v: [statistics.median(x[i] for x in figures[v]) for i in (0, 1)] for v in figures}
    row = {"model": name, "draws_equal": True,
           "first_run_wall_s": {v: first[v][0] for v in first},
           "all_wall_s": {v: [x[0] for x in figures[v]] for v in figures}}
    for v in every_of:
        row[f"{v}_wall_s"], row[f"{v}_cpu_s"] = med[v]
    for v in saves:
        row[f"{v}_wall_overhead"] = med[v][0] / med["plain"][0] - 1
        row[f"{v}_cpu_overhead"] = med[v][1] / med["plain"][1] - 1
        row[f"{v}_chunks"] = statistics.median(counts[v])
        row[f"{v}_ms_per_chunk"] = 1e3 * (med[v][0] - med["plain"][0]) / row[f"{v}_chunks"]
        row[f"{v}_saves_per_run"] = statistics.median(n for n, _ in saves[v])
        row[f"{v}_saving_s"] = statistics.median(s for _, s in saves[v])
        row[f"{v}_saving_share"] = row[f"{v}_saving_s"] / med[v][0]
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=sorted(MODES), default="paper")
    parser.add_argument("--size", default="quick", help="the models' data size (make_data)")
    parser.add_argument("--models", default=",".join(MODEL_NAMES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--every", type=float, default=10.0,
                        help="seconds between saves (Checkpoint.every; default its default)")
    parser.add_argument("--variants", default="checkpoint,every_chunk",
                        help="variants timed beside `plain`")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    mode = MODES[args.mode]
    rows = []
    out = Path(args.json) if args.json else RESULTS / f"checkpoint_{args.mode}_cpu.json"
    with tempfile.TemporaryDirectory(prefix="effppl-checkpoint-bench-") as folder:
        for name in args.models.split(","):
            variants = [v for v in args.variants.split(",") if v != "plain"]
            row = bench_model(name, mode, args.size, args.repeats, args.every, Path(folder),
                              variants)
            rows.append(row)
            print(f"{name:22s} plain {row['plain_wall_s']:7.2f} s", end="")
            for v in variants:
                print(f" | {v} {row[f'{v}_wall_s']:7.2f} s wall {row[f'{v}_wall_overhead']:+6.1%}"
                      f" cpu {row[f'{v}_cpu_overhead']:+6.1%}"
                      f" {row[f'{v}_chunks']:.0f} chunks {row[f'{v}_ms_per_chunk']:+6.1f} ms/chunk,"
                      f" {row[f'{v}_saves_per_run']:.0f} saves {row[f'{v}_saving_s']:.3f} s",
                      end="")
            print(flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({
                "benchmark": "checkpoint_bench", "mode": mode._asdict(), "size": args.size,
                "every_s": args.every, "repeats": args.repeats,
                "machine": platform.platform(), "cpu_count": __import__("os").cpu_count(),
                "jax": jax.__version__, "dtype": str(jax.numpy.asarray(1.0).dtype),
                "models": rows}, indent=1))
    print(f"results: {out}")


if __name__ == "__main__":
    main()
