"""Several processes, one program: JAX's distributed runtime with the client axis sharded over every
device of every process.

A run becomes multi-process when, before any JAX computation, :func:`initialize_from_environment`
finds either

- ``JFED_COORDINATOR`` (``host:port``), ``JFED_NUM_PROCESSES`` and ``JFED_PROCESS_ID``, which
  ``jfed launch --processes N -- run ...`` sets for N local processes; or
- ``JFED_DISTRIBUTED=1`` under a cluster launcher, where ``jax.distributed.initialize()`` reads
  the job from the environment (SLURM: ``srun``; or JAX's own ``JAX_COORDINATOR_ADDRESS``,
  ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``).

Every process then runs the same program on the same (replicated) inputs; the engine's default
plan puts the client blocks on a mesh of all devices of all processes and ``psum``s the partial
statistics (on CPU over gloo, the collectives current jax uses by default). Only process 0 writes
results and prints (:func:`is_primary`).
"""

from __future__ import annotations

import os
import sys

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec


def native_output_to_stderr() -> None:
    """Send what native libraries write to file descriptor 1 (gloo's "Rank 0 is connected to 1
    peer ranks" lines) to standard error, keeping Python's ``sys.stdout`` on the real standard
    output: ``jfed launch ... --json -`` then prints nothing but the record there."""
    sys.stdout.flush()
    stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(stdout, "w", buffering=1, encoding="utf-8")


def initialize_from_environment() -> bool:
    """Start JAX's distributed runtime if the environment asks for it; returns whether it did."""
    if os.environ.get("JFED_COORDINATOR"):
        native_output_to_stderr()
        jax.distributed.initialize(
            coordinator_address=os.environ["JFED_COORDINATOR"],
            num_processes=int(os.environ["JFED_NUM_PROCESSES"]),
            process_id=int(os.environ["JFED_PROCESS_ID"]),
        )
        return True
    if os.environ.get("JFED_DISTRIBUTED") == "1":
        jax.distributed.initialize()
        return True
    return False


def is_distributed() -> bool:
    return jax.process_count() > 1


def is_primary() -> bool:
    """Whether this process writes results and prints (process 0; always true alone)."""
    return jax.process_index() == 0


def replicate(tree, mesh):
    """Every leaf of ``tree`` as a global array replicated on ``mesh`` (each process passes the
    same values: the multi-process program's inputs). PRNG keys stay keys."""
    sharding = NamedSharding(mesh, PartitionSpec())

    def one(leaf):
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            data = jax.make_array_from_process_local_data(
                sharding, np.asarray(jax.random.key_data(leaf))
            )
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
        return jax.make_array_from_process_local_data(sharding, np.asarray(leaf))

    return jax.tree.map(one, tree)


def fetch(tree):
    """Host copies of a program's outputs, replicated or not fully addressable alike."""

    def one(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return np.asarray(leaf.addressable_data(0))
        return np.asarray(leaf)

    return jax.tree.map(one, tree)
