"""Random models: effppl against an independent evaluator (and NumPyro), on random model
descriptions (`strategy.models`).

Each description builds an effppl model (`build`); `compare.check` draws its data and a point
with the evaluator's forward sampler and compares `log_density` (value and gradient), the
trace's values and shapes, `potential_energy` (value and gradient) at a standard normal
unconstrained point, `log_likelihood` (one model in 8), and NumPyro's `log_density`/
`potential_energy` where NumPyro can express the model. effppl's programs run eagerly, control
flow in Python (`eager.py`: compiling each random model's programs would take seconds each);
one model in 16 runs them compiled (`jax.jit`).

The `ci` hypothesis profile runs `CI_SHARDS` tests of `CI_EXAMPLES` models each (each shard seeded
with its number, so the runs are reproducible and xdist spreads the shards over its workers:
200 models); `--hypothesis-profile=long` runs the profile's number in one test, and `python -m tests.random_models.long_run --count N` runs N with a
report of every mismatch.
"""

from hypothesis import given, note, seed, settings
from hypothesis import strategies as st

from . import spec as S
from .compare import check
from .strategy import models

CI_EXAMPLES = 20  # models per shard
CI_SHARDS = 10
# the `ci` profile's models are small (CPU time per model grows quickly with the nesting); the
# other profiles and the long run draw the full-sized ones
CI_SIZES = dict(top_size=3, inner_size=2, max_depth=2)


def _profile() -> settings:
    current = settings.default
    assert current is not None
    return current


def _ci() -> bool:
    return _profile().max_examples == settings.get_profile("ci").max_examples


def _examples():
    """`CI_EXAMPLES` under the `ci` profile, else the loaded profile's `max_examples`."""
    return CI_EXAMPLES if _ci() else _profile().max_examples


def _sizes():
    return CI_SIZES if _ci() else {}


def _test(shard: int | None):
    @settings(max_examples=_examples())
    @given(models(**_sizes()), st.integers(0, 2 ** 16))
    def test(model, data_seed):
        note(S.show(model))
        check(model, data_seed, pointwise=data_seed % 8 == 0, compiled=data_seed % 16 == 1)

    return test if shard is None else seed(shard)(test)


if _ci():  # shard 0: hypothesis's derandomized draws; the others seeded with their number
    for _shard in range(CI_SHARDS):
        globals()[f"test_random_models_match_independent_evaluator_shard_{_shard}"] = _test(
            _shard or None)
else:
    test_random_model_matches_independent_evaluator = _test(None)
