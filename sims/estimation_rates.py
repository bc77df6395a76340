"""Minimax rates of private federated estimation, measured: Monte Carlo MSE over grids of sites S,
units n and eps for the seven mean-estimation settings, and over observations m for the
functional mean (docs/specs/estimation.md), with fitted slopes set beside the theory's exponents.

    python sims/estimation_rates.py --quick --out results/estimation_rates   # about 13 minutes
    python sims/estimation_rates.py --full --out results/estimation_rates_full   # about 35 minutes

(Times on two shared CPU cores; ``--quick`` took about 3 minutes with ``--noise float``: the exact
noise's sampler runs a loop per site, 8 of the 13 minutes in ``local-user-small``'s 4,096 sites.
``--full`` was last timed with the float noise.)

Writes ``DIR/rates.csv`` (setting, parameter, fitted_slope, slope_ci_low, slope_ci_high,
theory_slope, and how each was fitted), ``DIR/points.csv`` (every grid point's MSE with its
standard error) and the figures ``DIR/mean_rates.png`` (MSE against each parameter on log-log
axes, the theory's slope drawn through the middle point) and ``DIR/functional.png`` (the phase
transition in m at S = 1 and the gain of the anisotropic mechanism). Each setting's grid is one
sweep (:func:`jfed.sweep.run_sweep`): one compiled program for all its points, rows resumable in
``DIR/<setting>/runs.jsonl``.

What is fitted: the MSE of the private settings minus the estimator's exactly known noise-free
variance (``privacy_mse``, the price of privacy), in a regime where that term is the one the
theory's rate names; the ``none`` setting's MSE itself. ``calibrated_slope`` is the slope of the
variance the calibrated noise adds to the estimate (``noise_variance`` of the records: the
mechanism's constants and widths included), where the theory omits constants and log factors.
``local-user-large`` is exponential in S: its slope is of log MSE against S eps^2 (the theory
says negative, exp(-c S eps^2), without c).

Arithmetic: the releases run as the library runs them by default, on the integer grid (exact
discrete Laplace noise: the stated pure eps holds for the program as it runs; the Gaussian
mechanism's rows, ``--full`` only, exact discrete Gaussian noise at its exact (eps, delta); the
functional mean's, each function's whitened projection rounded and exact discrete Gaussian
noise on the batch sums); ``--noise float`` runs them with float32 noise instead (the ideal
real-valued mechanism; ``mechanism_model`` in the rows says which). The Gaussian rows and the
functional rows of ``--full`` were last run with float32 noise; ``--quick``'s functional part
with the exact release took about 6 minutes (re-run alone).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time
from dataclasses import dataclass

import matplotlib
import numpy as np

from jfed.methods import Estimation, FunctionalEstimation, build_experiment
from jfed.methods.estimation import search_law
from jfed.report.rates import fit_slope
from jfed.sweep.runner import run_sweep

matplotlib.use("Agg")
import matplotlib.pyplot as plt


@dataclass(frozen=True)
class Study:
    """One parameter of one setting: its values around a base point and the theory's slope."""

    setting: str
    parameter: str  # sites, units or epsilon
    values: tuple
    base: dict
    theory_slope: float
    regime: str
    log_x: bool = True
    data: str = "rademacher"
    mechanism: str = "laplace"

    @property
    def label(self) -> str:
        """The setting, with the data model and mechanism where they are not the defaults."""
        if (self.data, self.mechanism) == ("rademacher", "laplace"):
            return self.setting
        return f"{self.setting} ({self.data} data, {self.mechanism} noise)"


