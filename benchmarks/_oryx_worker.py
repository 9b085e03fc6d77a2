"""Oryx side of the benchmark; runs in the pinned Oryx environment (`benchmarks/.oryx-venv/`).

Standalone on purpose: it imports neither effppl nor `models` (they need a newer JAX), only JAX
0.4.38, Oryx 0.2.9 and TFP 0.25. Each model is written twice here: in Oryx's `oryx.core.ppl` style
(`random_variable` on TFP distributions, `joint_log_prob`) and as a hand-written JAX log density,
the baseline Oryx's ratio is taken against. Both are in unconstrained space with the same
transforms as NumPyro's `biject_to` (so the values agree with the main environment's to float64
precision).

Usage (by `benchmarks/_oryx.py`):
    python _oryx_worker.py bench --model NAME --npz IN.npz --out OUT.npz --num-evals N ...
    python _oryx_worker.py expressiveness
    python _oryx_worker.py versions
Each prints one JSON object on stdout. Timings are in seconds, as in `benchmarks/_measure.py`.
"""

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import NamedTuple

warnings.filterwarnings("ignore")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.scipy.special import gammaln, logsumexp  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Transforms to each support, NumPyro's `biject_to` conventions: (x unconstrained) -> (y, log|J|)


def _identity(x):
    return x, jnp.zeros((), x.dtype)


def _exp(x):
    return jnp.exp(x), jnp.sum(x)


def _sigmoid(x):
    return jax.nn.sigmoid(x), jnp.sum(jax.nn.log_sigmoid(x) + jax.nn.log_sigmoid(-x))


def _stick_breaking(x):
    """Unconstrained (..., K-1) -> simplex (..., K); NumPyro's StickBreakingTransform."""
    k = x.shape[-1]
    x = x - jnp.log(k - jnp.arange(k))
    z = jax.nn.sigmoid(x)
    remaining = jnp.cumprod(1 - z, axis=-1)
    ones = jnp.ones(x.shape[:-1] + (1,), x.dtype)
    y = jnp.concatenate([z, ones], -1) * jnp.concatenate([ones, remaining], -1)
    logdet = jnp.sum(jnp.log(y[..., :-1]) + jax.nn.log_sigmoid(x) - x)
    return y, logdet


def _tril_from_vec(t, n):
    rows, cols = np.tril_indices(n, -1)
    return jnp.zeros(t.shape[:-1] + (n, n), t.dtype).at[..., rows, cols].set(t)


def _corr_cholesky(x):
    """Unconstrained (..., n(n-1)/2) -> Cholesky factor of a correlation matrix (..., n, n);
    NumPyro's CorrCholeskyTransform (tanh, then signed stick-breaking by rows)."""
    m = x.shape[-1]
    n = round((math.sqrt(1 + 8 * m) + 1) / 2)
    t = jnp.tanh(x)
    z = _tril_from_vec(t, n)
    z1m_cumprod_sqrt = jnp.cumprod(jnp.sqrt(1 - z**2), axis=-1)
    pad = jnp.ones(z.shape[:-1] + (1,), x.dtype)
    shifted = jnp.concatenate([pad, z1m_cumprod_sqrt[..., :-1]], -1)
    y = (z + jnp.eye(n, dtype=x.dtype)) * shifted
    z1m_cumprod = 1 - jnp.cumsum(y * y, axis=-1)
    rows, cols = np.tril_indices(n, -2)
    stick = 0.5 * jnp.sum(jnp.log(z1m_cumprod[..., rows, cols]))
    tanh = -2 * jnp.sum(x + jax.nn.softplus(-2 * x) - jnp.log(2.0))
    return y, stick + tanh


# ---------------------------------------------------------------------------------------------
# Hand-written log densities of the distributions the baselines need


def normal_lp(x, loc, scale):
    z = (x - loc) / scale
    return -0.5 * z**2 - jnp.log(scale) - 0.5 * jnp.log(2 * jnp.pi)


def half_normal_lp(x, scale):
    return normal_lp(x, 0.0, scale) + jnp.log(2.0)


def half_cauchy_lp(x, scale):
    return jnp.log(2.0 / jnp.pi) - jnp.log(scale) - jnp.log1p((x / scale) ** 2)


def exponential_lp(x, rate):
    return jnp.log(rate) - rate * x


def gamma_lp(x, concentration, rate):
    return (concentration * jnp.log(rate) + (concentration - 1) * jnp.log(x) - rate * x
            - gammaln(concentration))


def student_t_lp(x, df, loc, scale):
    z = (x - loc) / scale
    return (gammaln((df + 1) / 2) - gammaln(df / 2) - 0.5 * jnp.log(df * jnp.pi) - jnp.log(scale)
            - (df + 1) / 2 * jnp.log1p(z**2 / df))


def bernoulli_logits_lp(y, logits):
    return y * logits - jnp.logaddexp(0.0, logits)


