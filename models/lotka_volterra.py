"""Lotka-Volterra predator-prey dynamics fitted to the Hudson's Bay lynx and hare pelts (1900-1920).

posteriordb's `hudson_lynx_hare-lotka_volterra` (after Carpenter's Stan case study "Predator-prey
population dynamics"): `du/dt = (alpha - beta v) u`, `dv/dt = (-gamma + delta u) v`, solved from
the unknown initial populations `z_init` at the 20 yearly measurement times; the measured
populations are log-normal around the solution. Stan integrates with `integrate_ode_rk45`
(Dormand-Prince 5(4)) at `rtol=1e-5`, `atol=1e-3`, at most 500 steps: the same here, with
`effppl.ode.solve` (`solver="dopri5"`), and with Diffrax for the NumPyro version. Parameters
`theta` (4, > 0: normal priors truncated at 0), `z_init` (2), `sigma` (2).

`load(folder)` reads posteriordb's `data.json` (the test data sit in
`tests/data/posteriordb/hudson_lynx_hare-lotka_volterra`).
"""

import json
import pathlib

import jax.numpy as jnp
import numpy as np
import numpyro

import effppl
from effppl import distributions as dist
from effppl import ode

NAME = "lotka_volterra"
RTOL, ATOL, MAX_STEPS = 1e-5, 1e-3, 500
THETA_LOC = np.array([1.0, 0.05, 1.0, 0.05])
THETA_SCALE = np.array([0.5, 0.05, 0.5, 0.05])


def load(folder):
    """`(ts (20,), y_init (2,), y (20, 2))` as float arrays, from posteriordb's `data.json`."""
    data = json.loads((pathlib.Path(folder) / "data.json").read_text())
    return (np.asarray(data["ts"], float), np.asarray(data["y_init"], float),
            np.asarray(data["y"], float))


def dz_dt(t, z, theta):
    """The Lotka-Volterra vector field: `z = (prey u, predator v)`, `theta = (alpha, beta,
    gamma, delta)`."""
    u, v = z[0], z[1]
    alpha, beta, gamma, delta = theta[0], theta[1], theta[2], theta[3]
    return jnp.stack([(alpha - beta * v) * u, (-gamma + delta * u) * v])


def _priors():
    return (dist.TruncatedNormal(THETA_LOC, THETA_SCALE, low=0.0).to_event(1),
            dist.LogNormal(jnp.log(10.0), 1.0).expand([2]).to_event(1),
            dist.LogNormal(-1.0, 1.0).expand([2]).to_event(1))


def effppl_model(ts, y_init, y=None):
    """The posteriordb model, its ODE solved by `effppl.ode.solve`."""
    theta_prior, z_prior, sigma_prior = _priors()
    theta = effppl.sample("theta", theta_prior)
    z_init = effppl.sample("z_init", z_prior)
    sigma = effppl.sample("sigma", sigma_prior)
    z = ode.solve(dz_dt, z_init, 0.0, ts[-1], args=theta, ts=ts, solver="dopri5", rtol=RTOL,
                  atol=ATOL, max_steps=MAX_STEPS).ys
    effppl.sample("y_init", dist.LogNormal(jnp.log(z_init), sigma).to_event(1), obs=y_init)
    effppl.sample("y", dist.LogNormal(jnp.log(z), sigma).to_event(2), obs=y)


def numpyro_model(ts, y_init, y=None):
    """The same model in NumPyro, its ODE solved by Diffrax (`Dopri5`, the same tolerances)."""
    import diffrax

    theta_prior, z_prior, sigma_prior = _priors()
    theta = numpyro.sample("theta", theta_prior)
    z_init = numpyro.sample("z_init", z_prior)
    sigma = numpyro.sample("sigma", sigma_prior)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(dz_dt), diffrax.Dopri5(), 0.0, ts[-1], None, z_init, args=theta,
        saveat=diffrax.SaveAt(ts=ts), max_steps=MAX_STEPS, throw=False,
        stepsize_controller=diffrax.PIDController(rtol=RTOL, atol=ATOL))
    numpyro.sample("y_init", dist.LogNormal(jnp.log(z_init), sigma).to_event(1), obs=y_init)
    numpyro.sample("y", dist.LogNormal(jnp.log(sol.ys), sigma).to_event(2), obs=y)