def _studies(full: bool) -> list[Study]:
    sites = (4, 8, 16, 32, 64, 128) if full else (4, 8, 16, 32, 64)
    units = (5, 10, 20, 40, 80, 160) if full else (5, 10, 20, 40, 80)
    epsilons = (0.125, 0.25, 0.5, 1.0, 2.0)
    studies = []

    def add(setting, base, grids, regime, **variant):
        for parameter, (values, slope) in grids.items():
            studies.append(Study(setting, parameter, tuple(values), base, slope, regime,
                                 **variant))  # fmt: skip

    add(
        "none",
        {"sites": 16, "units": 20},
        {"sites": (sites, -1.0), "units": (units, -1.0)},
        "1/(S n): the only term",
    )
    # (base point, grids) of the settings also studied with Gaussian data and noise
    local_item = (
        {"sites": 16, "units": 20, "epsilon": 0.5},
        {"sites": (sites, -1.0), "units": (units, -1.0), "epsilon": (epsilons, -2.0)},
    )
    federated = (
        {"sites": 16, "units": 10, "epsilon": 0.5},
        {"sites": (sites, -1.0), "units": (units, -2.0), "epsilon": (epsilons, -2.0)},
    )
    add("local-item", *local_item, "1/(S n eps^2): privacy term, every unit adds Laplace(2/eps)")
    add(
        "local-user-small",
        {"sites": 2048, "units": 16, "epsilon": 2.0},
        {
            "sites": ((256, 512, 1024, 2048, 4096), -1.0),
            "units": ((16, 24, 36, 54), -1.0),
            "epsilon": ((1.0, 1.4, 2.0, 2.8, 4.0), -2.0),
        },
        "1/(S n eps^2): small n (n << S eps^2), clipped to the located center +- 3 sd",
    )
    add(
        "central-item",
        {"sites": 4, "units": 8, "epsilon": 0.5},
        {
            "sites": ((2, 4, 8, 16, 32), -2.0),
            "units": ((2, 4, 8, 16, 32), -2.0),
            "epsilon": (epsilons, -2.0),
        },
        "1/(S^2 n^2 eps^2): privacy term (S n eps^2 small)",
    )
    add(
        "central-user",
        {"sites": 512, "units": 16, "epsilon": 2.0},
        {
            "sites": ((64, 128, 256, 512, 1024), -2.0),
            "units": ((16, 64, 256, 1024), -1.0),
            "epsilon": ((0.5, 1.0, 2.0, 4.0), -2.0),
        },
        "1/(S^2 n eps^2): small n (n << S^2 eps^2), clipped to the located center +- 3 sd",
    )
    add("federated", *federated,
        "1/(S n^2 eps^2): privacy term, each site adds Laplace(2/(n eps))")  # fmt: skip
    # eps <= 1, the seed's regime; past S = 400 the final stage's polynomial term takes over
    large_sites = (50, 100, 150, 200, 250, 300, 350, 400) if full else (50, 100, 200, 300, 400)
    studies.append(Study(
        "local-user-large", "sites", large_sites, {"units": 10**6, "epsilon": 1.0}, math.nan,
        "exp(-c S eps^2): large n (10^6), binary search by randomized response, then clipped; "
        "slope of log MSE against S eps^2; theory: c of this search, from the exact law of its "
        "votes (search_law: its 2^B vote outcomes enumerated)", log_x=False,
    ))  # fmt: skip
    if full:  # the sub-Gaussian model and the Gaussian mechanism ((eps, delta), analytic)
        gaussian = dict(data="gaussian", mechanism="gaussian")
        add(
            "local-item",
            *local_item,
            "1/(S n eps^2): privacy term; N(mu, 1) data clipped per unit",
            **gaussian,
        )
        add(
            "federated",
            *federated,
            "1/(S n^2 eps^2): privacy term; N(mu, 1) data clipped per unit",
            **gaussian,
        )
    return studies


def _configs(studies: list[Study], replications: int, seeds: int, noise: str | None = None):
    configs = {}
    for study in studies:
        for value in study.values:
            fields = {**study.base, study.parameter: value}
            for seed in range(seeds):
                config = Estimation(setting=study.setting, data=study.data,
                                    mechanism=study.mechanism, replications=replications,
                                    seed=seed, noise=noise if study.mechanism == "laplace"
                                    else None, **fields)  # fmt: skip
                configs[config] = None
    return list(configs)


def _mean_over_seeds(rows: list[dict], fields: dict, quantity: str) -> tuple[float, float]:
    """A grid point's value over seeds: the mean, and its standard error from the rows' own."""
    mine = [r for r in rows if all(r[k] == v for k, v in fields.items())]
    value = float(np.mean([r[quantity] for r in mine]))
    se = float(np.sqrt(np.sum([r["mse_se"] ** 2 for r in mine])) / len(mine))
    return value, se