def binomial_logits_lp(k, n, logits):
    return (gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1) + k * logits
            - n * jnp.logaddexp(0.0, logits))


def dirichlet_lp(x, alpha):
    return (jnp.sum((alpha - 1) * jnp.log(x), -1) + gammaln(jnp.sum(alpha, -1))
            - jnp.sum(gammaln(alpha), -1))


def categorical_lp(k, probs):
    return jnp.log(jnp.take_along_axis(probs, k[..., None], axis=-1)[..., 0])


def lkj_cholesky_lp(chol, concentration):
    """LKJ(concentration) density of a correlation Cholesky factor (Stan's onion form)."""
    n = chol.shape[-1]
    diag = jnp.diagonal(chol, axis1=-2, axis2=-1)[..., 1:]
    order = jnp.arange(2, n + 1)
    unnorm = jnp.sum((n - order + 2 * concentration - 2) * jnp.log(diag), -1)
    # normaliser (Lewandowski et al. 2009, onion method), as in NumPyro's LKJCholesky
    dm1 = n - 1
    alpha = concentration + 0.5 * dm1
    denominator = gammaln(alpha) * dm1
    numerator = _mvlgamma(alpha - 0.5, dm1)
    pi_const = 0.5 * dm1 * jnp.log(jnp.pi)
    return unnorm - (pi_const + numerator - denominator)


def _mvlgamma(a, p):
    j = jnp.arange(p)
    return jnp.sum(gammaln(a - j / 2)) + p * (p - 1) / 4 * jnp.log(jnp.pi)


# ---------------------------------------------------------------------------------------------
# The models. Each names its latent sites and their transforms (in a fixed order), and gives an
# Oryx program, the observed values it conditions on, and the hand-written log density.


class WorkerModel(NamedTuple):
    """One model on the Oryx side.

    `transforms`: dict site -> transform (`_identity`, `_exp`, ...), the latent sites.
    `program(data, static) -> (program, args)`: an Oryx program `program(key, *args)` and its args.
    `observed(data, static) -> dict`: values of the observed random variables.
    `handwritten(values, data, static) -> scalar`: log joint of constrained `values`.
    """

    transforms: dict
    program: Callable
    observed: Callable
    handwritten: Callable


MODELS = {}


def _register(name):
    def wrap(build):
        MODELS[name] = build
        return build
    return wrap


@_register("toy")
def _toy():
    from oryx.core import ppl
    tfd = _tfd()

    def program(data, static):
        def f(key, x):
            k1, k2, k3 = jax.random.split(key, 3)
            w = ppl.random_variable(tfd.Sample(tfd.Normal(0.0, 1.0), 2), name="w")(k1)
            s = ppl.random_variable(tfd.HalfNormal(1.0), name="s")(k2)
            return ppl.random_variable(
                tfd.Independent(tfd.Bernoulli(logits=s * (x @ w)), 1), name="y")(k3)
        return f, (data["arg0"],)

    def handwritten(v, data, static):
        x, y = data["arg0"], data["kw_y"]
        lp = jnp.sum(normal_lp(v["w"], 0.0, 1.0)) + half_normal_lp(v["s"], 1.0)
        return lp + jnp.sum(bernoulli_logits_lp(y, v["s"] * (x @ v["w"])))

    return WorkerModel(transforms={"w": _identity, "s": _exp}, program=program,
                       observed=lambda data, static: {"y": data["kw_y"]},
                       handwritten=handwritten)


def _tfd():
    import tensorflow_probability.substrates.jax as tfp
    return tfp.distributions


def _c(value):
    """A constant in the run's float dtype (TFP would make a Python float float32)."""
    return jnp.asarray(value, jnp.result_type(float))


def _rv(dist, name, key):
    from oryx.core import ppl
    return ppl.random_variable(dist, name=name)(key)


@_register("proportion_test")
def _proportion_test():
    """`models/proportion_test.py`: logistic regression, MVN(0, I) prior on 3 coefficients."""
    tfd = _tfd()

    def program(data, static):
        def f(key, design_matrix):
            k1, k2 = jax.random.split(key)
            num_features = design_matrix.shape[1]
            beta = _rv(tfd.MultivariateNormalTriL(jnp.zeros(num_features),
                                                  jnp.eye(num_features)), "coefficients", k1)
            logits = design_matrix @ beta
            return _rv(tfd.Independent(tfd.Bernoulli(logits=logits, dtype=logits.dtype), 1),
                       "obs", k2)
        return f, (data["arg0"],)

    def handwritten(v, data, static):
        x, y, beta = data["arg0"], data["arg1"], v["coefficients"]
        logits = x @ beta
        return jnp.sum(normal_lp(beta, 0.0, 1.0)) + jnp.sum(bernoulli_logits_lp(y, logits))

    return WorkerModel(transforms={"coefficients": _identity}, program=program,
                       observed=lambda data, static: {"obs": data["arg1"]},
                       handwritten=handwritten)


