"""UCBadmit GLMM: varying intercepts and gender slopes per department, LKJ prior, non-centred.

Ported from NumPyro's `examples/ucbadmit.py` (`glmm`), which replicates rethinking's `m_glmm5`
(McElreath 2018, Statistical Rethinking, ch. 10 and 13); a benchmark model of the paper ("Handling
JAX", §7.2; 49k rows there: the 12 rows tiled 4096 times). Data: UC Berkeley graduate admissions,
Fall 1973 (Bickel, Hammel & O'Connell 1975; `models/data/UCBadmit.csv`, see its SOURCE note).

Deviation: `num_dept` may be passed (`make_data` does), so the model traces with `dept` abstract;
when it is `None` the model computes `len(np.unique(dept))` as the published example does.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
from jax.nn import softplus
from jax.scipy.special import expit, gammaln
from jax.scipy.stats import norm

import effppl
from effppl import distributions as dist
from models._data import load_ucbadmit, resolve_size

NAME = "ucbadmit"
SIZES = {"quick": 12, "paper": 49_152}


def make_data(size="quick", seed=0):
    """`((dept, male, applications, admit) int64 (N,), {"num_dept": 6})`: the 12 rows tiled to N
    rows (cut short if N is not a multiple of 12); `seed` is unused.

    **Raises:** `SizeError` unless `size` is a key of `SIZES` or a positive int; `DataFormatError`,
    `DataNotFoundError` from `load_ucbadmit`.
    """
    del seed
    n = resolve_size(SIZES, size, NAME)
    data = load_ucbadmit()
    columns = tuple(np.resize(data[c], n) for c in ("dept", "male", "applications", "admit"))
    return columns, {"num_dept": int(len(np.unique(data["dept"])))}


def effppl_model(dept, male, applications, admit=None, num_dept=None):
    v_mu = effppl.sample("v_mu", dist.Normal(0, jnp.array([4.0, 1.0])))
    sigma = effppl.sample("sigma", dist.HalfNormal(jnp.ones(2)))
    L_Rho = effppl.sample("L_Rho", dist.LKJCholesky(2, concentration=2))
    scale_tril = sigma[..., jnp.newaxis] * L_Rho
    num_dept = len(np.unique(dept)) if num_dept is None else num_dept
    z = effppl.sample("z", dist.Normal(jnp.zeros((num_dept, 2)), 1))
    v = jnp.dot(scale_tril, z.T).T
    logits = v_mu[0] + v[dept, 0] + (v_mu[1] + v[dept, 1]) * male
    if admit is None:
        probs = expit(logits)
        effppl.deterministic("probs", probs)
    effppl.sample("admit", dist.Binomial(applications, logits=logits), obs=admit)


def numpyro_model(dept, male, applications, admit=None, num_dept=None):
    v_mu = numpyro.sample("v_mu", dist.Normal(0, jnp.array([4.0, 1.0])))
    sigma = numpyro.sample("sigma", dist.HalfNormal(jnp.ones(2)))
    L_Rho = numpyro.sample("L_Rho", dist.LKJCholesky(2, concentration=2))
    scale_tril = sigma[..., jnp.newaxis] * L_Rho
    # non-centered parameterization
    num_dept = len(np.unique(dept)) if num_dept is None else num_dept
    z = numpyro.sample("z", dist.Normal(jnp.zeros((num_dept, 2)), 1))
    v = jnp.dot(scale_tril, z.T).T
    logits = v_mu[0] + v[dept, 0] + (v_mu[1] + v[dept, 1]) * male
    if admit is None:
        # we use a Delta site to record probs for predictive distribution
        probs = expit(logits)
        numpyro.sample("probs", dist.Delta(probs), obs=probs)
    numpyro.sample("admit", dist.Binomial(applications, logits=logits), obs=admit)


def handwritten_log_density(params, dept, male, applications, admit, num_dept=None):
    """Log joint in unconstrained space: `sigma = exp(.)`; `L_Rho = [[1, 0], [tanh u, sech u]]`
    (NumPyro's `CorrCholeskyTransform` for 2x2), whose LKJ(2) density is `0.75 sech(u)^2`
    and Jacobian `sech(u)^2`."""
    v_mu, log_sigma, u, z = params["v_mu"], params["sigma"], params["L_Rho"][0], params["z"]
    sigma = jnp.exp(log_sigma)
    log_sech = jnp.log(2.0) - u - softplus(-2.0 * u)
    lp = jnp.sum(norm.logpdf(v_mu, 0.0, jnp.array([4.0, 1.0])))
    lp += jnp.sum(jnp.log(2.0) + norm.logpdf(sigma) + log_sigma)
    lp += 4.0 * log_sech + jnp.log(0.75)
    lp += jnp.sum(norm.logpdf(z))
    intercept = sigma[0] * z[:, 0]
    slope = sigma[1] * (jnp.tanh(u) * z[:, 0] + jnp.exp(log_sech) * z[:, 1])
    logits = v_mu[0] + intercept[dept] + (v_mu[1] + slope[dept]) * male
    n, k = applications, admit
    log_binom = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    return lp + jnp.sum(log_binom + k * logits - n * softplus(logits))


def latent_shapes(dept, male, applications, admit=None, num_dept=None):
    num_dept = len(np.unique(dept)) if num_dept is None else num_dept
    return {"v_mu": (2,), "sigma": (2,), "L_Rho": (1,), "z": (num_dept, 2)}
