"""How inference compiles a model, once per structure (private).

- `_cache.py`: the structural cache of compiled functions (model, argument structure, settings).
- `_fns.py`: the compiled functions of one model and argument structure (`ModelFns`).
- `_arguments.py`: model arguments checked and named at the entry points.
- `_chains.py`: a per-chain function mapped over the chain axis (no `vmap` for one chain).
- `_persistent.py`: the on-disk cache of compiled programs across processes.
"""