@_register("stochastic_volatility")
def _stochastic_volatility():
    """`models/stochastic_volatility.py`; the Gaussian random walk is TFP's `Cumsum` of Normals."""
    import tensorflow_probability.substrates.jax as tfp
    tfd, tfb = tfp.distributions, tfp.bijectors

    def program(data, static):
        def f(key, num_steps):
            k1, k2, k3, k4 = jax.random.split(key, 4)
            sigma = _rv(tfd.Exponential(_c(50.0)), "sigma", k1)
            s = _rv(tfd.TransformedDistribution(tfd.Sample(tfd.Normal(_c(0.0), sigma), num_steps),
                                                tfb.Cumsum()), "s", k2)
            nu = _rv(tfd.Exponential(_c(0.1)), "nu", k3)
            return _rv(tfd.Independent(tfd.StudentT(df=nu, loc=_c(0.0), scale=jnp.exp(s)), 1),
                       "r", k4)
        return (lambda key: f(key, data["arg0"].shape[0])), ()

    def handwritten(v, data, static):
        sigma, s, nu, r = v["sigma"], v["s"], v["nu"], data["arg0"]
        lp = exponential_lp(sigma, 50.0) + exponential_lp(nu, 0.1)
        lp += normal_lp(s[0], 0.0, sigma) + jnp.sum(normal_lp(jnp.diff(s), 0.0, sigma))
        return lp + jnp.sum(student_t_lp(r, nu, 0.0, jnp.exp(s)))

    return WorkerModel(transforms={"sigma": _exp, "s": _identity, "nu": _exp}, program=program,
                       observed=lambda data, static: {"r": data["arg0"]},
                       handwritten=handwritten)


@_register("bnn")
def _bnn():
    """`models/bnn.py`: two tanh hidden layers of width `D_H`, Normal weights, Gamma precision."""
    tfd = _tfd()

    def program(data, static):
        d_h = static.get("kw_D_H", 5)

        def f(key, x):
            k1, k2, k3, k4, k5 = jax.random.split(key, 5)
            d_x = x.shape[1]
            w1 = _rv(tfd.Independent(tfd.Normal(jnp.zeros((d_x, d_h)), _c(1.0)), 2), "w1", k1)
            w2 = _rv(tfd.Independent(tfd.Normal(jnp.zeros((d_h, d_h)), _c(1.0)), 2), "w2", k2)
            w3 = _rv(tfd.Independent(tfd.Normal(jnp.zeros((d_h, 1)), _c(1.0)), 2), "w3", k3)
            prec = _rv(tfd.Gamma(_c(3.0), _c(1.0)), "prec_obs", k4)
            z3 = jnp.tanh(jnp.tanh(x @ w1) @ w2) @ w3
            return _rv(tfd.Independent(tfd.Normal(z3, 1.0 / jnp.sqrt(prec)), 2), "Y", k5)
        return f, (data["arg0"],)

    def handwritten(v, data, static):
        x, y = data["arg0"], data["arg1"]
        lp = sum(jnp.sum(normal_lp(v[k], 0.0, 1.0)) for k in ("w1", "w2", "w3"))
        lp += gamma_lp(v["prec_obs"], 3.0, 1.0)
        z3 = jnp.tanh(jnp.tanh(x @ v["w1"]) @ v["w2"]) @ v["w3"]
        return lp + jnp.sum(normal_lp(y, z3, 1.0 / jnp.sqrt(v["prec_obs"])))

    return WorkerModel(transforms={"w1": _identity, "w2": _identity, "w3": _identity,
                                   "prec_obs": _exp}, program=program,
                       observed=lambda data, static: {"Y": data["arg1"]},
                       handwritten=handwritten)


def _forward(log_a, log_b, words):
    def step(alpha, word):
        return logsumexp(alpha[:, None] + log_a, axis=0) + log_b[:, word], None
    alpha, _ = lax.scan(step, log_b[:, words[0]], words[1:])
    return logsumexp(alpha)


def _factor(value):
    """Oryx has no `factor`: an observed Bernoulli(1) whose log-probability is `value` (< 0)."""
    tfd = _tfd()
    logits = value - jnp.log(-jnp.expm1(value))  # log sigmoid(logits) == value
    return tfd.Bernoulli(logits=logits, dtype=value.dtype)


