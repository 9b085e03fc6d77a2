"""Model zoo: the six benchmark models of the paper (§7.2) and the control-flow showcase.

Each benchmark module (`models.<name>` for `name` in `BENCHMARK_MODELS`) exposes `NAME`, `SIZES`
(`"quick"`, `"paper"`), `make_data(size, seed) -> (args, kwargs)`, `effppl_model`,
`numpyro_model`, `handwritten_log_density(params, *args, **kwargs)` (unconstrained space) and
`latent_shapes(*args, **kwargs)`. `args` are numpy arrays (data); `kwargs` are static Python
numbers that fix shapes, to be held static under `jax.jit`. `models.showcase` holds the
expressiveness models. Data files are found or fetched by `models._data`.
"""

BENCHMARK_MODELS = ("proportion_test", "stochastic_volatility", "bnn", "hmm", "ucbadmit", "hsgp")
