"""The silo methods of the inter-silo record-level DP paper as experiments (Noisy MB-SGD, its
accelerated, shuffled and local-step variants, and the non-private baselines).

Every silo's noise is calibrated on the host from its own size n_i; the program runs on the
device; the evaluation is in float64 on the host: excess train / test risk against the
constrained optimum w*, the heterogeneity upsilon_*^2, and the test error (classification) or
relative RMSE (regression). Settings are chosen on the training loss (the paper tunes its step
size on it; the silo tasks have no validation split).

Privacy. Every round makes one release through its aggregator
(:mod:`jfed.algorithms.silo_aggregators`), which states its event; a run's event is that event
composed over the rounds its sampler composes (one for disjoint one-pass batches), taken silo by
silo (:func:`jfed.privacy.parallel.per_branch`: ISRL-DP holds for each silo's transcript, the
guarantee stated is the worst silo's). The exact calibration searches each silo size's noise
through those events and the record's eps is what the accountant certifies for them; a formula
calibration certifies nothing (``epsilon_certified`` None) and its record carries
``exact_epsilon``, what PLD certifies for its noise had the silos sampled by Poisson (the same
program with Poisson sampling, traced).

Arithmetic (``--noise``). Noisy MB-SGD, its accelerated variant and Local SGD release on an
integer grid by default (``discrete``: exact discrete Gaussian noise,
:class:`~jfed.algorithms.silo_aggregators.SiloDiscreteGaussian`), so the guarantee holds for
the program as it runs; their events are certified by the accountants of the float release
through the continuous Gaussian the discrete noise is coupled to
(:func:`jfed.privacy.discrete_accounting.coupled_gaussian`), the coupling's total variation
added to delta (``delta_coupling``, about 10^-73). ``float`` keeps the float32 Gaussian, whose
records say "ideal real-valued mechanism; floating-point sampling not modelled" in their notion
and ``mechanism_model``. shuffle-mbsgd's messages are local randomizers, float32 by default (as
the other local randomizers', modulated's and dpsgd's: the fast path) and exact with ``discrete``
(:class:`~jfed.algorithms.silo_aggregators.ShuffledGridMessages`: every message rounded to the
grid and noised with its own exact discrete Gaussian, its (eps0, delta0) certified through the
continuous Gaussian its noise is coupled to, the coupling's total variation inside delta0:
``delta0_coupling``, and its share of the run's delta: ``delta_coupling``).
"""

from __future__ import annotations

import math

import jax
import numpy as np

from jfed._validation import UsageError
from jfed.algorithms import silo_aggregators, silo_metrics, silo_privacy, silo_sgd
from jfed.algorithms.losses import Loss
from jfed.algorithms.silo_aggregators import (
    POISSON,
    SAMPLINGS,
    WITHOUT_REPLACEMENT,
    CanaryRecords,
    ShuffleCanaries,
    ShuffledGridMessages,
    ShuffledMessages,
)
from jfed.data.silos import SiloTask, load_silos
from jfed.methods import declared
from jfed.methods.experiment import (
    CanaryAudit,
    Experiment,
    Output,
    declared_outputs,
    guarantee_of,
    non_private_fields,
    timings,
)
from jfed.methods.record_fields import RecordFields
from jfed.privacy import Adjacency, Advanced, Analytic, rounds_of, spent
from jfed.privacy.discrete_accounting import coupled_gaussian, coupling_delta, delta_after_coupling
from jfed.privacy.discrete_aggregators import largest_grid_norm
from jfed.privacy.parallel import branches, per_branch
from jfed.privacy.shuffle import shuffle_validity_limit

AUDIT_NOTION = (
    "(eps, delta)-DP, one canary record of one silo present or absent (the replace-one pair of "
    "the canary and a record of zero gradient)"
)
"""What a silo method's audit tests (:class:`~jfed.algorithms.silo_aggregators.CanaryRecords`)."""

EXACT_MODEL = (
    "exact: each record's clipped gradient rounded to an integer grid (conditional randomized "
    "rounding, its norm bound checked in integers), the silo's integer sum, discrete Gaussian "
    "noise sampled exactly in integer arithmetic, scaled back after the noise; certified as the "
    "float release of the same sigma through the continuous Gaussian the discrete noise is "
    "coupled to (its variance less 9 grid units), the coupling's total variation added to delta"
)
"""What an exact silo release's record says of its arithmetic (``mechanism_model``)."""

SHUFFLE_EXACT_MODEL = (
    "exact: each message its record's clipped gradient rounded to an integer grid (conditional "
    "randomized rounding, its norm bound checked in integers) plus its own discrete Gaussian "
    "noise sampled exactly in integer arithmetic, scaled back; each message's (eps0, delta0) "
    "certified as the continuous Gaussian its noise is coupled to (its variance less 9 grid "
    "units), the coupling's total variation added to delta0; the shuffling bound and the "
    "composition over the rounds on top"
)
"""What an exact shuffle-mbsgd record says of its arithmetic (``mechanism_model``)."""


