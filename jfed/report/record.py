"""Run records: the JSON object every ``jfed run`` writes, and the versions it carries."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from importlib import metadata
from typing import Any

from jfed._io import write_atomic

# jfed and the dependencies whose version can change a result (pyproject.toml)
PACKAGES = (
    "jfed", "jax", "jaxlib", "numpy", "scipy", "dp-accounting", "statsmodels", "scikit-learn",
    "flax", "optax",
)  # fmt: skip


def versions() -> dict[str, str]:
    """Versions of Python, the platform, the accelerator backend and the key packages."""
    found = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    try:
        import jax

        found["backend"] = jax.default_backend()
        found["devices"] = str(len(jax.devices()))
    except Exception as error:
        found["backend"] = f"unavailable: {error}"
    return found


def json_safe(value: Any) -> Any:
    """Floats that JSON cannot hold (inf, nan) become strings; numpy scalars become Python."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def dumps(record: dict) -> str:
    """The record as indented JSON (inf and nan spelled as strings)."""
    return json.dumps(json_safe(record), indent=2, sort_keys=False)


def write(record: dict, path: str) -> None:
    """Write the record to ``path`` (whole or not at all: :func:`jfed._io.write_atomic`), or to
    stdout when ``path == "-"``."""
    text = dumps(record)
    if path == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        return
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    write_atomic(path, text + "\n")
