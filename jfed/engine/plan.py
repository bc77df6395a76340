"""How clients are batched and placed: block size, reduction chunk, device mesh."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import numpy as np
from jax.sharding import Mesh

CLIENT_AXIS = "clients"


@dataclass(frozen=True)
class ExecutionPlan:
    """Batching of the client axis. Changes speed and memory, never results (see below).

    Attributes:
      block_size: clients handled per streaming step, a multiple of ``chunk_size``; blocks are the
        unit of sharding (each device gets a contiguous range of blocks). Results are
        bit-identical for every block size.
      chunk_size: clients vmapped at once (the vector width): peak memory of a round is
        ``O(chunk_size * d + d^2)``. Chunks are reduced one after another in client order. A
        different ``chunk_size`` changes float rounding only (XLA vectorises at another width).
        :meth:`fitted` narrows it for populations smaller than one chunk.
      mesh: optional 1-D ``jax.sharding.Mesh`` with axis ``"clients"``; blocks are split over its
        devices and the partial statistics summed across them (float order then differs from the
        1-device run, by rounding only).
    """

    block_size: int = 65_536
    chunk_size: int = 4_096
    mesh: Mesh | None = None

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError(f"expected chunk_size >= 1, got chunk_size={self.chunk_size}")
        if self.block_size < 1 or self.block_size % self.chunk_size:
            raise ValueError(
                f"expected block_size a positive multiple of chunk_size={self.chunk_size}, "
                f"got block_size={self.block_size}"
            )
        if self.mesh is not None and self.mesh.axis_names != (CLIENT_AXIS,):
            raise ValueError(
                f"expected a 1-D mesh with axis names ({CLIENT_AXIS!r},), "
                f"got {self.mesh.axis_names}"
            )

    @classmethod
    def for_backend(cls, backend: str | None = None, mesh: Mesh | None = None) -> ExecutionPlan:
        """The default plan for ``backend`` (default: JAX's default backend).

        CPU: chunks of 4,096 clients in blocks of 65,536 (per-client work is memory-bound there;
        wider vectors gained nothing on this 2-core machine). GPU and TPU: chunks of 262,144 in
        blocks of 1,048,576: on an H100, one modulated round on 10^8 procedural clients ran at
        2.2e9 client-updates/s with this plan (program peak 44 MB; ``bench/engine.py``), and in an
        ad hoc run of ``bench/plans.py`` chunks of 65,536 to 4,194,304 were none more than 2%
        faster.
        """
        platform = backend or jax.default_backend()
        if platform == "cpu":
            return cls(block_size=65_536, chunk_size=4_096, mesh=mesh)
        return cls(block_size=1_048_576, chunk_size=262_144, mesh=mesh)

    def describe(self) -> dict:
        """JSON-ready fields of the plan, for run records."""
        return {
            "block_size": self.block_size,
            "chunk_size": self.chunk_size,
            "n_shards": self.n_shards,
        }

    @property
    def n_shards(self) -> int:
        return 1 if self.mesh is None else self.mesh.devices.size

    def fitted(self, n_clients: int) -> ExecutionPlan:
        """The plan shrunk to fit the population, so 500 clients are not padded to a whole
        block: the block to the whole number of chunks, at most ``block_size``, that covers a
        shard's clients with the fewest chunks computed, the widest such block (10^5 clients: 5
        blocks of 5 chunks, 102,400 computed, not 2 x 65,536; 10^6 clients: 35 blocks of 7
        chunks, the 245 chunks that cover them; results unchanged, they do not depend on the
        block size), and, when one shard holds fewer clients than a chunk, the chunk to those
        clients rounded up to a multiple of 8 (25 silos vmapped 32 wide, not 4,096; a narrower
        vector width changes rounding only). The fitted plan depends on the population size
        alone, so a run stays reproducible. A round on a cohort refits the plan to the cohort's
        capacity (:func:`jfed.engine.aggregate`), so a cohort of 100 runs 104 wide, not 4,096."""
        per_shard = -(-n_clients // self.n_shards)
        chunk = min(self.chunk_size, -(-per_shard // 8) * 8)
        chunks = max(1, -(-per_shard // chunk))
        widest = min(self.block_size // chunk, chunks)
        # exactly `chunks` chunks computed: the widest block that divides them (1 always does)
        per_block = max(m for m in range(1, widest + 1) if chunks % m == 0)
        return ExecutionPlan(per_block * chunk, chunk, self.mesh)


def client_mesh(n_devices: int | None = None, backend: str | None = None) -> Mesh:
    """A 1-D mesh named ``"clients"`` over the first ``n_devices`` devices (default: all) of
    ``backend`` (default: JAX's default backend; ``"cpu"`` pins the mesh to the host devices,
    e.g. the forced CPU devices of the tests on a machine whose default backend is a GPU)."""
    devices = jax.devices(backend)
    n_devices = len(devices) if n_devices is None else n_devices
    if not 1 <= n_devices <= len(devices):
        raise ValueError(f"expected n_devices in [1, {len(devices)}], got n_devices={n_devices}")
    return Mesh(np.array(devices[:n_devices]), (CLIENT_AXIS,))
