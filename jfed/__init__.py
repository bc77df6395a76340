"""jfed: differentially private federated learning simulated as one jitted, vmapped JAX program.

Layers (imports point down): :mod:`jfed.privacy` (host-side accounting), :mod:`jfed.data`
(populations and tasks), :mod:`jfed.engine` (batching, streaming, sharding, rounds),
:mod:`jfed.algorithms` (init + round pairs), and :mod:`jfed.run` / :mod:`jfed.cli` /
:mod:`jfed.report` on top.
"""

__version__ = "0.1.0"
