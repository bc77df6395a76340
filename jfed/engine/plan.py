"""How clients are batched and placed: block size, reduction chunk, device mesh."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

import jax
import numpy as np
from jax.sharding import Mesh

CLIENT_AXIS = "clients"


class TableStore(Protocol):
    """Where a per-client state table lives off the device, and its host side, called from
    inside the compiled run (:class:`jfed.engine.HostTable` is the one jfed ships; see
    :mod:`jfed.engine.client_state`)."""

    @property
    def kind(self) -> str:
        """A word for run records: ``"host"``, ``"disk"``, ..."""
        ...

    def create(self, n_clients: int, treedef: Any, *initial: Any) -> Any:
        """A fresh table of ``n_clients`` rows of ``initial`` (ONE client's leaves);
        returns ``np.uint32(0)``."""
        ...

    def read(self, ids: Any, writes: Any) -> Any:
        """The rows at ``ids`` (a pytree like the state, leaves ``[len(ids), ...]``)."""
        ...

    def write(self, ids: Any, valid: Any, writes: Any, rows: Any) -> Any:
        """Rows written where ``valid``; returns ``np.uint32(writes + 1)``."""
        ...

    def flush(self, writes: Any) -> Any:
        """Everything written through; returns ``np.uint32(writes)``."""
        ...

    def rows(self) -> Any:
        """Every client's state after the last run (host arrays, ``[n_clients, ...]``)."""
        ...


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
      client_state: where an algorithm's per-client state table lives
        (:mod:`jfed.engine.client_state`): ``None`` (the default) on the devices, split by rows
        over the mesh; a :class:`~jfed.engine.HostTable` in host memory (``HostTable()``) or in
        ``.npy`` files on disk (``HostTable(path)``), the cohort's rows read and written from
        inside the compiled rounds (``client_state.store_named`` turns ``"device"`` and
        ``"host"`` into these); any :class:`TableStore`. Results are bit-identical in
        every place; a table off the device serves one run at a time (no vmapped runs). A
        ``HostTable`` is a place, compared by identity: a plan holding it reuses its program.
    """

    block_size: int = 65_536
    chunk_size: int = 4_096
    mesh: Mesh | None = None
    client_state: TableStore | None = None

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
    def for_backend(
        cls,
        backend: str | None = None,
        mesh: Mesh | None = None,
        client_state: TableStore | None = None,
    ) -> ExecutionPlan:
        """The default plan for ``backend`` (default: JAX's default backend), its per-client
        state where ``client_state`` says (default: on the devices).

        CPU: chunks of 4,096 clients in blocks of 65,536 (per-client work is memory-bound there;
        wider vectors gained nothing on this 2-core machine). GPU and TPU: chunks of 262,144 in
        blocks of 1,048,576: on an H100, one modulated round on 10^8 procedural clients ran at
        2.2e9 client-updates/s with this plan (program peak 44 MB; ``bench/engine.py``), and in an
        ad hoc run of ``bench/plans.py`` chunks of 65,536 to 4,194,304 were none more than 2%
        faster.
        """
        platform = backend or jax.default_backend()
        if platform == "cpu":
            return cls(block_size=65_536, chunk_size=4_096, mesh=mesh, client_state=client_state)
        return cls(block_size=1_048_576, chunk_size=262_144, mesh=mesh, client_state=client_state)

    def describe(self) -> dict:
        """JSON-ready fields of the plan, for run records (``client_state`` only where the table
        is kept off the device: ``"host"`` or ``"disk"``)."""
        fields: dict = {
            "block_size": self.block_size,
            "chunk_size": self.chunk_size,
            "n_shards": self.n_shards,
        }
        if self.client_state is not None:
            fields["client_state"] = self.client_state.kind
        return fields

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
        return replace(self, block_size=per_block * chunk, chunk_size=chunk)


def client_mesh(n_devices: int | None = None, backend: str | None = None) -> Mesh:
    """A 1-D mesh named ``"clients"`` over the first ``n_devices`` devices (default: all) of
    ``backend`` (default: JAX's default backend; ``"cpu"`` pins the mesh to the host devices,
    e.g. the forced CPU devices of the tests on a machine whose default backend is a GPU)."""
    devices = jax.devices(backend)
    n_devices = len(devices) if n_devices is None else n_devices
    if not 1 <= n_devices <= len(devices):
        raise ValueError(f"expected n_devices in [1, {len(devices)}], got n_devices={n_devices}")
    return Mesh(np.array(devices[:n_devices]), (CLIENT_AXIS,))
