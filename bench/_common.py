"""What every benchmark script shares: the machine's load, and its JSON written atomically."""

from __future__ import annotations

import json
import os
import subprocess


def uptime() -> str:
    """``uptime``'s line (the load of this shared machine), or the load averages without it."""
    try:
        return subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        return "load average: {:.2f}, {:.2f}, {:.2f}".format(*os.getloadavg())


def write_json(path: str, payload: dict) -> None:
    """``payload`` to ``path`` as indented JSON: a temporary file beside it, then ``os.replace``,
    so an interrupted benchmark never leaves a half-written result."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=2)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