def run_mean_studies(args, studies: list[Study]) -> tuple[list[dict], list[dict]]:
    rates, points = [], []
    for label in dict.fromkeys(s.label for s in studies):
        mine = [s for s in studies if s.label == label]
        setting = mine[0].setting
        configs = _configs(mine, args.replications, args.seeds, args.noise)
        folder = os.path.join(args.out, label.replace(" ", "_").replace(",", "").strip("()"))
        results = os.path.join(folder, "runs.jsonl")
        tic = time.perf_counter()
        rows = run_sweep(build_experiment(configs[0]), configs, results,
                         resume=os.path.exists(results), progress=False)  # fmt: skip
        print(f"{label}: {len(configs)} runs in one program (rows kept in {folder}), "
              f"{time.perf_counter() - tic:.1f} s")  # fmt: skip
        quantity = "mse" if setting == "none" else "privacy_mse"
        for study in mine:
            x, value, se, calibrated = [], [], [], []
            for v in study.values:
                fields = {**study.base, study.parameter: v}
                mean, error = _mean_over_seeds(rows, fields, quantity)
                theory = _mean_over_seeds(rows, fields, "theory_rate")[0]
                expected = _mean_over_seeds(rows, fields, "noise_variance")[0]
                calibrated.append(expected if setting != "none" else theory)
                x.append(v * (fields.get("epsilon", 1.0) ** 2 if not study.log_x else 1.0))
                value.append(mean)
                se.append(error)
                points.append({"setting": label, "parameter": study.parameter, "value": v,
                               **{k: fields.get(k) for k in ("sites", "units", "epsilon")},
                               "quantity": quantity, "estimate": mean, "standard_error": error,
                               "theory_rate": theory})  # fmt: skip
                if setting == "local-user-large":  # the search's MSE from its votes' exact law
                    config = Estimation(setting=setting, data=study.data,
                                        mechanism=study.mechanism, **fields)  # fmt: skip
                    points[-1]["exact_law"] = search_law(config)["privacy_mse"]
            fit = fit_slope(np.array(x), np.array(value), np.array(se), log_x=study.log_x)
            theory_slope = study.theory_slope
            if study.setting == "local-user-large":
                # the rate exp(-c S eps^2) names no c: this search's own, from its votes' exact
                # law, fitted with the measured points' weights
                exact = np.array([p["exact_law"] for p in points[-len(study.values) :]])
                theory_slope = round(fit_slope(np.array(x), exact, np.array(se),
                                               log_x=False).slope, 4)  # fmt: skip
            # the slope the calibrated noise predicts, constants and log factors included
            predicted = np.polyfit(np.log(x) if study.log_x else np.array(x),
                                   np.log(calibrated), 1)[0]  # fmt: skip
            agrees = str(fit.ci_low <= theory_slope <= fit.ci_high).lower()
            rates.append({
                "setting": label, "parameter": study.parameter,
                "fitted_slope": round(fit.slope, 4), "slope_ci_low": round(fit.ci_low, 4),
                "slope_ci_high": round(fit.ci_high, 4), "theory_slope": theory_slope,
                "theory_in_ci": agrees, "calibrated_slope": round(float(predicted), 4),
                "fit": "log-log" if study.log_x else "log MSE vs S eps^2",
                "quantity": quantity, "chi2": round(fit.chi2, 2), "points": fit.points,
                "regime": study.regime,
            })  # fmt: skip
    return rates, points