def load_task(config: declared.SiloData) -> SiloTask:
    return load_silos(
        config.dataset, mixing=config.mixing, n_silos=config.silos, seed=config.data_seed
    )


def _params_as_ran(release, hyper):
    """A release's aggregator parameters read from host hyper-parameters ``hyper`` as the device
    ran them (float32, then float64), array leaves included (a noise std per silo)."""
    leaves = dict(jax.tree_util.tree_flatten_with_path(hyper)[0])
    values = [np.asarray(leaves[path], np.float32).astype(np.float64)
              for path in release.params_paths]  # fmt: skip
    return jax.tree_util.tree_unflatten(release.params_treedef, values)


_KEPT = (
    Output("w", "state.w_average"),
    Output("w_per_round", "infos.w"),
    Output("available", "infos.available"),
    Output("clipped_fraction", "infos.clipped_fraction", reduce="mean"),
)
_FALLBACKS = Output("rounding_fallbacks", "infos.rounding_fallbacks", reduce="sum")
OUTPUTS = declared_outputs(_KEPT, "SiloExperiment")
"""The kept arrays of every silo run; a run on the grid also keeps its rounding fallbacks, an
audited run its canaries (:attr:`SiloExperiment.outputs`)."""


class SiloExperiment(CanaryAudit, Experiment):
    """Shared by the silo methods; subclasses name their program and their calibration."""

    record_fields = RecordFields(
        inside=("test_error", "test_error_per_round"),
        outside=("clipped_fraction", "excess_test_risk", "excess_train_risk",
                 "optimum_test_error", "heterogeneity", "available_per_round",
                 "rounding_fallbacks"),
    )  # fmt: skip
    """The model's test error is post-processing of the noised releases; the non-private
    optimum (fit on the silos' records) and everything measured against it, the silos'
    heterogeneity, their realised availability, the clipped counts and the grid's rounding
    fallbacks are not."""

    selection_metric = "excess_train_risk"
    selection_maximize = False
    default_sampling = "with-replacement"

    def __init__(self, config: declared.SiloTraining, task: SiloTask | None = None) -> None:
        super().__init__(config)
        self.task = task if task is not None else load_task(config)
        self.counts = np.asarray(self.task.train.counts)
        self.records = tuple(int(n) for n in self.counts)
        self.loss = Loss(self.task.loss, self.task.classes)
        self.sampling = SAMPLINGS[self.choose_sampling(config)]
        if self.sampling.disjoint_rounds and config.rounds * config.batch > self.counts.min():
            raise UsageError(
                f"expected rounds * batch <= the smallest silo ({self.counts.min()} records) for "
                f"the one-pass algorithm, got {config.rounds} * {config.batch}"
            )
        if self.sampling is WITHOUT_REPLACEMENT and config.batch > self.counts.min():
            raise UsageError(
                f"expected --batch <= the smallest silo ({self.counts.min()} records): "
                f"{self.name} samples K distinct records a round, got --batch {config.batch}"
            )
        if (
            self.sampling is POISSON
            and not isinstance(config, declared.LocalSGD)
            and config.batch > self.counts.min()
        ):  # a rate K / n above 1 would be capped silently: K records are not what a round takes
            raise UsageError(
                f"expected --batch <= the smallest silo ({self.counts.min()} records): Poisson "
                f"sampling draws each record with probability K / n <= 1, got --batch "
                f"{config.batch}"
            )
        self.availability = silo_sgd.AVAILABILITIES[config.availability]
        self.report_metric = "relative_rmse" if self.loss.regression else "test_error"
        self._noise: dict = {}
        self._optima: dict = {}
        # the integer grid's clip norm in grid units, for --noise discrete (prepare() fits it)
        self.grid_norm: int | None = None
        if self.exact:
            self.grid_norm = self._grid_norm_for(1.0)

    # -- what a subclass declares
    def choose_sampling(self, config) -> str:
        return config.sampling or self.default_sampling

    def program(self, sampling, **common):
        """The static program sampling records with ``sampling``."""
        aggregator = silo_sgd.minibatch_aggregator(self.method.private, sampling,
                                                   self.config.batch, self.records,
                                                   grid=self.grid)  # fmt: skip
        return silo_sgd.NoisyMBSGD(**common, sampling=sampling, aggregator=self.audited(aggregator))

    # -- the arithmetic (``--noise``)
    @property
    def exact(self) -> bool:
        """Whether the run's releases are on the integer grid (``--noise discrete``)."""
        return (
            self.method.private
            and declared.common.GRID_NOISES[getattr(self.base_config, "noise", "float")]
        )

    @property
    def grid(self) -> silo_sgd.Grid | None:
        """The integer grid of an exact run (``None`` for float noise)."""
        if not self.exact:
            return None
        assert self.grid_norm is not None  # set in __init__ for an exact run
        return silo_sgd.Grid(self.loss.param_dim(self.task.dim), self.grid_norm)

    def _grid_norm_for(self, multiplier: float) -> int:
        """The finest grid (at most :data:`~jfed.algorithms.silo_aggregators.GRID_NORM`) whose
        noise at ``multiplier`` (a silo's noise std over a record's share L / K, at most the
        grid's multiplier) is in the sampler's range and on which a silo's int32 sum of all its
        records stays exact."""
        try:
            return largest_grid_norm(self.loss.param_dim(self.task.dim), int(self.counts.max()),
                                     multiplier, most=silo_aggregators.GRID_NORM)  # fmt: skip
        except ValueError as error:
            raise UsageError(f"method {self.name}: {error}: use --noise float") from None

    def _fit_grid(self) -> bool:
        """Narrow the grid to the largest noise calibrated so far (each silo's release is
        certified as the float release of its noise std, on any grid: nothing is calibrated
        again); whether it changed."""
        share = self.record_share(self.config)
        largest = max(
            (float(np.max(noise)) * share / clip for (_, clip), (noise, _) in self._noise.items()),
            default=1.0,
        )
        fitted = self._grid_norm_for(max(largest, 1.0))
        if self.grid_norm is not None and fitted >= self.grid_norm:
            return False
        self.grid_norm = fitted
        self.__dict__.pop("_reference", None)
        return True

    def certify(self, config, epsilon: float, noise, label: str, delta: float) -> dict:
        """The privacy fields of a run at each silo's ``noise`` (calibrated for ``epsilon``)
        (the calibrated methods')."""
        raise NotImplementedError

    def record_share(self, config) -> int:
        """K: the minibatch mean's denominator (one record's share of it is L / K)."""
        return config.batch

    def coupling_delta(self, epsilon: float, ledger=None) -> float:
        """``(1 + e^eps) T``: what the coupling of an exact run's noise to the continuous
        Gaussian adds to delta at ``epsilon`` (T: the total variation over one silo's whole run,
        :meth:`~jfed.algorithms.silo_aggregators.SiloDiscreteGaussian.coupling_total_variation`;
        0 for float noise)."""
        release = (ledger or self.ledger()).only_release("a silo round")
        variation = release.aggregator.coupling_total_variation(self.rounds)
        return coupling_delta(epsilon, variation)

    def delta_left(self, epsilon: float, delta: float) -> float:
        """``delta - coupling_delta(epsilon)``: what the accountant certifies at, refused (naming
        ``--epsilon``) where the coupling's share leaves no delta."""
        release = self.ledger().only_release("a silo round")
        variation = release.aggregator.coupling_total_variation(self.rounds)
        return delta_after_coupling(epsilon, variation, delta)

    def noise_fields(self, epsilon: float, delta: float, ledger=None) -> dict:
        """What a private record says of its arithmetic: ``mechanism_model`` and, on the grid,
        delta's split into ``delta_accountant`` and ``delta_coupling`` (at the certified
        ``epsilon``); a float record's notion says what it does not model. (The grid's own
        fields: :meth:`grid_fields`.)"""
        if not self.exact:
            from jfed.methods.dp_fedavg import IDEAL

            return {"mechanism_model": IDEAL, "notion": f"{self.method.notion} ({IDEAL})"}
        coupling = self.coupling_delta(epsilon, ledger)
        return {"mechanism_model": EXACT_MODEL, "delta_accountant": delta - coupling,
                "delta_coupling": coupling}  # fmt: skip

    def grid_fields(self) -> dict:
        """An exact run's grid: ``grid_norm`` and ``noise_inflation`` (a record's sensitivity on
        the grid over the float release's, and about the noise std on the mean over ``sigma``);
        nothing for float noise."""
        if not self.exact:
            return {}
        return {"grid_norm": self.grid_norm,
                "noise_inflation": self.grid_release().noise_inflation()}  # fmt: skip

    def grid_release(self, ledger=None) -> silo_aggregators.SiloDiscreteGaussian:
        """An exact run's release of one silo (Local SGD's steps, an audit's inner release)."""
        release = (ledger or self.ledger()).only_release("a silo round")
        aggregator = release.aggregator
        while not isinstance(aggregator, silo_aggregators.SiloDiscreteGaussian):
            aggregator = aggregator.inner  # an audit's, Local SGD's steps' (self.exact)
        return aggregator

    def check_noise(self, hyper) -> None:
        """An exact run's noise that its grid cannot draw is refused, naming the flags."""
        if not self.exact:
            return
        release = self.ledger().only_release("a silo round")
        try:
            self.grid_release().check(_params_as_ran(release, hyper))
        except ValueError as error:
            raise UsageError(
                f"method {self.name} with --noise discrete: {error} (run the eps of a sweep "
                "together so the grid fits the smallest, or use --noise float)"
            ) from None

    # -- the audit (``--audit-canaries``; :class:`~jfed.methods.experiment.CanaryAudit`)
    @property
    def canary_silo(self) -> int:
        """The silo holding the canary records: the smallest (its records are sampled most
        often, K / n_s per round; the first of the smallest)."""
        return int(np.argmin(self.counts))

    def audited(self, aggregator):
        """``aggregator`` with the audit's canary records (:class:`CanaryRecords`; Local SGD's
        steps: :class:`~jfed.algorithms.silo_sgd.LocalStepCanaries`), or as it is without
        ``--audit-canaries``."""
        if not self.canaries:
            return aggregator
        if isinstance(aggregator, silo_sgd.LocalSteps):
            return silo_sgd.LocalStepCanaries(aggregator, self.canaries, self.canary_silo)
        return CanaryRecords(aggregator, self.canaries, self.canary_silo)

    @property
    def outputs(self):
        """The kept arrays; a run on the grid also keeps its rounding fallbacks (summed over the
        rounds), an audited run its canaries' final state."""
        declared = (*_KEPT, *((_FALLBACKS,) if self.exact else ()),
                    *self.canary_outputs("state.aggregator"))  # fmt: skip
        return OUTPUTS if declared == _KEPT else declared_outputs(declared, "SiloExperiment")

    def audit_delta(self, config) -> float:
        """The silos' delta (every run of a sweep shares it)."""
        del config
        return self.delta

    def audit_context(self) -> dict:
        """What the silo audit tests (:data:`AUDIT_NOTION`) and the canaries' silo."""
        return {"audit_notion": AUDIT_NOTION, "audit_silo": self.canary_silo}

    def calibrate_many(self, config, epsilons: list[float], delta: float) -> list[tuple]:
        """``[(noise std f64[N], privacy fields)]``, one per eps."""
        del config, delta
        fields = non_private_fields(self.method)
        return [(np.zeros(len(self.counts)), dict(fields)) for _ in epsilons]

    # -- the experiment
    @property
    def rounds(self) -> int:
        return self.config.rounds

    @property
    def delta(self) -> float:
        given = getattr(self.config, "delta", None)
        return given if given is not None else 1.0 / float(self.counts.min()) ** 2

    def build(self, sampling):
        """The program with the configuration's fixed fields, sampling records with
        ``sampling``."""
        return self.program(
            sampling, loss=self.loss, dim=self.task.dim, n_silos=self.task.n_silos,
            batch=self.config.batch, rounds=self.config.rounds, availability=self.availability,
            available=self.config.available or 0, average_last=self.config.average_last,
        )  # fmt: skip

    @property
    def algorithm(self):
        return self.build(self.sampling)

    def identity(self) -> dict:
        return {
            "dataset": self.config.dataset_label,
            "n_clients": self.task.n_silos,
            "n_silos": self.task.n_silos,
            "records": int(self.counts.sum()),
            "dim": self.task.dim,
            "sampling": self.sampling.name,
        }

    def hyperparams(self, config, noise) -> silo_sgd.Hyperparams:
        """The traced numbers of one run; ``noise``: each silo's noise std (one value for all,
        or ``None`` for none)."""
        return silo_sgd.hyperparams(
            self.task.n_silos, step_size=config.step_size, clip_norm=config.gradient_clip,
            radius=config.radius, noise_std=0.0 if noise is None else noise,
            ridge=getattr(config, "ridge", 0.0),
        )  # fmt: skip

    # -- privacy: the events the round's aggregator states
    def composed_event(self, hyper, ledger=None):
        """The run's event at host hyper-parameters ``hyper`` as the releases compose: the round's
        release (:meth:`ledger`, or ``ledger``) at the parameters that ran, over the rounds the
        sampler composes."""
        release = (ledger or self.ledger()).only_release("a silo round")
        event = release.aggregator.event(_params_as_ran(release, hyper))
        # an exact release is accounted as the continuous Gaussian it is coupled to (its total
        # variation is added to delta: coupling_delta)
        return rounds_of(coupled_gaussian(event), self.sampling.rounds_composed(self.rounds))

    def run_event(self, hyper, ledger=None):
        """:meth:`composed_event` silo by silo (the worst silo's guarantee is stated)."""
        return per_branch(self.composed_event(hyper, ledger))

    def certified_epsilon(
        self, hyper, delta: float, accountant, ledger=None, reserve: float = 0.0
    ) -> float:  # fmt: skip
        """eps that ``accountant`` certifies at ``delta`` for the run's events (replace-one
        adjacency of one record), less, for an exact run, the coupling's share of delta
        (:meth:`coupling_delta` at ``reserve``, or at the eps found where that is larger)."""
        event = self.run_event(hyper, ledger)
        while True:
            share = self.coupling_delta(reserve, ledger)
            epsilon = spent(event, delta - share, accountant=accountant,
                            adjacency=Adjacency.REPLACE_ONE)  # fmt: skip
            if self.coupling_delta(epsilon, ledger) <= share:
                return epsilon
            reserve = epsilon

    def prepare(self, configs) -> None:
        """Calibrate every (eps, clip) of ``configs`` up front, the eps of one clip together (the
        exact calibration then shares its PLD work across them); an exact run's grid is then
        narrowed to the largest noise, and calibrated again on it where it changed."""
        wanted: dict[float, set] = {}
        for config in configs:
            epsilon = getattr(config, "epsilon", math.inf)
            wanted.setdefault(config.gradient_clip, set()).add(epsilon)
        for _ in range(8):
            for clip, epsilons in wanted.items():
                missing = sorted(e for e in epsilons if (e, clip) not in self._noise)
                if missing:
                    results = self.calibrate_many(
                        self.config.replace(gradient_clip=clip), missing, self.delta
                    )
                    self._noise.update({(e, clip): r for e, r in
                                        zip(missing, results, strict=True)})  # fmt: skip
            if not (self.exact and self._fit_grid()):
                return
        raise UsageError(f"method {self.name}: no grid holds the noise of every eps of the sweep")

    def calibrate(self, config) -> tuple:
        key = (getattr(config, "epsilon", math.inf), config.gradient_clip)
        if key not in self._noise:
            self.prepare([config])
        noise, fields = self._noise[key]
        fields = dict(fields, sigma=float(np.max(noise)))
        if not np.all(noise == noise[0]):
            fields["sigma_per_silo"] = noise.tolist()
        hyper = self.hyperparams(config, noise)
        if self.method.private:
            self.check_noise(hyper)
        return hyper, fields | self.grid_fields()

    def _optimum(self, X, y, radius: float, split: str) -> np.ndarray:
        if (split, radius) not in self._optima:
            self._optima[(split, radius)] = silo_metrics.fit_optimum(
                self.task.loss, self.task.classes, X, y, radius
            )
        return self._optima[(split, radius)]

    def evaluate(self, outputs: dict[str, np.ndarray], config) -> dict:
        """Excess risks, heterogeneity and the task metric of the averaged iterate."""
        name, classes = self.task.loss, self.task.classes
        X_train, y_train = self.task.train.pooled()
        X_test, y_test = self.task.test
        w_star = self._optimum(X_train, y_train, config.radius, "train")
        w_star_test = self._optimum(X_test, y_test, config.radius, "test")
        if ("heterogeneity", config.radius) not in self._optima:
            X, y = np.asarray(self.task.train.features), np.asarray(self.task.train.targets)
            silos = [(X[i, :c].astype(np.float64), y[i, :c].astype(np.float64))
                     for i, c in enumerate(self.counts)]  # fmt: skip
            self._optima[("heterogeneity", config.radius)] = silo_metrics.heterogeneity(
                name, classes, w_star, silos
            )

        def report(v: np.ndarray) -> float:
            if self.loss.regression:
                return silo_metrics.relative_rmse(v, X_test, y_test, y_train.mean())
            return silo_metrics.test_error(name, classes, v, X_test, y_test)

        w = np.asarray(outputs["w"], np.float64)
        excess = silo_metrics.excess_risk(name, classes, w, w_star, X_train, y_train)
        metrics = {
            "excess_train_risk": excess if np.isfinite(excess) else None,
            "excess_test_risk": silo_metrics.excess_risk(
                name, classes, w, w_star_test, X_test, y_test
            ),
            "heterogeneity": self._optima[("heterogeneity", config.radius)],
            self.report_metric: report(w),
            f"{self.report_metric}_per_round": [
                report(np.asarray(v, np.float64)) for v in outputs["w_per_round"]
            ],
            "available_per_round": np.asarray(outputs["available"]).tolist(),
            "clipped_fraction": float(outputs["clipped_fraction"]),
        }
        if self.exact:  # records its conditional rounding sent as zeros (a diagnostic)
            metrics["rounding_fallbacks"] = int(outputs["rounding_fallbacks"])
        if not self.loss.regression:
            metrics["optimum_test_error"] = report(w_star)
        return metrics | self.audit_fields(outputs, config)

    @staticmethod
    def summary(record: dict) -> str:
        metric = (
            f"test error {record['test_error']:.4f} (w*: {record['optimum_test_error']:.4f})"
            if "test_error" in record
            else f"relative RMSE {record['relative_rmse']:.4f}"
        )
        extra = f" | eps0={record['epsilon0']:.4g} per message" if "epsilon0" in record else ""
        return (
            f"{record['method']} on {record['dataset']} ({record['n_silos']} silos, "
            f"{record['records']} records, d={record['dim']}, R={record['rounds']}, "
            f"K={record['batch']}): {metric}, excess train risk "
            f"{record['excess_train_risk']:.4g} | privacy: {privacy_text(record)}"
            f"{extra} | {timings(record)}"
        )


