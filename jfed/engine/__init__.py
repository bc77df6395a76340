"""Engine: the only place that knows how clients are batched, streamed, reduced and sharded."""

from jfed.engine import cohort, distributed
from jfed.engine.aggregate import aggregate, stack_messages, sum_messages
from jfed.engine.cohort import All, CohortInfo, Poisson, Uniform, draw_cohort
from jfed.engine.keys import as_key, client_key, cohort_key, round_key, run_streams
from jfed.engine.loop import Algorithm, Clients, run_rounds, simulate
from jfed.engine.plan import CLIENT_AXIS, ExecutionPlan, client_mesh

__all__ = [
    "CLIENT_AXIS",
    "Algorithm",
    "All",
    "Clients",
    "CohortInfo",
    "ExecutionPlan",
    "Poisson",
    "Uniform",
    "aggregate",
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
    "stack_messages",
    "sum_messages",
]