@_register("hmm")
def _hmm():
    """`models/hmm.py`: Dirichlet rows, supervised Categoricals, forward algorithm in `lax.scan`
    (deterministic: no random variable inside it), entering through a factor."""
    tfd = _tfd()

    def program(data, static):
        def f(key, transition_prior, emission_prior, sup_cat, sup_words, unsup_words):
            keys = jax.random.split(key, 5)
            k, w = transition_prior.shape[0], emission_prior.shape[0]
            a = _rv(tfd.Independent(tfd.Dirichlet(jnp.broadcast_to(transition_prior, (k, k))), 1),
                    "transition_prob", keys[0])
            b = _rv(tfd.Independent(tfd.Dirichlet(jnp.broadcast_to(emission_prior, (k, w))), 1),
                    "emission_prob", keys[1])
            _rv(tfd.Independent(tfd.Categorical(probs=a[sup_cat[:-1]]), 1),
                "supervised_categories", keys[2])
            _rv(tfd.Independent(tfd.Categorical(probs=b[sup_cat]), 1), "supervised_words",
                keys[3])
            return _rv(_factor(_forward(jnp.log(a), jnp.log(b), unsup_words)),
                       "forward_log_prob", keys[4])
        return f, tuple(data[f"arg{i}"] for i in range(5))

    def observed(data, static):
        dtype = jnp.result_type(float)
        return {"supervised_categories": data["arg2"][1:], "supervised_words": data["arg3"],
                "forward_log_prob": jnp.ones((), dtype)}

    def handwritten(v, data, static):
        a, b = v["transition_prob"], v["emission_prob"]
        t_prior, e_prior, sup_cat, sup_words, unsup = (data[f"arg{i}"] for i in range(5))
        log_a, log_b = jnp.log(a), jnp.log(b)
        lp = jnp.sum(dirichlet_lp(a, t_prior)) + jnp.sum(dirichlet_lp(b, e_prior))
        lp += jnp.sum(log_a[sup_cat[:-1], sup_cat[1:]]) + jnp.sum(log_b[sup_cat, sup_words])
        return lp + _forward(log_a, log_b, unsup)

    return WorkerModel(transforms={"transition_prob": _stick_breaking,
                                   "emission_prob": _stick_breaking},
                       program=program, observed=observed, handwritten=handwritten)


@_register("ucbadmit")
def _ucbadmit():
    """`models/ucbadmit.py`: non-centred varying intercepts and slopes, LKJ(2) Cholesky prior."""
    tfd = _tfd()

    def program(data, static):
        num_dept = static["kw_num_dept"]

        def f(key, dept, male, applications):
            keys = jax.random.split(key, 5)
            v_mu = _rv(tfd.Independent(tfd.Normal(_c(0.0), _c([4.0, 1.0])), 1), "v_mu",
                       keys[0])
            sigma = _rv(tfd.Independent(tfd.HalfNormal(_c([1.0, 1.0])), 1), "sigma", keys[1])
            l_rho = _rv(tfd.CholeskyLKJ(2, _c(2.0)), "L_Rho", keys[2])
            z = _rv(tfd.Independent(tfd.Normal(jnp.zeros((num_dept, 2)), _c(1.0)), 2), "z", keys[3])
            v = ((sigma[:, None] * l_rho) @ z.T).T
            logits = v_mu[0] + v[dept, 0] + (v_mu[1] + v[dept, 1]) * male
            n = applications.astype(logits.dtype)
            return _rv(tfd.Independent(tfd.Binomial(total_count=n, logits=logits), 1), "admit",
                       keys[4])
        return f, (data["arg0"], data["arg1"], data["arg2"])

    def observed(data, static):
        return {"admit": data["arg3"].astype(jnp.result_type(float))}

    def handwritten(v, data, static):
        dept, male, n, k = (data[f"arg{i}"] for i in range(4))
        lp = jnp.sum(normal_lp(v["v_mu"], 0.0, jnp.array([4.0, 1.0])))
        lp += jnp.sum(half_normal_lp(v["sigma"], 1.0)) + lkj_cholesky_lp(v["L_Rho"], 2.0)
        lp += jnp.sum(normal_lp(v["z"], 0.0, 1.0))
        vv = ((v["sigma"][:, None] * v["L_Rho"]) @ v["z"].T).T
        logits = v["v_mu"][0] + vv[dept, 0] + (v["v_mu"][1] + vv[dept, 1]) * male
        return lp + jnp.sum(binomial_logits_lp(k, n, logits))

    return WorkerModel(transforms={"v_mu": _identity, "sigma": _exp, "L_Rho": _corr_cholesky,
                                   "z": _identity}, program=program, observed=observed,
                       handwritten=handwritten)


def _bessel_ive(num_orders, z, threshold=20.0, terms=100):
    """`I_n(z) e^{-z}` for `n = 0 .. num_orders - 1`, without loops (as `models/_special.py`).

    TFP's `bessel_ive` cannot be used under Oryx: its `log_prob` interpreter re-binds the
    primitives inside TFP's `custom_gradient`, leaving a `while_loop` that reverse mode rejects.
    Here: the power series summed in log space for `z < threshold`, and `i0e`, `i1e` with the
    recurrence `I_{n+1} = I_{n-1} - (2n / z) I_n` (Abramowitz & Stegun 9.6.26) above it."""
    from jax.scipy.special import i0e, i1e
    small = z < threshold
    zs = jnp.where(small, z, 1.0)
    k = jnp.arange(terms, dtype=z.dtype)
    n = jnp.arange(num_orders, dtype=z.dtype)[:, None]
    log_terms = (2 * k + n) * jnp.log(zs / 2) - gammaln(k + 1) - gammaln(k + n + 1)
    series = jnp.exp(logsumexp(log_terms, axis=-1) - zs)
    zl = jnp.where(small, threshold, z)
    rows = [i0e(zl), i1e(zl)]
    for order in range(1, num_orders - 1):
        rows.append(rows[order - 1] - (2.0 * order / zl) * rows[order])
    return jnp.where(small, series, jnp.stack(rows[:num_orders]))


