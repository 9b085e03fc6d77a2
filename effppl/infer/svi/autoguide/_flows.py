"""The normalizing-flow autoguides over the flat unconstrained latent vector (NumPyro's
`AutoIAFNormal`, `AutoBNAFNormal`): a standard normal pushed through NumPyro's flow transforms,
whose networks (NumPyro's `AutoregressiveNN`, `BlockNeuralAutoregressiveNN`) are registered with
`effppl.module`, so their weights are params named as NumPyro's (leaf by leaf, see `module`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from jax.example_libraries import stax
from numpyro.distributions.flows import (
    BlockNeuralAutoregressiveTransform,
    InverseAutoregressiveTransform,
)
from numpyro.distributions.transforms import ComposeTransform, PermuteTransform
from numpyro.nn import AutoregressiveNN, BlockNeuralAutoregressiveNN

from ....handlers.internal import module, module_param_names, raw_key, sample
from ..._init import init_to_uniform
from ._continuous import AutoContinuous
from ._errors import AutoGuideError

__all__ = ["AutoIAFNormal", "AutoBNAFNormal"]


class _AutoFlow(AutoContinuous):
    """`AutoContinuous` guides whose flat latent is `TransformedDistribution(Normal(0, 1)^D,
    flows)`; a subclass gives the networks (`_networks`) and the transform of each
    (`_transform`)."""

    def __init__(self, model, *, prefix, init_loc_fn, num_flows):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn)
        if isinstance(num_flows, bool) or not isinstance(num_flows, int) or num_flows < 1:
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}(num_flows="
                                 f"{num_flows!r}) expected an int >= 1.")
        self.num_flows = num_flows

    def _networks(self, d) -> list:
        """The stax `(init_fn, apply_fn)` network of each flow, for a latent of size `d`."""
        raise NotImplementedError

    def _transform(self, i, network):
        """Flow `i`'s transform, given its network with bound weights."""
        raise NotImplementedError

    def _checked_dim(self, d):
        if d == 1:  # as NumPyro's (a ValueError)
            raise AutoGuideError(f"effppl.infer.autoguide.{type(self).__name__}: the model's "
                                 f"latent dim = 1. Consider using AutoDiagonalNormal instead "
                                 f"(a flow of one coordinate is an affine map).")
        return d

    def _flows(self, d, bind):
        """The flow transforms (reversing permutations between them, as NumPyro's), each
        network bound by `bind(name, network)`."""
        transforms = []
        for i, network in enumerate(self._networks(d)):
            if i > 0:
                transforms.append(PermuteTransform(jnp.arange(d)[::-1]))
            transforms.append(self._transform(i, bind(f"{self.prefix}_arn__{i}", network)))
        return transforms

    @staticmethod
    def _base_dist(d):
        return dist.Normal(jnp.zeros(d), 1.0).to_event(1)

    def _base(self, flat_init):
        d = self._checked_dim(flat_init.shape[0])
        return dist.TransformedDistribution(
            self._base_dist(d), self._flows(d, lambda name, nn: module(name, nn, (d,))))

    def __call__(self, *args, **kwargs):
        sites = self._latent_sites(args, kwargs)
        layout = self._layout(sites)
        init = self._init_locs(args, kwargs, sites, self._init_key(args, kwargs, sites))
        flat_init = jnp.concatenate([jnp.ravel(init[n]) for n, _, _ in layout])
        posterior = self._base(flat_init)
        # The draw keeps its intermediates, as NumPyro's sample sites do, so its log density
        # needs no inverse of the flow (BNAF has none): the site is a Delta carrying it.
        x, intermediates = posterior.sample_with_intermediates(raw_key(f"_{self.prefix}_latent"))
        log_q = posterior.log_prob(x, intermediates)
        latent = sample(f"_{self.prefix}_latent", dist.Delta(x, log_density=log_q, event_dim=1))
        values, log_dets, _ = self._constrain(args, kwargs, self._unpack(latent, layout), sites)
        return self._emit(values, sites, {n: -log_dets[n] for n in values})

    def _network_shapes(self, d) -> dict:
        """`{param name: shape}` of every network's weights (`effppl.module`'s names, less the
        guide's prefix)."""
        return {leaf[len(self.prefix) + 1:]: shape
                for i, (nn_init, _) in enumerate(self._networks(d))
                for leaf, shape in module_param_names(f"{self.prefix}_arn__{i}", nn_init,
                                                      (d,))[0]}

    def _param_shapes(self, size):
        return self._network_shapes(size) if size > 1 else {}

    @staticmethod
    def _bind(params, d):
        """`bind(name, network)` reading the weights of a network on `(d,)` inputs from `params`
        (`effppl.module`'s names)."""
        def bind(name, network):
            nn_init, nn_apply = network
            names, treedef = module_param_names(name, nn_init, (d,))
            bound = jax.tree_util.tree_unflatten(treedef, [params[n] for n, _ in names])
            return lambda *a, **kw: nn_apply(bound, *a, **kw)
        return bind

    def _checked_size(self, api, params):
        layout = self._checked_layout(api, params)
        return self._checked_dim(sum(n for _, _, n in layout))

    def get_base_dist(self):
        """The base of the guide's posterior: `Normal(0, 1)` over the flat latent (event shape
        `(D,)`, D the guide's latent size). **Raises:** `AutoGuideError` before the guide has
        run (as `median`)."""
        return self._base_dist(sum(n for _, _, n in self._layout_now()))

    def get_transform(self, params):
        """The flow at `params` (a `ComposeTransform` of the flows and permutations) mapping
        base draws `(..., D)` to the flat unconstrained latent. **Raises:** as `median` would:
        `MissingParamError`, `ParamTypeError`, `AutoGuideError` naming the param."""
        d = self._checked_size("get_transform", params)
        return ComposeTransform(self._flows(d, self._bind(params, d)))

    def get_posterior(self, params):
        """`TransformedDistribution(get_base_dist(), get_transform(params))`: the guide's
        distribution of the flat unconstrained latent (event shape `(D,)`). **Raises:** as
        `get_transform`."""
        d = self._checked_size("get_posterior", params)
        return dist.TransformedDistribution(self._base_dist(d), self.get_transform(params))

    def median(self, params):
        """Not defined for a flow guide, as NumPyro's (`NotImplementedError`): use
        `sample_posterior` and summarise the draws."""
        raise NotImplementedError(f"{type(self).__name__} has no median (as NumPyro's): use "
                                  f"`sample_posterior(key, params, sample_shape=(n,))` and take "
                                  f"the draws' median.")

    def quantiles(self, params, quantiles):
        """Not defined for a flow guide, as NumPyro's (`NotImplementedError`): use
        `sample_posterior` and the draws' quantiles."""
        raise NotImplementedError(f"{type(self).__name__} has no quantiles (as NumPyro's): use "
                                  f"`sample_posterior(key, params, sample_shape=(n,))` and take "
                                  f"the draws' quantiles.")


