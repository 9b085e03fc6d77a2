"""`python -m benchmarks`: the paper's Tables 1 and 2 for effppl, NumPyro, Oryx, hand-written JAX.

Exit status: 0 when every log density agrees and nothing failed; 1 when log densities disagree or
a framework raised (the JSON and tables are written first); 2 on a bad command line.
"""

import argparse
import os
import sys
from pathlib import Path

import jax

from . import _config
from ._errors import AgreementError, BenchmarkConfigError


def _names(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected at least one name, but got {text!r}")
    return names


def _unwritable(path):
    """Why a file cannot be written at `path` (its folder is created if missing), or `None`."""
    if path.is_dir():
        return "is a folder; give a file name"
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK):
        return f"folder {folder} is not writable"
    # `os.access` says yes to root everywhere, and some folders (/proc, a read-only mount) refuse
    # new files whatever it says: create the file (and its folders) to be sure, then remove it.
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as err:
        return f"cannot be written ({err.strerror or err})"
    if not existed:
        path.unlink()
    return None


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="effppl vs NumPyro vs Oryx vs hand-written JAX: log-density runtime and "
                    "compile time (paper §7.2, Tables 1 and 2), agreement, and end-to-end NUTS.")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="small data, N=200 evaluations, short NUTS (default)")
    size.add_argument("--paper", dest="mode", action="store_const", const="paper",
                      help="the paper's data sizes and N=100,000 evaluations")
    parser.set_defaults(mode="quick")
    parser.add_argument("--models", type=_names, default=list(_config.MODEL_NAMES),
                        help=f"comma-separated subset of {','.join(_config.MODEL_NAMES)}")
    parser.add_argument("--frameworks", type=_names, default=list(_config.FRAMEWORKS),
                        help=f"comma-separated subset of {','.join(_config.FRAMEWORKS)}")
    parser.add_argument("--json", default=None,
                        help="where to write the results (default benchmarks/results/"
                             "<mode>_<backend>.json)")
    parser.add_argument("--plot", default=None,
                        help="where to write the PNG chart (default: beside the JSON)")
    parser.add_argument("--nuts", action=argparse.BooleanOptionalAction, default=True,
                        help="run the end-to-end NUTS comparison (default on)")
    parser.add_argument("--num-evals", type=int, default=None,
                        help="override N, the number of timed evaluations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--oryx-venv", default=None,
                        help="folder of the pinned Oryx environment (default "
                             "benchmarks/.oryx-venv)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    return parser.parse_args(argv)


def main(argv=None):
    import benchmarks

    args = parse_args(argv)
    try:
        config = benchmarks.make_config(
            args.mode, models=args.models, frameworks=args.frameworks, nuts=args.nuts,
            seed=args.seed, num_evals=args.num_evals,
            oryx_venv=args.oryx_venv or benchmarks.DEFAULT_VENV, progress=args.progress)
    except BenchmarkConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    default = Path(__file__).resolve().parent / "results" / f"{args.mode}_{jax.default_backend()}"
    json_path = Path(args.json) if args.json else default.with_suffix(".json")
    plot_path = Path(args.plot) if args.plot else json_path.with_suffix(".png")
    for flag, path in (("--json", json_path), ("--plot", plot_path)):
        problem = _unwritable(path)
        if problem:  # found before hours of measuring, not after
            print(f"error: {flag} {path}: {problem}", file=sys.stderr)
            return 2

    results = benchmarks.run(config, log=lambda m: print(m, file=sys.stderr),
                             on_model=lambda partial: benchmarks.write_json(partial, json_path))
    print(benchmarks.render(results))
    benchmarks.write_json(results, json_path)
    print(f"\nresults: {json_path}")
    status = 0
    try:
        benchmarks.plot(results, plot_path)
        print(f"chart:   {plot_path}")
    except ImportError as err:
        print(f"chart:   not drawn ({err}; pip install matplotlib)")
    except OSError as err:
        print(f"\nerror: --plot {plot_path}: the chart could not be written ({err})",
              file=sys.stderr)
        status = 1
    failed = [f"{m}/{fw}" for m, model in results["models"].items()
              for fw, row in {**model.get("frameworks", {}),
                              **{f"nuts:{k}": v for k, v in model.get("nuts", {}).items()
                                 if isinstance(v, dict) and "status" in v}}.items()
              if row.get("status") == "error"]
    if failed:
        print(f"\nerror: these raised (see the JSON for tracebacks): {', '.join(failed)}",
              file=sys.stderr)
        status = 1
    try:
        benchmarks.check(results)
    except AgreementError as err:
        print(f"\nerror: {err}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
