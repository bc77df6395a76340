"""Engine: the only place that knows how clients are batched, streamed, reduced and sharded."""

from jfed.engine import cohort, distributed
from jfed.engine.aggregate import aggregate, aggregate_cohort, stack, stack_cohort, sum_messages
from jfed.engine.clients import Clients, CohortView, Ledger, Release, trace_releases
from jfed.engine.cohort import All, CohortInfo, Poisson, Uniform, draw_cohort
from jfed.engine.keys import as_key, client_key, cohort_key, round_key, run_streams
from jfed.engine.loop import Algorithm, run_rounds, simulate
from jfed.engine.plan import CLIENT_AXIS, ExecutionPlan, client_mesh

__all__ = [
    "CLIENT_AXIS",
    "Algorithm",
    "All",
    "Clients",
    "CohortInfo",
    "CohortView",
    "ExecutionPlan",
    "Ledger",
    "Poisson",
    "Release",
    "Uniform",
    "aggregate",
    "aggregate_cohort",
    "as_key",
    "client_key",
    "client_mesh",
    "cohort",
    "cohort_key",
    "distributed",
    "draw_cohort",
    "round_key",
    "run_rounds",
    "run_streams",
    "simulate",
    "stack",
    "stack_cohort",
    "sum_messages",
    "trace_releases",
]
