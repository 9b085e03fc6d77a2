"""HSGP births model: relative births per day in the USA 1969-1988 as a sum of approximate GPs.

Ported from NumPyro's `examples/hsgp.py` (`birthdays_model`, `make_birthdays_data_dict`), which
replicates the full model of Vehtari's Birthdays case study (Gelman, Vehtari, Simpson et al. 2020,
"Bayesian workflow"): a long-term trend, a smooth yearly seasonality (periodic kernel), a slowly
varying day-of-week effect, a day-of-year effect with a regularised horseshoe prior, and floating
holidays. A benchmark model of the paper ("Handling JAX", §7.2; 7.3k days there). Data:
`models/data/births_usa_1969.csv` (see its SOURCE note).

Deviations from the published example (values unchanged up to rounding):

- argument order: the data arrays first and `y` next, then the static `w0, L, M1, M2, M3` as
  keywords (`make_data` returns them in `kwargs`), so every array can be traced;
- the periodic coefficients avoid the float32 overflow of `exp(a)`, and the square root of the SE
  spectral density is taken in log space (finite float32 gradients), see `models._hsgp_basis`;
- NumPyro's `scope(fn, "trend")` prefixes are written out as `"trend/..."` in the effppl model.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
from jax.scipy.special import gammaln
from jax.scipy.stats import norm
from numpyro.handlers import scope

import effppl
from effppl import distributions as dist
from models._data import SOURCES, load_births, resolve_size
from models._hsgp_basis import (
    diag_spectral_density_periodic,
    eigenfunctions_periodic,
    eigenfunctions_se,
    sqrt_diag_spectral_density_se,
)

NAME = "hsgp"
SIZES = {"quick": 730, "paper": 7_305}
_HOLIDAYS = (  # (name, month, weekday with Monday = 0, first day, last day)
    ("memorial", 5, 0, 25, 31),
    ("labour", 9, 0, 1, 7),
    ("thanksgiving", 11, 3, 22, 28),
)


def make_data(size="quick", seed=0):
    """The first `N` days, preprocessed as NumPyro's `make_birthdays_data_dict`: `((x, day_of_week,
    day_of_year, memorial, labour, thanksgiving indicators, y), {"w0", "L", "M1", "M2", "M3"})`.
    `seed` is unused.

    **Raises:** `SizeError` unless `size` is a key of `SIZES` or an int in 2..7305 (one day has
    no spread to standardise by); `DataFormatError`, `DataNotFoundError` from `load_births`.
    """
    del seed
    n = resolve_size(SIZES, size, NAME, min_size=2, max_size=SOURCES["births_usa_1969.csv"].rows)
    data = {k: v[:n] for k, v in load_births().items()}
    x = data["id"].astype(np.float64)
    y = data["births"] / data["births"].mean()
    xsd = (x - x.mean()) / x.std()
    ysd = (y - y.mean()) / y.std()
    weekday = data["day_of_week"] - 1
    indicators = []
    for _, month, day_of_week, first, last in _HOLIDAYS:
        is_day = (data["month"] == month) & (weekday == day_of_week)
        is_day &= (data["day"] >= first) & (data["day"] <= last)
        is_day_after = np.concatenate([[False], is_day[:-1]])
        indicators.append((is_day | is_day_after).astype(np.int64))
    args = (xsd, weekday, data["day_of_year"] - 1, *indicators, ysd)
    kwargs = {"w0": float(x.std() * 2 * np.pi / 365.25), "L": float(1.5 * xsd.max()),
              "M1": 10, "M2": 10, "M3": 5}
    return args, kwargs


# --- effppl ---
def _trend_gp(prefix, x, L, M):
    alpha = effppl.sample(f"{prefix}/alpha", dist.HalfNormal(1.0))
    length = effppl.sample(f"{prefix}/length", dist.InverseGamma(10.0, 2.0))
    spd = sqrt_diag_spectral_density_se(alpha, length, L, M)
    with effppl.plate(f"{prefix}/basis", M):
        beta = effppl.sample(f"{prefix}/beta", dist.Normal(0, 1))
    return effppl.deterministic(f"{prefix}/f", eigenfunctions_se(x, L, M) @ (spd * beta))


def _year_gp(x, w0, M):
    alpha = effppl.sample("year/alpha", dist.HalfNormal(1.0))
    length = effppl.sample("year/length", dist.HalfNormal(0.2))
    q2 = diag_spectral_density_periodic(alpha, length, M)
    cosines, sines = eigenfunctions_periodic(x, w0, M)
    with effppl.plate("year/cos_basis", M):
        beta_cos = effppl.sample("year/beta_cos", dist.Normal(0, 1))
    with effppl.plate("year/sin_basis", M - 1):
        beta_sin = effppl.sample("year/beta_sin", dist.Normal(0, 1))
    beta_sin = jnp.concatenate((jnp.zeros(1), beta_sin))  # sin(0 x) = 0: drop the first one
    return effppl.deterministic("year/f", cosines @ (q2 * beta_cos) + sines @ (q2 * beta_sin))


def _weekday_effect(day_of_week):
    with effppl.plate("week/plate_day_of_week", 6):
        weekday = effppl.sample("week/_beta", dist.Normal(0, 1))
    beta = jnp.concatenate((jnp.array([-jnp.sum(weekday)]), weekday))  # Monday = -sum(others)
    return effppl.deterministic("week/beta", beta)[day_of_week]


def _yearday_effect(day_of_year):
    tau = effppl.sample("day/tau", dist.HalfNormal(2 * 0.1))  # regularised horseshoe
    c_aux = effppl.sample("day/c_aux", dist.InverseGamma(0.5 * 50, 0.5 * 50))
    c = 2 * jnp.sqrt(c_aux)
    with effppl.plate("day/plate_day_of_year", 366):
        lam = effppl.sample("day/lam", dist.HalfCauchy(scale=1))
        lam_tilde = jnp.sqrt(c) * lam / jnp.sqrt(c + (tau * lam) ** 2)
        beta = effppl.sample("day/beta", dist.Normal(loc=0, scale=tau * lam_tilde))
    return beta[day_of_year]


def effppl_model(x, day_of_week, day_of_year, memorial_days_indicator, labour_days_indicator,
                 thanksgiving_days_indicator, y=None, *, w0, L, M1, M2, M3):
    intercept = effppl.sample("intercept", dist.Normal(0, 1))
    f1 = _trend_gp("trend", x, L, M1)
    f2 = _year_gp(x, w0, M2)
    g3 = _trend_gp("week-trend", x, L, M3)
    weekday = _weekday_effect(day_of_week)
    day = _yearday_effect(day_of_year)
    for name, indicator in [("memorial", memorial_days_indicator),
                            ("labour", labour_days_indicator),
                            ("thanksgiving", thanksgiving_days_indicator)]:
        day = day + effppl.sample(f"{name}/beta", dist.Normal(0, 1)) * indicator
    f = effppl.deterministic("f", intercept + f1 + f2 + jnp.exp(g3) * weekday + day)
    sigma = effppl.sample("sigma", dist.HalfNormal(0.5))
    with effppl.plate("obs", x.shape[0]):
        effppl.sample("y", dist.Normal(f, sigma), obs=y)


# --- NumPyro, as published (with `scope`) ---
def _np_approx_se_ncp(x, alpha, length, L, M):
    phi = eigenfunctions_se(x, L, M)
    spd = sqrt_diag_spectral_density_se(alpha, length, L, M)
    with numpyro.plate("basis", M):
        beta = numpyro.sample("beta", dist.Normal(0, 1))
    return numpyro.deterministic("f", phi @ (spd * beta))


def _np_approx_periodic_gp_ncp(x, alpha, length, w0, M):
    q2 = diag_spectral_density_periodic(alpha, length, M)
    cosines, sines = eigenfunctions_periodic(x, w0, M)
    with numpyro.plate("cos_basis", M):
        beta_cos = numpyro.sample("beta_cos", dist.Normal(0, 1))
    with numpyro.plate("sin_basis", M - 1):
        beta_sin = numpyro.sample("beta_sin", dist.Normal(0, 1))
    beta_sin = jnp.concatenate((jnp.array([0.0]), beta_sin))
    return numpyro.deterministic("f", cosines @ (q2 * beta_cos) + sines @ (q2 * beta_sin))


def _np_trend_gp(x, L, M):
    alpha = numpyro.sample("alpha", dist.HalfNormal(1.0))
    length = numpyro.sample("length", dist.InverseGamma(10.0, 2.0))
    return _np_approx_se_ncp(x, alpha, length, L, M)


def _np_year_gp(x, w0, M):
    alpha = numpyro.sample("alpha", dist.HalfNormal(1.0))
    length = numpyro.sample("length", dist.HalfNormal(0.2))  # scale=0.1 in original
    return _np_approx_periodic_gp_ncp(x, alpha, length, w0, M)


def _np_weekday_effect(day_of_week):
    with numpyro.plate("plate_day_of_week", 6):
        weekday = numpyro.sample("_beta", dist.Normal(0, 1))
    monday = jnp.array([-jnp.sum(weekday)])  # Monday = 0 in original
    beta = numpyro.deterministic("beta", jnp.concatenate((monday, weekday)))
    return beta[day_of_week]


def _np_yearday_effect(day_of_year):
    slab_df, slab_scale, scale_global = 50, 2, 0.1  # 100, 2, 0.1 in the original case study
    tau = numpyro.sample("tau", dist.HalfNormal(2 * scale_global))
    c_aux = numpyro.sample("c_aux", dist.InverseGamma(0.5 * slab_df, 0.5 * slab_df))
    c = slab_scale * jnp.sqrt(c_aux)
    with numpyro.plate("plate_day_of_year", 366):
        lam = numpyro.sample("lam", dist.HalfCauchy(scale=1))
        lam_tilde = jnp.sqrt(c) * lam / jnp.sqrt(c + (tau * lam) ** 2)
        beta = numpyro.sample("beta", dist.Normal(loc=0, scale=tau * lam_tilde))
    return beta[day_of_year]


def _np_special_effect(indicator):
    beta = numpyro.sample("beta", dist.Normal(0, 1))
    return beta * indicator


def numpyro_model(x, day_of_week, day_of_year, memorial_days_indicator, labour_days_indicator,
                  thanksgiving_days_indicator, y=None, *, w0, L, M1, M2, M3):
    intercept = numpyro.sample("intercept", dist.Normal(0, 1))
    f1 = scope(_np_trend_gp, "trend")(x, L, M1)
    f2 = scope(_np_year_gp, "year")(x, w0, M2)
    g3 = scope(_np_trend_gp, "week-trend")(x, L, M3)
    weekday = scope(_np_weekday_effect, "week")(day_of_week)
    yearday = scope(_np_yearday_effect, "day")(day_of_year)
    memorial = scope(_np_special_effect, "memorial")(memorial_days_indicator)
    labour = scope(_np_special_effect, "labour")(labour_days_indicator)
    thanksgiving = scope(_np_special_effect, "thanksgiving")(thanksgiving_days_indicator)
    day = yearday + memorial + labour + thanksgiving
    f = numpyro.deterministic("f", intercept + f1 + f2 + jnp.exp(g3) * weekday + day)
    sigma = numpyro.sample("sigma", dist.HalfNormal(0.5))
    with numpyro.plate("obs", x.shape[0]):
        numpyro.sample("y", dist.Normal(f, sigma), obs=y)


# --- hand-written log joint in unconstrained space ---
def _log_half_normal(x, scale):
    return jnp.log(2.0) + norm.logpdf(x, 0.0, scale)


def _log_inverse_gamma(x, a, b):
    return a * jnp.log(b) - gammaln(a) - (a + 1) * jnp.log(x) - b / x


def _positive(params, name):
    """`exp` of an unconstrained parameter and the log|Jacobian| of that map."""
    return jnp.exp(params[name]), jnp.sum(params[name])


def _se_gp(params, prefix, x, L, M):
    alpha, jac_a = _positive(params, f"{prefix}/alpha")
    length, jac_l = _positive(params, f"{prefix}/length")
    beta = params[f"{prefix}/beta"]
    lp = _log_half_normal(alpha, 1.0) + _log_inverse_gamma(length, 10.0, 2.0) + jac_a + jac_l
    lp += jnp.sum(norm.logpdf(beta))
    spd = sqrt_diag_spectral_density_se(alpha, length, L, M)
    return lp, eigenfunctions_se(x, L, M) @ (spd * beta)


def handwritten_log_density(params, x, day_of_week, day_of_year, memorial_days_indicator,
                            labour_days_indicator, thanksgiving_days_indicator, y,
                            *, w0, L, M1, M2, M3):
    """Log joint in unconstrained space; every positive site is `exp` of its parameter."""
    lp_trend, f1 = _se_gp(params, "trend", x, L, M1)
    lp_week_trend, g3 = _se_gp(params, "week-trend", x, L, M3)

    alpha, jac_a = _positive(params, "year/alpha")
    length, jac_l = _positive(params, "year/length")
    beta_cos, beta_sin = params["year/beta_cos"], params["year/beta_sin"]
    lp_year = _log_half_normal(alpha, 1.0) + _log_half_normal(length, 0.2) + jac_a + jac_l
    lp_year += jnp.sum(norm.logpdf(beta_cos)) + jnp.sum(norm.logpdf(beta_sin))
    q2 = diag_spectral_density_periodic(alpha, length, M2)
    cosines, sines = eigenfunctions_periodic(x, w0, M2)
    f2 = cosines @ (q2 * beta_cos) + sines[:, 1:] @ (q2[1:] * beta_sin)

    week = params["week/_beta"]
    lp_week = jnp.sum(norm.logpdf(week))
    weekday = jnp.concatenate((-jnp.sum(week, keepdims=True), week))[day_of_week]

    tau, jac_t = _positive(params, "day/tau")
    c_aux, jac_c = _positive(params, "day/c_aux")
    lam, jac_lam = _positive(params, "day/lam")
    day_beta = params["day/beta"]
    c = 2 * jnp.sqrt(c_aux)
    lam_tilde = jnp.sqrt(c) * lam / jnp.sqrt(c + (tau * lam) ** 2)
    lp_day = _log_half_normal(tau, 0.2) + _log_inverse_gamma(c_aux, 25.0, 25.0)
    lp_day += jnp.sum(jnp.log(2 / jnp.pi) - jnp.log1p(lam**2))  # HalfCauchy(1)
    lp_day += jnp.sum(norm.logpdf(day_beta, 0.0, tau * lam_tilde)) + jac_t + jac_c + jac_lam

    holidays = jnp.stack([params["memorial/beta"], params["labour/beta"],
                          params["thanksgiving/beta"]])
    lp_holidays = jnp.sum(norm.logpdf(holidays))
    day = day_beta[day_of_year] + (holidays[0] * memorial_days_indicator
                                   + holidays[1] * labour_days_indicator
                                   + holidays[2] * thanksgiving_days_indicator)

    intercept = params["intercept"]
    sigma, jac_s = _positive(params, "sigma")
    f = intercept + f1 + f2 + jnp.exp(g3) * weekday + day
    lp = norm.logpdf(intercept) + _log_half_normal(sigma, 0.5) + jac_s
    lp += lp_trend + lp_week_trend + lp_year + lp_week + lp_day + lp_holidays
    return lp + jnp.sum(norm.logpdf(y, f, sigma))


def latent_shapes(*args, w0, L, M1, M2, M3):
    shapes = {"intercept": (), "sigma": (), "week/_beta": (6,), "day/tau": (), "day/c_aux": (),
              "day/lam": (366,), "day/beta": (366,), "year/alpha": (), "year/length": (),
              "year/beta_cos": (M2,), "year/beta_sin": (M2 - 1,)}
    for prefix, m in (("trend", M1), ("week-trend", M3)):
        shapes.update({f"{prefix}/alpha": (), f"{prefix}/length": (), f"{prefix}/beta": (m,)})
    shapes.update({f"{name}/beta": () for name, *_ in _HOLIDAYS})
    return shapes
