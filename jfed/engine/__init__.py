"""Engine: the only place that knows how clients are batched, streamed, reduced and sharded."""

from jfed.engine import distributed
from jfed.engine.aggregate import aggregate, stack_messages, sum_messages
from jfed.engine.keys import as_key, client_key, round_key, run_streams
from jfed.engine.loop import Algorithm, Clients, run_rounds, simulate
from jfed.engine.plan import CLIENT_AXIS, ExecutionPlan, client_mesh

__all__ = [
    "CLIENT_AXIS",
    "Algorithm",
    "Clients",
    "ExecutionPlan",
    "aggregate",
    "as_key",
    "client_key",
    "client_mesh",
    "distributed",
    "round_key",
    "run_rounds",
    "run_streams",
    "simulate",
    "stack_messages",
    "sum_messages",
]
