"""The recursions over an enumerated scan's tables (`_forward_algorithm.forward_scan`): the tables of a
chain of order k, the forward pass over the joint states of the last k steps, and the backward
pass (forward filtering, backward sampling; Viterbi) over those joint states."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def order_tables(log_density, steps, markov_init, num_states, order):
    """`lp[t, p, i, *chains]`: the log density of step t's dependent sites at state i, the
    Markov carry being the one after the states `p` (`num_states ** order` of them, the most
    significant first) of the `order` steps before t. That carry is computed by running the
    body over those steps from the initial carry: a chain of that order forgets anything older
    (for t < order, the steps before 0 are dummies and the carry starts at step 0)."""
    every_state = jnp.arange(num_states)
    at_steps = jax.vmap(jax.vmap(jax.vmap(log_density, (None, None, 0)), (None, 0, None)),
                        (0, 0, None))
    length = jax.tree_util.tree_leaves(steps)[0].shape[0]
    carry_in = [jnp.broadcast_to(c, (length, 1, *jnp.shape(c))) for c in markov_init]
    for _ in range(order):  # the carry after the last 1, 2, ..., `order` states
        after = at_steps(steps, carry_in, every_state)[1]  # (T, P, K, ...)
        carry_in = [jnp.concatenate([  # into step t: after step t - 1; the initial one into 0
            jnp.broadcast_to(c, (1, a.shape[1] * a.shape[2], *jnp.shape(c))),
            a[:-1].reshape((length - 1, -1, *a.shape[3:]))]) for c, a in zip(markov_init, after)]
    return at_steps(steps, carry_in, every_state)[0]


def log_sum_exp(a, axis):
    """`log(sum(exp(a), axis))`, shifted by the maximum along `axis` (a finite one; rows of -inf
    only give -inf): `jax.scipy.special.logsumexp` without its options (signs, weights), whose
    handling made each step of the forward recursion, value and gradient, about twice as
    costly on small tables."""
    top = jnp.max(a, axis=axis, keepdims=True)
    top = jax.lax.stop_gradient(jnp.where(jnp.isfinite(top), top, 0))
    return jnp.squeeze(top, axis) + jnp.log(jnp.sum(jnp.exp(a - top), axis=axis))


def forward_pass(lp, order, num_states, reduce, keep):
    """Pass 3: the forward recursion over the joint states of the last `order` steps,
    `alpha_t[q, i] = reduce_h(alpha_{t-1}[h, q] + lp_t[(h, q), i])`, from `lp` `(T, K^order,
    K, *chains)`. **Returns:** `(alpha_T, alphas)`: the last message `(K^order, *chains)`, and
    with `keep` every step's `(T, K^order, *chains)` (else None)."""
    first = lp[0, 0].astype(jnp.result_type(float))  # every row of the first table is the same
    # the dummy states before step 0: impossible, but finite (a sum over impossible states only
    # would have a NaN gradient at -inf)
    impossible = jnp.finfo(first.dtype).min / 4
    alpha0 = jnp.concatenate([first, jnp.full((num_states ** order - num_states, *first.shape[1:]),
                                              impossible, first.dtype)])

    def forward(alpha, lp_t):
        joint = (alpha[:, None] + lp_t).reshape((num_states, -1, *lp_t.shape[1:]))
        alpha = reduce(joint, axis=0).reshape(alpha.shape).astype(alpha.dtype)
        return alpha, (alpha if keep else None)

    alpha, alphas = jax.lax.scan(forward, alpha0, lp[1:])
    return alpha, (jnp.concatenate([alpha0[None], alphas]) if keep else None)


def backward_chains(alphas, lp, chains, temperature, key, num_states):
    """`_backward` for every chain: `alphas` `(T, K^k, *chains)`, `lp` `(T, J, K, *chains)`;
    returns the states `(T, *chains)` (each of `num_states` K)."""
    num_steps, num_joint = alphas.shape[:2]
    alphas = jnp.moveaxis(alphas.reshape(num_steps, num_joint, chains.size), -1, 0)
    lp = jnp.moveaxis(lp.reshape(*lp.shape[:3], chains.size), -1, 0)
    keys = jax.random.split(key, chains.size) if key is not None else None
    path = jax.vmap(lambda a, t, k: _backward(a, t, temperature, k, num_states))(alphas, lp, keys)
    return jnp.moveaxis(path, 0, -1).reshape((num_steps, *chains.shape))


def _backward(alphas, lp, temperature, key, num_states):
    """The state of every step `(T,)`, in processing order, for a chain of order k: the joint
    state of the last k steps `(h, q)` (h the oldest; index `h K^(k-1) + q`) is drawn
    (temperature 1) or maximised (0) backwards: the last from `alphas[-1]`, then, given the
    joint state `(q, i)` after step t + 1, `p(h | q, i) ~ exp(alphas[t][(h, q)] + lp[t +
    1][(h, q), i])`; each step's state is the newest of its joint state. `alphas[t]`: the
    message after step t `(K^k,)`; `lp[t]`: the table of step t `(K^k, K)` (its first axis of
    size 1 when it does not depend on the states before)."""
    def choose(key, logits):
        if temperature == 0:
            return jnp.argmax(logits)
        return jax.random.categorical(key, logits)

    num_steps, num_joint = lp.shape[0], alphas.shape[1]
    lower = num_joint // num_states  # K^(k-1): the joint states of the k - 1 newer steps
    keys = (jax.random.split(key, num_steps) if key is not None
            else jnp.zeros((num_steps, 2), jnp.uint32))
    last = choose(keys[-1], alphas[-1])

    def back(joint_next, inputs):
        key, alpha_t, lp_next = inputs
        newer, state_next = joint_next // num_states, joint_next % num_states
        joint = jnp.arange(num_states) * lower + newer  # (h, q) for every oldest state h
        rows = joint if lp_next.shape[0] == num_joint else jnp.zeros_like(joint)
        joint = joint[choose(key, alpha_t[joint] + lp_next[rows, state_next])]
        return joint, joint

    _, earlier = jax.lax.scan(back, last, (keys[:-1], alphas[:-1], lp[1:]), reverse=True)
    return jnp.concatenate([earlier, last[None]]) % num_states