def privacy_text(record: dict) -> str:
    """The privacy part of a silo run's summary line. A formula calibration certifies nothing:
    its target eps is labelled as such, beside what an accountant does give (the PLD eps of its
    noise under Poisson sampling, where computed)."""
    target = record.get("epsilon")
    if record.get("epsilon_certified") is not None or target is None or math.isinf(target):
        return guarantee_of(record).describe()
    reference = record.get("exact_epsilon")
    certified = (
        f"PLD with Poisson sampling gives its noise eps = {reference:.4g}"
        if reference is not None
        else "no accountant certifies this run"
    )
    return (
        f"target eps={target:.4g} (formula, not certified), delta={record['delta']:.3g}; "
        f"{certified} | {record['notion']} [calibration: {record['accountant']}] protecting "
        f"{record['protected']}"
    )


class MBSGDExperiment(SiloExperiment):
    """Non-private minibatch SGD."""


def local_sgd_program(experiment: SiloExperiment, sampling, **common) -> silo_sgd.LocalSGD:
    """Local SGD of ``experiment``'s fixed fields, its steps private or not as its method (on
    its grid with ``--noise discrete``)."""
    aggregator = silo_sgd.local_sgd(experiment.method.private, experiment.loss, sampling,
                                    experiment.config.batch, experiment.records,
                                    experiment.grid)  # fmt: skip
    return silo_sgd.LocalSGD(**common, sampling=sampling,
                             aggregator=experiment.audited(aggregator))  # fmt: skip