def _hsgp_basis(x, static):
    """HSGP bases (Riutort-Mayol et al. 2023), as `models/_hsgp_basis.py`."""
    L, w0 = static["kw_L"], static["kw_w0"]

    def se_spd(alpha, length, m):
        sqrt_eig = jnp.arange(1, 1 + m) * jnp.pi / 2 / L
        return alpha * jnp.sqrt(2 * jnp.pi) * length * jnp.exp(-0.5 * length**2 * sqrt_eig**2)

    def se_phi(m):
        return jnp.sin((jnp.pi / (2 * L)) * (L + x[:, None]) * jnp.arange(1, m + 1)) / jnp.sqrt(L)

    def periodic_q2(alpha, length, m):
        a = length ** (-2)
        c = jnp.where(jnp.arange(m) > 0, 2.0, 1.0)
        return c * alpha**2 * _bessel_ive(m, a)

    def periodic_phi(m):
        mw0x = w0 * x[:, None] * jnp.arange(m)
        return jnp.cos(mw0x), jnp.sin(mw0x)

    return se_spd, se_phi, periodic_q2, periodic_phi


_HOLIDAYS = ("memorial", "labour", "thanksgiving")


@_register("hsgp")
def _hsgp():
    """`models/hsgp.py`: Vehtari's birthdays model with three HSGPs, weekday, horseshoe day of year
    and holiday effects (NumPyro's `examples/hsgp.py`)."""
    tfd = _tfd()

    def program(data, static):
        m1, m2, m3 = static["kw_M1"], static["kw_M2"], static["kw_M3"]

        def f(key, x, day_of_week, day_of_year, memorial, labour, thanksgiving):
            se_spd, se_phi, periodic_q2, periodic_phi = _hsgp_basis(x, static)
            keys = iter(jax.random.split(key, 32))

            def rv(dist, name):
                return _rv(dist, name, next(keys))

            def normals(shape, name, scale=1.0):
                return rv(tfd.Independent(tfd.Normal(jnp.zeros(shape), _c(scale)), 1), name)

            intercept = rv(tfd.Normal(_c(0.0), _c(1.0)), "intercept")
            gps = {}
            for prefix, m in (("trend", m1), ("week-trend", m3)):
                alpha = rv(tfd.HalfNormal(_c(1.0)), f"{prefix}/alpha")
                length = rv(tfd.InverseGamma(_c(10.0), _c(2.0)), f"{prefix}/length")
                beta = normals((m,), f"{prefix}/beta")
                gps[prefix] = se_phi(m) @ (jnp.sqrt(se_spd(alpha, length, m)) * beta)
            alpha = rv(tfd.HalfNormal(_c(1.0)), "year/alpha")
            length = rv(tfd.HalfNormal(_c(0.2)), "year/length")
            beta_cos = normals((m2,), "year/beta_cos")
            beta_sin = normals((m2 - 1,), "year/beta_sin")
            q2 = periodic_q2(alpha, length, m2)
            cosines, sines = periodic_phi(m2)
            f2 = cosines @ (q2 * beta_cos) + sines[:, 1:] @ (q2[1:] * beta_sin)
            week = normals((6,), "week/_beta")
            weekday = jnp.concatenate((-jnp.sum(week, keepdims=True), week))[day_of_week]
            tau = rv(tfd.HalfNormal(_c(0.2)), "day/tau")
            c_aux = rv(tfd.InverseGamma(_c(25.0), _c(25.0)), "day/c_aux")
            c = 2 * jnp.sqrt(c_aux)
            lam = rv(tfd.Independent(tfd.HalfCauchy(jnp.zeros(366), _c(1.0)), 1), "day/lam")
            lam_tilde = jnp.sqrt(c) * lam / jnp.sqrt(c + (tau * lam) ** 2)
            day_beta = rv(tfd.Independent(tfd.Normal(_c(0.0), tau * lam_tilde), 1), "day/beta")
            day = day_beta[day_of_year]
            for name, indicator in zip(_HOLIDAYS, (memorial, labour, thanksgiving)):
                day = day + rv(tfd.Normal(_c(0.0), _c(1.0)), f"{name}/beta") * indicator
            f = intercept + gps["trend"] + f2 + jnp.exp(gps["week-trend"]) * weekday + day
            sigma = rv(tfd.HalfNormal(_c(0.5)), "sigma")
            return rv(tfd.Independent(tfd.Normal(f, sigma), 1), "y")
        return f, tuple(data[f"arg{i}"] for i in range(6))

    def handwritten(v, data, static):
        m1, m2, m3 = static["kw_M1"], static["kw_M2"], static["kw_M3"]
        x, day_of_week, day_of_year, *indicators, y = (data[f"arg{i}"] for i in range(7))
        se_spd, se_phi, periodic_q2, periodic_phi = _hsgp_basis(x, static)

        def inverse_gamma_lp(z, a, b):
            return a * jnp.log(b) - gammaln(a) - (a + 1) * jnp.log(z) - b / z

        lp = normal_lp(v["intercept"], 0.0, 1.0) + half_normal_lp(v["sigma"], 0.5)
        gps = {}
        for prefix, m in (("trend", m1), ("week-trend", m3)):
            alpha, length, beta = (v[f"{prefix}/{k}"] for k in ("alpha", "length", "beta"))
            lp += half_normal_lp(alpha, 1.0) + inverse_gamma_lp(length, 10.0, 2.0)
            lp += jnp.sum(normal_lp(beta, 0.0, 1.0))
            gps[prefix] = se_phi(m) @ (jnp.sqrt(se_spd(alpha, length, m)) * beta)
        alpha, length = v["year/alpha"], v["year/length"]
        beta_cos, beta_sin = v["year/beta_cos"], v["year/beta_sin"]
        lp += half_normal_lp(alpha, 1.0) + half_normal_lp(length, 0.2)
        lp += jnp.sum(normal_lp(beta_cos, 0.0, 1.0)) + jnp.sum(normal_lp(beta_sin, 0.0, 1.0))
        q2 = periodic_q2(alpha, length, m2)
        cosines, sines = periodic_phi(m2)
        f2 = cosines @ (q2 * beta_cos) + sines[:, 1:] @ (q2[1:] * beta_sin)
        week = v["week/_beta"]
        lp += jnp.sum(normal_lp(week, 0.0, 1.0))
        weekday = jnp.concatenate((-jnp.sum(week, keepdims=True), week))[day_of_week]
        tau, c_aux, lam, day_beta = v["day/tau"], v["day/c_aux"], v["day/lam"], v["day/beta"]
        c = 2 * jnp.sqrt(c_aux)
        lam_tilde = jnp.sqrt(c) * lam / jnp.sqrt(c + (tau * lam) ** 2)
        lp += half_normal_lp(tau, 0.2) + inverse_gamma_lp(c_aux, 25.0, 25.0)
        lp += jnp.sum(half_cauchy_lp(lam, 1.0)) + jnp.sum(normal_lp(day_beta, 0.0, tau * lam_tilde))
        day = day_beta[day_of_year]
        for name, indicator in zip(_HOLIDAYS, indicators):
            lp += normal_lp(v[f"{name}/beta"], 0.0, 1.0)
            day = day + v[f"{name}/beta"] * indicator
        f = v["intercept"] + gps["trend"] + f2 + jnp.exp(gps["week-trend"]) * weekday + day
        return lp + jnp.sum(normal_lp(y, f, v["sigma"]))

    positive = ["sigma", "trend/alpha", "trend/length", "week-trend/alpha", "week-trend/length",
                "year/alpha", "year/length", "day/tau", "day/c_aux", "day/lam"]
    real = ["intercept", "trend/beta", "week-trend/beta", "year/beta_cos", "year/beta_sin",
            "week/_beta", "day/beta"] + [f"{name}/beta" for name in _HOLIDAYS]
    transforms = {**{k: _exp for k in positive}, **{k: _identity for k in real}}
    return WorkerModel(transforms=transforms, program=program,
                       observed=lambda data, static: {"y": data["arg6"]},
                       handwritten=handwritten)