def _positive_ints(guide, name, value):
    ok = (isinstance(value, (list, tuple)) and len(value) > 0
          and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in value))
    if not ok:
        raise AutoGuideError(f"effppl.infer.autoguide.{guide}({name}={value!r:.60}) expected a "
                             f"non-empty list of positive ints.")
    return tuple(value)


class AutoIAFNormal(_AutoFlow):
    """An inverse autoregressive flow guide over the flat unconstrained latent vector (size D):
    a standard normal `(D,)` pushed through `num_flows` NumPyro
    `InverseAutoregressiveTransform`s (each with a NumPyro `AutoregressiveNN`), with the order of
    the dimensions reversed between flows, as NumPyro's `AutoIAFNormal`. The guide does not
    depend on the model's arguments.

    **Arguments:** `model`; `prefix` (str); `init_loc_fn` (sets up the guide's prototype; the
    flow does not start at it, as NumPyro's); `num_flows` (int >= 1, default 3); `hidden_dims`:
    the hidden layer sizes of each network (list of positive ints; default `[D, D]`);
    `skip_connections` (bool, default False); `nonlinearity`: a stax layer (default
    `stax.Elu`).

    **Params:** the weights of flow `i`'s network, NumPyro's `{prefix}_arn__{i}$params`,
    registered leaf by leaf by `effppl.module` (`auto_arn__0$params[0][0]`: the first layer's
    weight matrix `(D, hidden_dims[0])`, ...).

    **Raises:** `AutoGuideError` (a `ValueError`) naming the argument for `num_flows` not an int
    >= 1, `hidden_dims` not None nor a list of positive ints, `skip_connections` not a bool,
    `nonlinearity` not a stax `(init_fn, apply_fn)` pair; and, when the guide runs, for a model
    whose latent size is 1 (as NumPyro's ValueError). `median` and `quantiles` raise
    `NotImplementedError`, as NumPyro's: use `sample_posterior`.

    **References:** NumPyro's `AutoIAFNormal`; Kingma et al. (2016), "Improved Variational
    Inference with Inverse Autoregressive Flow".
    """

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, num_flows=3,
                 hidden_dims=None, skip_connections=False, nonlinearity=stax.Elu):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn, num_flows=num_flows)
        name = type(self).__name__
        self._hidden_dims = (None if hidden_dims is None
                             else _positive_ints(name, "hidden_dims", hidden_dims))
        if not isinstance(skip_connections, bool):
            raise AutoGuideError(f"effppl.infer.autoguide.{name}(skip_connections="
                                 f"{skip_connections!r:.60}) expected a bool.")
        if not (isinstance(nonlinearity, tuple) and len(nonlinearity) == 2
                and all(callable(f) for f in nonlinearity)):
            raise AutoGuideError(f"effppl.infer.autoguide.{name}(nonlinearity="
                                 f"{nonlinearity!r:.60}) expected a stax layer, an `(init_fn, "
                                 f"apply_fn)` pair such as `stax.Elu`.")
        self._skip_connections = skip_connections
        self._nonlinearity = nonlinearity

    def _networks(self, d):
        hidden = [d, d] if self._hidden_dims is None else list(self._hidden_dims)
        return [AutoregressiveNN(d, hidden, permutation=jnp.arange(d),
                                 skip_connections=self._skip_connections,
                                 nonlinearity=self._nonlinearity)
                for _ in range(self.num_flows)]

    def _transform(self, i, network):
        return InverseAutoregressiveTransform(network)