class FedAvgExperiment(SiloExperiment):
    """Non-private Local SGD."""

    program = local_sgd_program


def _isrl_fields(method, epsilon_certified, accountant: str, delta: float, **extra) -> dict:
    return {
        "epsilon_certified": epsilon_certified,
        "delta": delta,
        "accountant": accountant,
        "notion": method.notion,
        "protected": method.protected,
        "trust_model": method.trust_model,
        "adjacency": Adjacency.REPLACE_ONE.value,
        **extra,
    }


class CalibratedExperiment(SiloExperiment):
    """A silo method whose noise is calibrated exactly (dp-accounting's PLD over the events of
    its Poisson-sampled steps) or by the paper's formulas (sampling with replacement)."""

    def calibration(self, config) -> silo_privacy.Calibration:
        return silo_privacy.CALIBRATIONS[config.calibration]

    def choose_sampling(self, config) -> str:
        """The sampler the calibration accounts for, unless ``--sampling`` names another. The
        exact (PLD) calibration covers Poisson sampling only: a run that samples otherwise under
        it is refused rather than reported with a guarantee that does not model it."""
        calibration = self.calibration(config)
        sampling = config.sampling or calibration.sampling
        if calibration.certifies and not SAMPLINGS[sampling].exact:
            raise UsageError(
                f"the exact (PLD) calibration of {self.method.name} accounts Poisson sampling, "
                f"got --sampling {sampling}; use --sampling poisson, or a formula calibration "
                "(--calibration theorem)"
            )
        return sampling

    def formula_noise(self, calibration, n: int, config, epsilon: float, delta: float) -> float:
        """sigma of a silo of n records by the formula ``calibration``."""
        return calibration.minibatch_noise(n, config.batch, config.rounds, epsilon, delta,
                                           config.gradient_clip)  # fmt: skip

    def reference_ledger(self, config):
        """The releases of the same program sampling by Poisson (what ``exact_epsilon``
        accounts for a formula's noise), traced with the structure of ``config``'s
        hyper-parameters."""
        from jfed.engine import trace_releases

        if "_reference" not in self.__dict__:
            structure = self.hyperparams(config, 1.0)
            self.__dict__["_reference"] = trace_releases(self.build(POISSON),
                                                         self.population, structure)  # fmt: skip
        return self.__dict__["_reference"]

    def exact_noises(self, config, epsilons, delta) -> np.ndarray:
        """``f64[len(epsilons), N]``: every silo's least noise meeting each eps (PLD over the
        run's events, searched once per distinct silo size)."""
        noises = np.zeros((len(epsilons), len(self.records)))
        for n in np.unique(self.counts):
            silos = np.flatnonzero(self.counts == n)

            def silo_event(noise_std: float, silo: int = int(silos[0])):
                hyper = self.hyperparams(config, noise_std)
                return branches(self.composed_event(hyper))[silo]

            # an exact run's coupling takes its share of delta at the largest target
            reserved = self.delta_left(max(epsilons), delta)
            found = silo_privacy.exact_noises(silo_event, self.record_share(config),
                                              config.gradient_clip, list(epsilons),
                                              reserved)  # fmt: skip
            noises[:, silos] = np.asarray(found)[:, None]
        return noises

    def calibrate_many(self, config, epsilons, delta):
        """Each silo's noise for every eps: the exact calibration searches it through the run's
        events (:meth:`exact_noises`) and certifies the run; a formula gives it, and the record
        adds what PLD certifies for that noise under Poisson sampling (``exact_epsilon``)."""
        calibration = self.calibration(config)
        if calibration.certifies:
            noises = self.exact_noises(config, epsilons, delta)
        else:
            noises = np.array([[self.formula_noise(calibration, int(n), config, e, delta)
                                for n in self.counts] for e in epsilons])  # fmt: skip
        label = (f"pld-{self.sampling.name}-replace-one" if calibration.certifies
                 else self.formula_label(calibration))  # fmt: skip
        return [(noise, self.certify(config, epsilon, noise, label, delta))
                for epsilon, noise in zip(epsilons, noises, strict=True)]  # fmt: skip

    def certify(self, config, epsilon: float, noise, label: str, delta: float) -> dict:
        """What PLD certifies for the run at ``noise`` (for a formula's noise, had the silos
        sampled by Poisson: ``exact_epsilon`` beside a target that is not certified)."""
        calibration = self.calibration(config)
        reference = None if calibration.certifies else self.reference_ledger(config)
        hyper = self.hyperparams(config, noise)
        exact = self.certified_epsilon(hyper, delta, silo_privacy.EXACT, reference, epsilon)
        fields = _isrl_fields(self.method, exact if calibration.certifies else None, label,
                              delta, exact_epsilon=exact)  # fmt: skip
        return fields | self.noise_fields(exact, delta, reference)

    def formula_label(self, calibration) -> str:
        """The record's accountant field for a formula calibration."""
        return f"seed-{calibration.name}-formula"