# ---------------------------------------------------------------------------------------------
# Timing (the same protocol as benchmarks/_measure.py)


def _unconstrain(model, params):
    values, logdet = {}, 0.0
    for site, transform in model.transforms.items():
        values[site], ld = transform(params[site])
        logdet = logdet + ld
    return values, logdet


def _log_densities(model, static):
    from oryx.core import ppl

    def oryx(params, data):
        values, logdet = _unconstrain(model, params)
        program, args = model.program(data, static)
        values.update(model.observed(data, static))
        return ppl.joint_log_prob(program)(values, *args) + logdet

    def handwritten(params, data):
        values, logdet = _unconstrain(model, params)
        return model.handwritten(values, data, static) + logdet

    return {"oryx": oryx, "handwritten": handwritten}


def _timed(thunk):
    start = time.perf_counter()
    out = jax.block_until_ready(thunk())
    return time.perf_counter() - start, out


def _flat(fn, example):
    leaves, treedef = jax.tree_util.tree_flatten(example)

    def flat_fn(*flat):
        return fn(*jax.tree_util.tree_unflatten(treedef, flat))

    def from_jaxpr(closed):
        run = jax.core.jaxpr_as_fun(closed)
        return lambda *tree: run(*jax.tree_util.tree_leaves(tree))[0]

    return flat_fn, leaves, from_jaxpr


