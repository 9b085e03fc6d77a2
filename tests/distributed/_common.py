"""What the multi-device test scripts share: a model, its data, and reading XLA's dumps."""

import glob
import os
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import effppl
from effppl import distributions as dist
from effppl.infer import MCMC, NUTS

N, WARMUP, SAMPLES = 16, 30, 30
COLLECTIVES = ("all-reduce", "all-gather", "collective-permute", "all-to-all", "reduce-scatter")


def logistic(x, y=None):
    """Logistic regression: w ~ N(0, I), b ~ N(0, 1), y_i ~ Bernoulli(logit = x_i w + b)."""
    w = effppl.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    b = effppl.sample("b", dist.Normal(0.0, 1.0))
    with effppl.plate("n", x.shape[0]):
        effppl.sample("y", dist.Bernoulli(logits=jnp.dot(x, w) + b), obs=y)


def local_latent(x, y=None):
    """A latent site per row (inside the plate over the data rows)."""
    s = effppl.sample("s", dist.HalfNormal(1.0))
    with effppl.plate("n", x.shape[0]):
        z = effppl.sample("z", dist.Normal(0.0, s))
        effppl.sample("y", dist.Bernoulli(logits=z + x[:, 0]), obs=y)


def subsampled(x, y):
    """Logistic regression whose plate draws 4 of the rows."""
    w = effppl.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
    with effppl.plate("n", x.shape[0], subsample_size=4) as idx:
        effppl.sample("y", dist.Bernoulli(logits=jnp.dot(x[idx], w)), obs=y[idx])


def data(n=N, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(x @ np.array([1.0, -0.5]) + 0.3)))).astype(
        np.float64)
    return x, y


def run(args, *, num_chains, key=0, **kw):
    """An MCMC run of `logistic` (NUTS, short chains); its draws `[chain, draw]` as numpy."""
    mcmc = MCMC(NUTS(logistic), num_warmup=WARMUP, num_samples=SAMPLES, num_chains=num_chains,
                progress_bar=False, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.key(key), *args)
    return mcmc


def draws(mcmc):
    return {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}


def max_diff(a, b, chains=slice(None)):
    return max(float(np.max(np.abs(a[k][chains] - b[k][chains]))) for k in a)


def dumped(folder):
    """`{module file: {collective: count}}` of the optimized HLO modules XLA dumped."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "*after_optimizations.txt"))):
        text = open(f).read()
        out[os.path.basename(f)] = {c: len(re.findall(rf"\b{c}(-start)?\(", text))
                                    for c in COLLECTIVES}
    return out


def new_modules(folder, before, name):
    """The modules named `jit_<name>` dumped since `before` (a previous `dumped`)."""
    return {f: v for f, v in dumped(folder).items()
            if f not in before and re.search(rf"\.jit_{name}\.", f)}


def modules_since(folder, before):
    """`{program name: {collective: count}}` of the modules dumped since `before`, the
    largest count of each collective where a name was compiled more than once."""
    out: dict = {}
    for f, counts in dumped(folder).items():
        if f not in before:
            name = f.split(".")[1]
            out[name] = {k: max(v, out.get(name, {}).get(k, 0)) for k, v in counts.items()}
    return out