class NoisyMBSGDExperiment(CalibratedExperiment):
    """ISRL-DP Noisy MB-SGD (Algorithm 2)."""


class AcceleratedExperiment(CalibratedExperiment):
    """Accelerated Noisy MB-SGD: one pass over each silo (the default), or minibatches beyond."""

    def choose_sampling(self, config) -> str:
        if config.sampling is None:
            return "one-pass"
        return super().choose_sampling(config)

    def program(self, sampling, **common):
        stages = (
            silo_sgd.multistage_schedule(self.config.rounds) if self.config.multistage else None
        )
        aggregator = silo_sgd.minibatch_aggregator(self.method.private, sampling,
                                                   self.config.batch, self.records,
                                                   grid=self.grid)  # fmt: skip
        return silo_sgd.AcceleratedMBSGD(**common, sampling=sampling, stages=stages,
                                         aggregator=self.audited(aggregator))  # fmt: skip

    def calibrate_many(self, config, epsilons, delta):
        if not self.sampling.disjoint_rounds:
            return super().calibrate_many(config, epsilons, delta)
        batch = config.batch
        calibration = self.calibration(config)
        calibrated = []
        for epsilon in epsilons:
            reserved = self.delta_left(epsilon, delta)
            result = silo_privacy.one_pass_noise(batch, epsilon, reserved, config.gradient_clip,
                                                 calibration)  # fmt: skip
            noise = np.full(len(self.counts), result.noise_std)
            label = f"{result.calibration}+parallel-composition"
            calibrated.append((noise, self.certify(config, epsilon, noise, label, delta)))
        return calibrated

    def certify(self, config, epsilon: float, noise, label: str, delta: float) -> dict:
        """One pass: one Gaussian release of sensitivity 2L/K per record, certified by its exact
        (analytic) eps, whatever the calibration."""
        if not self.sampling.disjoint_rounds:
            return super().certify(config, epsilon, noise, label, delta)
        hyper = self.hyperparams(config, noise)
        certified = self.certified_epsilon(hyper, delta, Analytic(), reserve=epsilon)
        fields = _isrl_fields(self.method, certified, label, delta)
        return fields | self.noise_fields(certified, delta)