def _functional_rate(label, parameter, x, rows, theory, regime, quantity="mse") -> dict:
    """The slope of ``quantity`` (``mse`` or ``privacy_mse``) of ``rows`` against ``x``, and of
    the variance the calibrated noise adds to the average of the servers' iterates (its total
    over the r coordinates over S)."""
    value = [r[quantity] for r in rows]
    se = [r[f"{quantity}_se"] for r in rows]
    fit = fit_slope(np.asarray(x, np.float64), np.asarray(value), np.asarray(se))
    added = [r["noise_total_variance"] / r["servers"] for r in rows]
    calibrated = float(np.polyfit(np.log(x), np.log(added), 1)[0]) if min(added) > 0 else math.nan
    return {
        "setting": label, "parameter": parameter,
        "fitted_slope": round(fit.slope, 4), "slope_ci_low": round(fit.ci_low, 4),
        "slope_ci_high": round(fit.ci_high, 4), "theory_slope": round(theory, 4),
        "theory_in_ci": str(fit.ci_low <= theory <= fit.ci_high).lower(),
        "calibrated_slope": round(calibrated, 4), "fit": "log-log", "quantity": quantity,
        "chi2": round(fit.chi2, 2), "points": fit.points, "regime": regime,
    }  # fmt: skip


def _sweep(configs: list, folder: str) -> list[dict]:
    """One program for ``configs`` (padded to their largest S, n and m), rows kept in ``folder``."""
    os.makedirs(folder, exist_ok=True)
    results = os.path.join(folder, "runs.jsonl")
    return run_sweep(build_experiment(configs[0]), configs, results, resume=os.path.exists(results),
                     progress=False)  # fmt: skip


def run_functional(args) -> tuple:
    """S = 1: MSE against m for the anisotropic, isotropic and non-private estimators (one
    program each); then the slopes in S, n and eps of the dense private term (one program
    each)."""
    observations = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    functions, epsilon, alpha = (200, 1.0, 2.0) if args.full else (100, 1.0, 2.0)
    if not args.full:
        observations = observations[:-1]
    replications = args.functional_replications
    rows: dict = {}
    for mechanism in ("anisotropic", "isotropic", "none"):
        tic = time.perf_counter()
        base = FunctionalEstimation(servers=1, functions=functions, epsilon=epsilon,
                                    smoothness=alpha, noise_shape=mechanism,
                                    replications=replications,
                                    noise=None if mechanism == "none" else args.noise)  # fmt: skip
        configs = [base.replace(observations=m) for m in observations]
        found = _sweep(configs, os.path.join(args.out, f"functional-m-{mechanism}"))
        rows.update({(mechanism, r["observations"]): r for r in found})
        print(f"functional, m ({mechanism}): {len(configs)} runs in one program, "
              f"{time.perf_counter() - tic:.1f} s")  # fmt: skip
    # the private sparse term (1/(n^2 m eps^2))^(2a/(2a+2)) meets the dense 1/(n^2 eps^2) at
    # m* = (n^2 eps^2)^(1/a); below m* the sparse term dominates
    transition = (functions**2 * epsilon**2) ** (1.0 / alpha)
    rates, points = [], []
    for mechanism in ("anisotropic", "isotropic"):
        sparse = [m for m in observations if m <= transition / 4]
        rates.append(_functional_rate(
            f"functional ({mechanism})", "observations", sparse,
            [rows[(mechanism, m)] for m in sparse], -alpha / (alpha + 1.0),
            f"S = 1, n = {functions}, eps = {epsilon}, alpha = {alpha}: m <= m*/4 (m* = "
            f"(n^2 eps^2)^(1/alpha) = {transition:.0f}), the sparse private term "
            "(1/(S n^2 m eps^2))^(2 alpha/(2 alpha + 2)); r rate-optimal per point",
        ))  # fmt: skip
    for (mechanism, m), row in rows.items():
        points.append({"setting": f"functional ({mechanism})", "parameter": "observations",
                       "value": m, "sites": 1, "units": functions, "epsilon": epsilon,
                       "quantity": "mse", "estimate": row["mse"], "standard_error": row["mse_se"],
                       "theory_rate": row["theory_rate"], "terms": row["terms_used"]})  # fmt: skip
    # the dense private term 1/(S n^2 eps^2): the variance the noise adds (paired: the same
    # data's noise-free estimate subtracted), at m = 256 (past m* = 5), where each coordinate's
    # clipping bound is mostly its coefficient bound rather than its sqrt(1/m) part, and at a
    # fixed r (the base point's rate-optimal r = 2): this term does not depend on r once the
    # coefficient bounds dominate (their sum converges), while a rate-optimal r per point steps
    # 2 -> 3 -> 4 across these grids and adds its own factor. delta = 1e-8: the analytic
    # Gaussian's sigma^2 grows as ln(eps / delta) / eps^2, a log factor the rate omits (at
    # delta = 1e-5 it moves the eps slope to -1.83).
    dense = dict(servers=1, functions=50, observations=256, epsilon=0.1, smoothness=alpha,
                 terms=2, delta=1e-8, replications=replications, noise=args.noise)  # fmt: skip
    grids = {"servers": (1, 2, 4, 8), "functions": (25, 50, 100, 200),
             "epsilon": (0.05, 0.1, 0.2, 0.4)}  # fmt: skip
    theory = {"servers": -1.0, "functions": -2.0, "epsilon": -2.0}
    for name, values in grids.items():
        configs = [FunctionalEstimation(**{**dense, name: value}) for value in values]
        tic = time.perf_counter()
        found = _sweep(configs, os.path.join(args.out, f"functional-dense-{name}"))
        print(f"functional, {name} (anisotropic, dense): {len(configs)} runs in one program, "
              f"{time.perf_counter() - tic:.1f} s")  # fmt: skip
        mine = [next(r for r in found if r[name] == value) for value in values]
        rates.append(_functional_rate(
            "functional (anisotropic)", name, values, mine, theory[name],
            "dense private term 1/(S n^2 eps^2), the noise's variance (privacy_mse: paired with "
            "the noise-free estimate): m = 256, r = 2 fixed, delta = 1e-8 (S = 1, n = 50, "
            "eps = 0.1 unless varied)", quantity="privacy_mse",
        ))  # fmt: skip
        for value, row in zip(values, mine, strict=True):
            points.append({"setting": "functional (anisotropic)", "parameter": name,
                           "value": value, "quantity": "privacy_mse",
                           "estimate": row["privacy_mse"], "standard_error": row["privacy_mse_se"],
                           "theory_rate": row["theory_private"],
                           "terms": row["terms_used"]})  # fmt: skip
    return rates, points, rows, observations, transition, functions, alpha


