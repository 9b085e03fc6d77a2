"""`uncondition`: observed sites become latent, drawn from their distribution (NumPyro's)."""

from __future__ import annotations

from ..primitives import sample_op
from ._handler import Handler, forward


class uncondition(Handler):
    """Make every observed sample site of `fn` latent again, ignoring its observation (given by
    `obs=` or an inner `condition`): under `seed` it is drawn from its distribution, and it is
    a latent site for the handlers outside (as NumPyro's `uncondition`, its `infer` records
    `was_observed=True`, and a trace outside records the observation as `infer["obs"]`). As in
    NumPyro, a `seed` inside (`uncondition(seed(model))`) gives the sites their keys.

    **Example:** `trace(seed(uncondition(model), 0)).get_trace(y)["y"]["value"]` is a prior
    predictive draw of `y`.
    """

    body_flag = "keys_for_observed"  # a `seed` inside gives observed sites a key too

    def clauses(self):
        def sample(params, msg, *, resume, is_observed, infer, **static):
            if is_observed:
                msg = msg._replace(value=None, obs=msg.value)
                infer = tuple(sorted(dict(infer, was_observed=True).items()))
            return resume(params, forward(msg, is_observed=False, infer=infer, **static))
        return {sample_op: sample}