def _callbacks(closed):
    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            yield eqn
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    inner = getattr(sub, "jaxpr", sub)
                    if hasattr(inner, "eqns"):
                        yield from walk(inner)
    return sum("callback" in eqn.primitive.name for eqn in walk(closed.jaxpr))


def _eval_loop(fn, num_evals):
    value_and_grad = jax.value_and_grad(fn)

    def run(params, data):
        def body(i, acc):
            shift = 1e-3 * jnp.sin(i.astype(acc.dtype))
            point = jax.tree_util.tree_map(lambda x: x + shift.astype(x.dtype), params)
            value, grad = value_and_grad(point, data)
            return acc + value + sum(jnp.sum(g) for g in jax.tree_util.tree_leaves(grad))
        return lax.fori_loop(0, num_evals, body, jnp.zeros((), jnp.result_type(float)))

    return run


def _prepare(fn, params, data, args):
    """Trace and compile figures of `fn`, and a thunk running its compiled evaluation loop."""
    params, data = jax.device_put(params), jax.device_put(data)
    flat_fn, leaves, from_jaxpr = _flat(fn, (params, data))
    trace_times = []
    for _ in range(args.trace_repeats):
        fresh = (lambda f: lambda *a: f(*a))(flat_fn)  # make_jaxpr caches by function identity
        seconds, closed = _timed(lambda: jax.make_jaxpr(fresh)(*leaves))
        trace_times.append(seconds)
    jaxpr_fn = from_jaxpr(closed)
    compile_times = []
    for _ in range(args.compile_repeats):
        seconds, _ = _timed(
            lambda: jax.jit(jax.value_and_grad(jaxpr_fn)).lower(params, data).compile())
        compile_times.append(seconds)
    loop = jax.jit(_eval_loop(jaxpr_fn, args.num_evals)).lower(params, data).compile()
    trace_s, compile_s = statistics.median(trace_times), statistics.median(compile_times)
    figures = {"trace_s": trace_s, "trace_first_s": trace_times[0], "trace_all_s": trace_times,
               "compile_s": compile_s, "compile_all_s": compile_times,
               "total_s": trace_s + compile_s, "num_evals": args.num_evals,
               "num_eqns": len(closed.jaxpr.eqns), "num_callbacks": _callbacks(closed),
               "dtype": str(jnp.result_type(float))}
    return figures, lambda: loop(params, data)


SHORT_LOOP_S = 10.0  # as benchmarks._measure.SHORT_LOOP_S: a short loop's cold run never counts alone


def _time_side_by_side(runs, args):
    """Round-robin runs of every loop (a load change falls on all alike); the fastest counts."""
    times, results = {name: [] for name in runs}, {}
    wants = lambda ts: len(ts) < args.run_repeats or (len(ts) == 1 and ts[0] < SHORT_LOOP_S)  # noqa: E731
    while rounds := [name for name in runs if wants(times[name])]:
        for name in rounds:
            seconds, results[name] = _timed(runs[name])
            times[name].append(seconds)
    return {name: {"run_s": min(ts), "run_all_s": ts, "evals_per_s": args.num_evals / min(ts),
                   "loop_result": float(results[name])} for name, ts in times.items()}


def _points(fn, points, data):
    from jax.experimental import enable_x64
    with enable_x64():
        flat_fn, leaves, from_jaxpr = _flat(fn, (points[0], data))
        jaxpr_fn = from_jaxpr(jax.make_jaxpr(flat_fn)(*leaves))
        value_and_grad = jax.jit(jax.value_and_grad(jaxpr_fn))
        out = []
        for point in points:
            value, grad = value_and_grad(point, data)
            out.append((float(value), {k: np.asarray(g, np.float64) for k, g in grad.items()}))
        return out


def bench(args):
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    if args.model not in MODELS:
        raise SystemExit(f"_oryx_worker: unknown model {args.model!r}; known: {sorted(MODELS)}")
    with np.load(args.npz) as npz:
        data = {k[5:]: np.asarray(npz[k]) for k in npz.files if k.startswith("data/")}
        static = json.loads(str(npz["static.json"]))
        points = [{k.split("/", 1)[1]: np.asarray(npz[k]) for k in npz.files
                   if k.startswith(f"point{i}/")} for i in range(args.num_points)]
    model = MODELS[args.model]()
    result = {"versions": _versions(), "device": _device(), "frameworks": {}}
    grads, runs = {}, {}
    for framework, fn in _log_densities(model, static).items():
        try:
            figures, runs[framework] = _prepare(fn, points[0], data, args)
            evaluated = _points(fn, points, data)
        except Exception as err:  # recorded per framework, never as a zero
            import traceback
            runs.pop(framework, None)
            result["frameworks"][framework] = {
                "status": "error", "reason": f"{type(err).__name__}: {str(err)[:500]}",
                "traceback": traceback.format_exc(limit=-8)}
            continue
        figures["status"] = "ok"
        figures["values"] = [v for v, _ in evaluated]
        for i, (_, g) in enumerate(evaluated):
            grads.update({f"{framework}/{i}/{k}": v for k, v in g.items()})
        result["frameworks"][framework] = figures
    for framework, timing in _time_side_by_side(runs, args).items():
        result["frameworks"][framework].update(timing)
    np.savez(args.out, **grads)
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------
# Expressiveness (paper §7.2, Figure 14): latents inside lax.cond / lax.scan


