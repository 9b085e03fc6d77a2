"""A model argument that is an unhashable object with hashable attributes (NumPyro's examples
pass their `argparse.Namespace`: `mcmc.run(key, data, args=args)`) keys the compiled functions by
its attributes. Oracle: NumPyro's potential for the same model and arguments."""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.infer.util import initialize_model as numpyro_initialize

import effppl
from effppl import distributions as dist
from effppl.infer.util import initialize_model

Y = np.array([0.3, -1.2, 2.5, 0.7])


def make(ppl):
    def model(y, args):
        loc = ppl.sample("loc", dist.Normal(0.0, args.prior_scale))
        with ppl.plate("data", args.num_data):
            ppl.sample("y", dist.Normal(loc, 1.0), obs=y[:args.num_data])
    return model


def test_namespace_argument_keys_by_its_attributes_and_matches_numpyro():
    args = argparse.Namespace(prior_scale=2.0, num_data=3)
    with pytest.raises(TypeError):
        hash(args)  # the case at hand: argparse.Namespace defines __eq__ and no __hash__
    u = {"loc": jnp.asarray(0.4)}
    values = []
    for _ in range(2):  # the second time, a changed attribute must not reuse the first build
        ours = initialize_model(jax.random.key(0), make(effppl), model_args=(Y,),
                                model_kwargs={"args": args})
        theirs = numpyro_initialize(jax.random.key(0), make(numpyro), model_args=(Y,),
                                    model_kwargs={"args": args})
        values.append(ours.potential_fn(u))
        np.testing.assert_allclose(values[-1], theirs.potential_fn(u), rtol=1e-12)
        args.prior_scale, args.num_data = 0.5, 4
    assert not np.isclose(values[0], values[1])


def test_object_with_unhashable_attributes_is_still_an_error():
    args = argparse.Namespace(sizes=[1, 2])
    with pytest.raises(effppl.infer.UnhashableArgumentError, match="Namespace"):
        initialize_model(jax.random.key(0), make(effppl), model_args=(Y,),
                         model_kwargs={"args": args})