class AutoBNAFNormal(_AutoFlow):
    """A block neural autoregressive flow guide over the flat unconstrained latent vector (size
    D): a standard normal `(D,)` pushed through `num_flows` NumPyro
    `BlockNeuralAutoregressiveTransform`s (each with a NumPyro `BlockNeuralAutoregressiveNN`,
    gated residual on all but the last), with the order of the dimensions reversed between
    flows, as NumPyro's `AutoBNAFNormal`. The guide does not depend on the model's arguments.

    **Arguments:** `model`; `prefix` (str); `init_loc_fn` (sets up the guide's prototype);
    `num_flows` (int >= 1, default 1); `hidden_factors`: hidden layer `j` has
    `hidden_factors[j]` units per latent dimension (list of positive ints, default `[8, 8]`).

    **Params:** the weights of flow `i`'s network, NumPyro's `{prefix}_arn__{i}$params`,
    registered leaf by leaf by `effppl.module` (`auto_arn__0$params[0][0]`, ...).

    **Raises:** `AutoGuideError` (a `ValueError`) naming the argument for `num_flows` not an int
    >= 1 or `hidden_factors` not a non-empty list of positive ints; and, when the guide runs,
    for a model whose latent size is 1 (as NumPyro's ValueError). `median` and `quantiles`
    raise `NotImplementedError`, as NumPyro's; `get_posterior(params).log_prob(x)` raises
    NumPyro's `NotImplementedError` (the flow has no inverse), though the guide's own draws
    carry their log density.

    **References:** NumPyro's `AutoBNAFNormal`; De Cao, Titov and Aziz (2019), "Block Neural
    Autoregressive Flow".
    """

    def __init__(self, model, *, prefix="auto", init_loc_fn=init_to_uniform, num_flows=1,
                 hidden_factors=(8, 8)):
        super().__init__(model, prefix=prefix, init_loc_fn=init_loc_fn, num_flows=num_flows)
        self._hidden_factors = _positive_ints(type(self).__name__, "hidden_factors",
                                              hidden_factors)

    def _networks(self, d):
        return [BlockNeuralAutoregressiveNN(d, list(self._hidden_factors),
                                            "gated" if i < self.num_flows - 1 else None)
                for i in range(self.num_flows)]

    def _transform(self, i, network):
        return BlockNeuralAutoregressiveTransform(network)