def expressiveness(args):
    """Does Oryx's `joint_log_prob` account for a latent sampled inside `lax.cond` / `lax.scan`?

    Regime-switching toy: `z ~ N(0, 1)`; `u ~ N(z, 1)` if `z > 0` else `u ~ N(z, 2)`, drawn inside
    `lax.cond`; `y ~ N(z, 1)`. The correct joint at (z, u, y) = (0.3, 0.7, 1.0) has three terms.
    Then a random walk `h_t ~ N(h_{t-1}, 1)` whose latent is drawn inside `lax.scan`.
    """
    from oryx.core import ppl
    tfd = _tfd()
    del args

    def regime(key):
        k1, k2, k3 = jax.random.split(key, 3)
        z = ppl.random_variable(tfd.Normal(0.0, 1.0), name="z")(k1)
        u = lax.cond(z > 0,
                     lambda k: ppl.random_variable(tfd.Normal(z, 1.0), name="u")(k),
                     lambda k: ppl.random_variable(tfd.Normal(z, 2.0), name="u")(k), k2)
        del u
        return ppl.random_variable(tfd.Normal(z, 1.0), name="y")(k3)

    z, u, y = 0.3, 0.7, 1.0
    correct = float(normal_lp(z, 0.0, 1.0) + normal_lp(u, z, 1.0) + normal_lp(y, z, 1.0))
    without_u = float(normal_lp(z, 0.0, 1.0) + normal_lp(y, z, 1.0))
    cond = {"model": "z ~ N(0,1); u ~ N(z, 1 if z > 0 else 2) inside lax.cond; y ~ N(z,1)",
            "point": {"z": z, "u": u, "y": y}, "correct": correct, "without_latent": without_u}
    try:
        value = float(ppl.joint_log_prob(regime)({"z": z, "u": u, "y": y}))
        cond.update(oryx=value, error=None,
                    silently_wrong=bool(abs(value - correct) > 1e-4),
                    dropped_latent=bool(abs(value - without_u) < 1e-4))
    except Exception as err:
        cond.update(oryx=None, error=f"{type(err).__name__}: {err}", silently_wrong=False,
                    dropped_latent=False)

    def walk(key):
        def body(h, k):
            h = ppl.random_variable(tfd.Normal(h, 1.0), name="h")(k)
            return h, h
        return lax.scan(body, 0.0, jax.random.split(key, 3))[1]

    hs = np.array([0.1, 0.2, 0.3])
    correct_scan = float(jnp.sum(normal_lp(jnp.asarray(hs), jnp.asarray([0.0, 0.1, 0.2]), 1.0)))
    scan = {"model": "h_t ~ N(h_{t-1}, 1) inside lax.scan, T = 3", "correct": correct_scan}
    try:
        value = float(ppl.joint_log_prob(walk)({"h": hs}))
        scan.update(oryx=value, error=None, silently_wrong=bool(abs(value - correct_scan) > 1e-4))
    except Exception as err:
        scan.update(oryx=None, error=f"{type(err).__name__}: {err}", silently_wrong=False)
    print(json.dumps({"versions": _versions(), "cond": cond, "scan": scan}))


def _versions():
    import jaxlib
    import oryx
    import tensorflow_probability as tfp
    return {"python": sys.version.split()[0], "jax": jax.__version__,
            "jaxlib": jaxlib.__version__, "oryx": getattr(oryx, "__version__", "0.2.9"),
            "tensorflow_probability": tfp.__version__, "numpy": np.__version__}


def _device():
    device = jax.devices()[0]
    return {"platform": device.platform, "kind": device.device_kind, "count": jax.device_count()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="_oryx_worker.py")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--model", required=True)
    b.add_argument("--npz", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--num-evals", type=int, required=True)
    b.add_argument("--trace-repeats", type=int, default=3)
    b.add_argument("--compile-repeats", type=int, default=3)
    b.add_argument("--run-repeats", type=int, default=1)
    b.add_argument("--num-points", type=int, default=3)
    b.add_argument("--x64", action="store_true")
    sub.add_parser("expressiveness")
    sub.add_parser("versions")
    args = parser.parse_args(argv)
    if args.command == "bench":
        bench(args)
    elif args.command == "expressiveness":
        expressiveness(args)
    else:
        print(json.dumps({"versions": _versions(), "device": _device()}))


if __name__ == "__main__":
    main()