def _write_csv(path: str, rows: list[dict]) -> None:
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        writer.writerows(rows)


def plot_mean(points: list[dict], rates: list[dict], path: str) -> None:
    # every slope but the functional m-study's (functional.png shows that one)
    panels = [
        (r["setting"], r["parameter"])
        for r in rates
        if not (r["setting"].startswith("func") and r["parameter"] == "observations")
    ]
    columns = 4
    rows_ = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(rows_, columns, figsize=(4.2 * columns, 3.4 * rows_),
                                squeeze=False)  # fmt: skip
    for axis, (setting, parameter) in zip(axes.flat, panels, strict=False):
        mine = [p for p in points if p["setting"] == setting and p["parameter"] == parameter]
        rate = next(r for r in rates if (r["setting"], r["parameter"]) == (setting, parameter))
        x = np.array([p["value"] for p in mine], np.float64)
        y = np.array([p["estimate"] for p in mine])
        se = np.array([p["standard_error"] for p in mine])
        axis.errorbar(x, y, yerr=2 * se, marker="o", capsize=2, label="measured (+-2 se)")
        middle = len(x) // 2
        if rate["fit"] == "log-log":
            axis.plot(x, y[middle] * (x / x[middle]) ** rate["theory_slope"], "k--",
                      label=f"theory slope {rate['theory_slope']:g}")  # fmt: skip
            axis.set_xscale("log")
        else:  # log MSE against S eps^2: the search's MSE from its votes' exact law
            exact = np.array([p["exact_law"] for p in mine], np.float64)
            label = f"exact law of the search (c = {-rate['theory_slope']:.4f})"
            axis.plot(x, exact, "k--", marker="x", label=label)
        axis.set_yscale("log")
        axis.set_xlabel(parameter)
        axis.set_ylabel(rate["quantity"].replace("_", " "))
        axis.set_title(f"{setting}: fitted {rate['fitted_slope']:.3g} "
                       f"[{rate['slope_ci_low']:.3g}, {rate['slope_ci_high']:.3g}]",
                       fontsize=9)  # fmt: skip
        axis.grid(alpha=0.3, which="both")
        axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(panels) :]:
        axis.axis("off")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def plot_functional(
    rows: dict, observations, transition: float, functions: int, alpha: float, path: str
) -> None:
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    m = np.array(observations, np.float64)
    for mechanism in ("anisotropic", "isotropic", "none"):
        y = np.array([rows[(mechanism, v)]["mse"] for v in observations])
        se = np.array([rows[(mechanism, v)]["mse_se"] for v in observations])
        label = "non-private" if mechanism == "none" else mechanism
        left.errorbar(m, y, yerr=2 * se, marker="o", capsize=2, label=label)
    left.axvline(transition, color="gray", linestyle=":",
                 label="private: m* = (n^2 eps^2)^(1/alpha)")  # fmt: skip
    left.axvline(functions ** (1.0 / (2.0 * alpha)), color="green", linestyle=":",
                 label="non-private: m = n^(1/(2 alpha))")  # fmt: skip
    left.set(
        xscale="log",
        yscale="log",
        xlabel="observations per function m",
        ylabel="||mu~ - mu*||^2 (MSE)",
        title="S = 1: the phase transition in m",
    )
    left.legend(fontsize=8)
    left.grid(alpha=0.3, which="both")
    gain = [rows[("isotropic", v)]["mse"] / rows[("anisotropic", v)]["mse"] for v in observations]
    right.plot(m, gain, marker="o")
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set(xscale="log", xlabel="observations per function m",
              ylabel="MSE isotropic / MSE anisotropic", title="gain of the anisotropic mechanism "
              "(equal eps, delta)")  # fmt: skip
    right.grid(alpha=0.3, which="both")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="small grids (default; about 13 minutes)")  # fmt: skip
    size.add_argument("--full", action="store_true", help="larger grids and more replications")
    parser.add_argument("--out", default="results/estimation_rates")
    parser.add_argument("--noise", choices=("discrete", "float"), default=None,
                        help="the Laplace releases' and the functional mean's arithmetic "
                        "(default: the library's, the exact integer grid)")  # fmt: skip
    args = parser.parse_args()
    args.replications = 2000 if args.full else 400
    args.seeds = 3 if args.full else 2
    args.functional_replications = 100 if args.full else 30
    os.makedirs(args.out, exist_ok=True)
    tic = time.perf_counter()
    rates, points = run_mean_studies(args, _studies(args.full))
    functional = run_functional(args)
    functional_rates, functional_points, rows, observations = functional[:4]
    rates += functional_rates
    points += functional_points
    _write_csv(os.path.join(args.out, "rates.csv"), rates)
    _write_csv(os.path.join(args.out, "points.csv"), points)
    plot_mean(points, rates, os.path.join(args.out, "mean_rates.png"))
    plot_functional(rows, *functional[3:], os.path.join(args.out, "functional.png"))
    print(f"\n{'setting':<44s}{'parameter':<13s}{'fitted':>8s}  {'95% CI':<18s}{'theory':>7s}"
          f"  in CI  calibrated")  # fmt: skip
    for r in rates:
        ci = f"[{r['slope_ci_low']:.3f}, {r['slope_ci_high']:.3f}]"
        print(f"{r['setting']:<44s}{r['parameter']:<13s}{r['fitted_slope']:>8.3f}  {ci:<18s}"
              f"{r['theory_slope']:>7.3g}  {r['theory_in_ci']:<5s}  "
              f"{r.get('calibrated_slope', math.nan):.3f}")  # fmt: skip
    gain = [rows[("isotropic", m)]["mse"] / rows[("anisotropic", m)]["mse"] for m in observations]
    print(
        "anisotropic gain (MSE isotropic / anisotropic) by m: "
        + ", ".join(f"{m}: {g:.2f}" for m, g in zip(observations, gain, strict=True))
    )
    print(
        f"wrote {args.out}/rates.csv, points.csv, mean_rates.png, functional.png "
        f"({time.perf_counter() - tic:.0f} s)"
    )


if __name__ == "__main__":
    main()
