"""`effppl.module`: a stax network's weights as params, named and valued as NumPyro's."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro.nn import AutoregressiveNN

import effppl
from effppl import handlers

NET = AutoregressiveNN(3, [4, 4], permutation=jnp.arange(3))


def _ours():
    return effppl.module("net", NET, (3,))(jnp.array([0.1, -0.2, 0.3]))


def _numpyros():
    return numpyro.module("net", NET, (3,))(jnp.array([0.1, -0.2, 0.3]))


def test_weights_are_params_named_by_numpyros_name_and_leaf_path_and_apply_as_numpyros():
    tr = handlers.trace(handlers.seed(_ours, 0)).get_trace()
    np_weights = numpyro.handlers.trace(numpyro.handlers.seed(_numpyros, 0)).get_trace()[
        "net$params"]["value"]
    leaves = {"net$params" + jax.tree_util.keystr(path): leaf
              for path, leaf in jax.tree_util.tree_flatten_with_path(np_weights)[0]}
    assert {n for n, s in tr.items() if s["type"] == "param"} == set(leaves)
    assert all(tr[n]["value"].shape == leaf.shape for n, leaf in leaves.items())
    ours = handlers.substitute(_ours, data=leaves)()
    theirs = numpyro.handlers.substitute(_numpyros, data={"net$params": np_weights})()
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_bad_arguments_raise_errors_naming_the_module():
    with pytest.raises(effppl.SiteError, match="input_shape"):
        handlers.seed(lambda: effppl.module("net", NET), 0)()
    with pytest.raises(effppl.SiteError, match=r"'net'.*\(init_fn, apply_fn\)"):
        handlers.seed(lambda: effppl.module("net", (1, 2), (3,)), 0)()