class LocalSGDExperiment(CalibratedExperiment):
    """ISRL-DP Local SGD: exact calibration over its K R Poisson-sampled local steps of expected
    size 1, or the paper's formula."""

    program = local_sgd_program

    def record_share(self, config) -> int:
        return 1

    def formula_noise(self, calibration, n: int, config, epsilon: float, delta: float) -> float:
        """The seed's Local SGD formula (whichever formula calibration is named)."""
        del calibration
        return silo_privacy.local_sgd_noise(n, config.batch, config.rounds, epsilon, delta,
                                            config.gradient_clip).noise_std  # fmt: skip

    def formula_label(self, calibration) -> str:
        del calibration
        return "local-sgd-seed-formula"


class ShuffleExperiment(SiloExperiment):
    """Shuffle-DP Noisy MB-SGD: per-record messages, central eps by amplification by shuffling
    and advanced composition over the rounds (closed form).

    Each silo samples its K records without replacement, so a record sends at most one message
    a round: the shuffling bound (one changed message among the round's M K) then covers one
    record's replacement, given the sampled records (no subsampling credit is taken). A silo of
    fewer than K records is refused."""

    # (eps, clip norm) -> its calibrated noise, set by calibrate_many for calibrate to read
    _chains: dict[tuple[float, float], silo_privacy.ShuffleNoise]

    def choose_sampling(self, config) -> str:
        """Without replacement, always: one message per record a round, by construction."""
        del config
        return WITHOUT_REPLACEMENT.name

    def messages(self, config) -> int:
        """Messages shuffled per round: M K (M the silos taking part, in expectation)."""
        available = self.availability.expected(len(self.counts), config.available or 0)
        return available * config.batch

    def record_share(self, config) -> int:
        """1: sigma0 is the noise of one record's message (the grid is fitted to sigma0 / L)."""
        del config
        return 1

    def message_aggregator(self) -> ShuffledMessages:
        """The round's messages: float32 (:class:`ShuffledMessages`) or, with ``--noise
        discrete``, exact on the grid (:class:`ShuffledGridMessages`)."""
        batch, messages = self.config.batch, self.messages(self.config)
        grid = self.grid
        if grid is None:
            return ShuffledMessages(batch, messages)
        return ShuffledGridMessages(batch, messages, grid.dimension, grid.grid_norm)

    def released_messages(self, ledger=None) -> ShuffledMessages:
        """The round's messages as the program releases them (an audit's inner aggregator)."""
        release = (ledger or self.ledger()).only_release("a silo round")
        return getattr(release.aggregator, "inner", release.aggregator)

    def grid_release(self, ledger=None) -> silo_aggregators.SiloDiscreteGaussian:
        """An exact run's release of one message (:attr:`ShuffledGridMessages.record`)."""
        messages = self.released_messages(ledger)
        assert isinstance(messages, ShuffledGridMessages)  # read only with --noise discrete
        return messages.record

    def chain_fields(self, chain: silo_privacy.ShuffleNoise, rounds: int) -> dict:
        """What a record says of the messages' arithmetic: float, the ideal mechanism's label
        (:meth:`noise_fields`); exact, :data:`SHUFFLE_EXACT_MODEL`, the coupling's share of
        delta0 (``delta0_coupling``) and of the run's delta (``delta_coupling``, carried by the
        shuffling bound over the rounds), and the rest of delta (``delta_accountant``)."""
        if not self.exact:
            return self.noise_fields(chain.epsilon, chain.delta)
        coupling = chain.carried_coupling(rounds)
        return {"mechanism_model": SHUFFLE_EXACT_MODEL, "delta_accountant": chain.delta - coupling,
                "delta_coupling": coupling, "delta0_coupling": chain.message_coupling}  # fmt: skip

    def program(self, sampling, **common):
        del sampling
        aggregator = self.message_aggregator()
        if self.canaries:
            aggregator = ShuffleCanaries(
                aggregator, self.canaries, int(self.counts[self.canary_silo]), self.canary_silo
            )
        return silo_sgd.ShuffleMBSGD(**common, aggregator=aggregator)

    def hyperparams(self, config, noise) -> silo_sgd.Hyperparams:
        """``noise``: a :class:`~jfed.algorithms.silo_privacy.ShuffleNoise` or its
        :class:`~jfed.algorithms.silo_aggregators.ShuffleParams` (a number, or ``None``, for
        the structure only)."""
        message_delta = getattr(noise, "message_delta", 1e-9)
        shuffle_delta = getattr(noise, "shuffle_delta", 1e-9)
        noise_std = getattr(noise, "noise_std", noise)
        return silo_sgd.hyperparams(
            self.task.n_silos, step_size=config.step_size, clip_norm=config.gradient_clip,
            radius=config.radius, noise_std=0.0 if noise_std is None else noise_std,
            message_delta=message_delta, shuffle_delta=shuffle_delta,
        )  # fmt: skip

    def calibrate(self, config) -> tuple:
        _, fields = super().calibrate(config)
        chain = self._chains[(config.epsilon, config.gradient_clip)]
        return self.hyperparams(config, chain), fields

    def calibrate_many(self, config, epsilons, delta):
        messages = self.messages(config)
        # the shuffling bound's own split of delta: a third over the rounds
        if shuffle_validity_limit(messages, delta / (3 * config.rounds)) <= 0:
            available = messages // config.batch
            raise UsageError(
                f"expected more shuffled messages per round: {available} silos x --batch "
                f"{config.batch} = {messages} messages cover no eps0 > 0 of the shuffling bound "
                f"at --delta {delta:g} over {config.rounds} rounds (it needs n > 16 ln(2/delta)); "
                "raise --batch or --delta"
            )
        ledger = self.ledger()

        def run_epsilon(params) -> float:
            return self.certified_epsilon(self.hyperparams(config, params), delta, Advanced(),
                                          ledger)  # fmt: skip

        aggregator = self.released_messages(ledger)
        calibrated = []
        chains = self.__dict__.setdefault("_chains", {})
        for epsilon in epsilons:
            chain = silo_privacy.shuffle_noise(messages, config.rounds, epsilon, delta,
                                               config.gradient_clip, run_epsilon,
                                               aggregator)  # fmt: skip
            chains[(epsilon, config.gradient_clip)] = chain
            fields = _isrl_fields(
                self.method, chain.epsilon, "shuffle-fmt21+advanced-composition", delta,
                epsilon0=chain.epsilon0, delta0=chain.message_delta,
                epsilon_per_round=chain.epsilon_round,
                shuffled_messages_per_round=chain.messages,
            )  # fmt: skip
            fields |= self.chain_fields(chain, config.rounds)
            calibrated.append((np.full(len(self.counts), chain.noise_std), fields))
        return calibrated
