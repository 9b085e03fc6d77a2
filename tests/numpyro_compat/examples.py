"""Run NumPyro's examples on effppl with their imports swapped, at tiny sizes.

    python -m tests.numpyro_compat.examples NUMPYRO_SRC [--only ar2 bnn ...] [--timeout 600]
                                            [--data-dir DIR]

`NUMPYRO_SRC` is a checkout of github.com/pyro-ppl/numpyro (its `examples/` folder is read).
Each example's imports are rewritten, nothing else: `import numpyro` becomes `import effppl as
numpyro`, and `numpyro.X` becomes `effppl.X` in `import`/`from` statements wherever effppl has
the module `effppl.X` (modules effppl does not mirror, e.g. `numpyro.examples.datasets`, stay
NumPyro's, and are listed). The only other edit: each example's pin of the NumPyro release it
was written for (`assert numpyro.__version__.startswith(...)`, which the installed NumPyro fails
too) is dropped. The rewritten example runs in a subprocess with small sizes (its own
argparse flags), and the script prints one line per example: ok/FAIL, seconds, and the last line
of the error. Results and reasons: `tests/numpyro_compat/README_examples.md`. This is an
acceptance script, not a pytest module (the examples are not part of this repository).
"""

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# example -> tiny-size flags (the examples' own argparse flags)
EXAMPLES = {
    "ar2": "--num-samples 10 --num-warmup 10 --num-data 50",
    "bnn": "--num-samples 10 --num-warmup 10 --num-data 20 --num-hidden 3",
    "gp": "--num-samples 10 --num-warmup 10 --num-data 10 --thinning 1",
    "hmm": "--num-samples 10 --num-warmup 10 --num-supervised 20 --num-unsupervised 30",
    "holt_winters": "--num-samples 10 --num-warmup 10",
    "horseshoe_regression": "--num-samples 10 --num-warmup 10 --num-data 20",
    "proportion_test": "--num-samples 10 --num-warmup 10",
    "sparse_regression": ("--num-samples 10 --num-warmup 10 --num-data 20 --num-dimensions 6 "
                          "--active-dimensions 2"),
    "var2": "--num-samples 10 --num-warmup 10 --num-data 30",
    "funnel": "--num-samples 10 --num-warmup 10",
    # SVI and enumeration
    "toy_mixture_model_discrete_enumeration": "--num-steps 20 --num-obs 100",
    "annotation": "--num-samples 10 --num-warmup 10",
    "minipyro": "--num-steps 1001",
    # these read NumPyro's data sets (`numpyro.examples.datasets`): pass `--data-dir`
    "stochastic_volatility": "--num-samples 10 --num-warmup 10",
    "ucbadmit": "--num-samples 10 --num-warmup 10",
}

_IMPORT = re.compile(r"^(?P<indent>[ \t]*)import (?P<mod>numpyro(?:\.[\w.]+)?)(?P<alias> as \w+)?[ \t]*$",
                     re.M)
# Each example pins the NumPyro release it was written for (`assert numpyro.__version__
# .startswith("0.21.0")`), which NumPyro 0.22 fails as well: that line alone is dropped.
_VERSION = re.compile(r"^(?P<indent>[ \t]*)assert numpyro\.__version__.*$", re.M)
_FROM = re.compile(r"^(?P<indent>[ \t]*)from (?P<mod>numpyro(?:\.[\w.]+)?) import ", re.M)


def _mirrored(module: str) -> bool:
    name = "effppl" + module[len("numpyro"):]
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def rewrite(source: str) -> tuple[str, list]:
    """`(new source, modules kept as NumPyro's)`: the import swap, nothing else."""
    kept = []

    def imp(m):
        mod, alias = m["mod"], m["alias"]
        if mod == "numpyro":
            return f"{m['indent']}import effppl as numpyro"
        if not _mirrored(mod):
            kept.append(mod)
            return m[0]
        if alias:
            return f"{m['indent']}import effppl{mod[len('numpyro'):]}{alias}"
        kept.append(mod)  # `import numpyro.x` binds `numpyro`: keep it NumPyro's
        return m[0]

    def frm(m):
        mod = m["mod"]
        if not _mirrored(mod):
            kept.append(mod)
            return m[0]
        return f"{m['indent']}from effppl{mod[len('numpyro'):]} import "

    source = _IMPORT.sub(imp, source)
    source = _FROM.sub(frm, source)
    source = _VERSION.sub(r"\g<indent>pass  # NumPyro version pin dropped", source)
    return source, sorted(set(kept))


def run(name: str, src_dir: str, flags: str, timeout: int, workdir: str, data_dir=None) -> dict:
    with open(os.path.join(src_dir, f"{name}.py")) as f:
        source, kept = rewrite(f.read())
    path = os.path.join(workdir, f"{name}.py")
    with open(path, "w") as f:
        f.write(source)
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=ROOT + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    if data_dir:  # NumPyro reads its data sets from ~/.data when CI is set: point it there
        home = os.path.join(workdir, "home")
        os.makedirs(os.path.join(home, ".data"), exist_ok=True)
        for file in os.listdir(data_dir):
            link = os.path.join(home, ".data", file)
            if not os.path.exists(link):
                os.symlink(os.path.join(os.path.abspath(data_dir), file), link)
        env.update(CI="1", HOME=home)
    start = time.time()
    try:
        proc = subprocess.run([sys.executable, path, *flags.split()], cwd=workdir, env=env,
                              capture_output=True, text=True, timeout=timeout)
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired:
        rc, err = "timeout", ""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    reason = "" if rc == 0 else (lines[-1] if lines else str(rc))
    return {"name": name, "ok": rc == 0, "seconds": round(time.time() - start, 1),
            "kept": kept, "reason": reason}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numpyro_src", help="a checkout of github.com/pyro-ppl/numpyro")
    parser.add_argument("--only", nargs="*", default=list(EXAMPLES))
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--data-dir", default=None,
                        help="a folder holding NumPyro's data set files (SP500.csv, ...) to use "
                             "instead of downloading them")
    args = parser.parse_args(argv)
    src_dir = os.path.join(args.numpyro_src, "examples")
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.only:
            r = run(name, src_dir, EXAMPLES.get(name, ""), args.timeout, workdir, args.data_dir)
            results.append(r)
            kept = f" (kept NumPyro's {', '.join(r['kept'])})" if r["kept"] else ""
            print(f"{'ok  ' if r['ok'] else 'FAIL'} {name:24s} {r['seconds']:7.1f}s{kept} "
                  f"{r['reason']}", flush=True)
    print(f"{sum(r['ok'] for r in results)} of {len(results)} examples ran.")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
