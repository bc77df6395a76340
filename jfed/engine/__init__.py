"""Engine: the only place that knows how clients are batched, streamed, reduced and sharded."""

from jfed.engine import cohort, distributed, schedules
from jfed.engine.aggregate import (
    aggregate,
    aggregate_cohort,
    cohort_with_state,
    stack,
    stack_cohort,
    sum_messages,
)
from jfed.engine.client_state import HostTable, RunState
from jfed.engine.clients import (
    Clients,
    CohortView,
    Ledger,
    Release,
    check_participation,
    trace_releases,
)
from jfed.engine.cohort import All, CohortInfo, Poisson, Uniform, draw_cohort
from jfed.engine.keys import as_key, client_key, cohort_key, round_key, run_streams
from jfed.engine.loop import Algorithm, run_rounds, simulate
from jfed.engine.plan import CLIENT_AXIS, ExecutionPlan, TableStore, client_mesh
from jfed.engine.release_count import ReleaseCountError, counting_releases
from jfed.engine.schedules import CyclicGroups, MinSeparation, ShuffledEpochs, schedule_key

__all__ = [
    "CLIENT_AXIS",
    "Algorithm",
    "All",
    "Clients",
    "CohortInfo",
    "CohortView",
    "CyclicGroups",
    "ExecutionPlan",
    "HostTable",
    "Ledger",
    "MinSeparation",
    "Poisson",
    "Release",
    "ReleaseCountError",
    "RunState",
    "ShuffledEpochs",
    "TableStore",
    "Uniform",
    "aggregate",
    "aggregate_cohort",
    "as_key",
    "check_participation",
    "client_key",
    "client_mesh",
    "cohort",
    "cohort_key",
    "cohort_with_state",
    "counting_releases",
    "distributed",
    "draw_cohort",
    "round_key",
    "run_rounds",
    "run_streams",
    "schedule_key",
    "schedules",
    "simulate",
    "stack",
    "stack_cohort",
    "sum_messages",
    "trace_releases",
]
