"""Pages generated at build time, so they cannot go stale: the CLI reference (from the parser),
the method tables (from the declarations) and the benchmark tables (from ``bench/results``).

Each is written under ``docs/_generated/`` (not committed) before Sphinx reads the sources, and
included by a committed page with ``{include}``.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os

from jfed._io import write_atomic

DOCS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(DOCS)
GENERATED = os.path.join(DOCS, "_generated")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found = []
    for action in parser._actions:  # argparse has no public walk over sub-parsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub not in [s for _, s in found]:
                    found.append((name, sub))
    return found


def cli_markdown() -> str:
    """Every command's ``--help``, top level first, each under its own heading."""
    from jfed.cli.main import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal width: fix it for the page
    lines = ["# Command line", "", "Generated from `jfed`'s argument parser at build time.", ""]

    def visit(prefix: str, parser: argparse.ArgumentParser, depth: int) -> None:
        lines.extend(
            [
                "#" * min(depth, 4) + f" `{prefix}`",
                "",
                "```text",
                parser.format_help().rstrip(),
                "```",
                "",
            ]
        )
        for name, sub in _subcommands(parser):
            visit(f"{prefix} {name}", sub, depth + 1)

    visit("jfed", build_parser(), 2)
    return "\n".join(lines) + "\n"


def methods_markdown() -> str:
    from jfed.cli.methods import markdown

    # the README's tables sit under level-4 headings; on their own page they are sections
    return (
        "\n".join(
            "## " + line[5:] if line.startswith("#### ") else line
            for line in markdown(built_in_only=True).splitlines()
        )
        + "\n"
    )


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return "`" + json.dumps(value, sort_keys=True) + "`"
    return str(value).replace("|", "\\|")


def benchmark_markdown() -> str:
    """One section per committed ``bench/results/*.json``: its setting, its rows, its machine."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*.json"))):
        with open(path, encoding="utf-8") as handle:
            result = json.load(handle)
        name = os.path.splitext(os.path.basename(path))[0]
        out += [f"## `{name}`", "", f"File: `bench/results/{name}.json`.", ""]
        for key in ("setting", "benchmark", "workload"):
            if isinstance(result.get(key), str):
                out += [f"{key.capitalize()}: {result[key]}", ""]
        rows = result.get("rows") or []
        if rows:
            columns = list(dict.fromkeys(k for row in rows for k in row))
            out.append("| " + " | ".join(columns) + " |")
            out.append("|" + "---|" * len(columns))
            for row in rows:
                out.append("| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |")
            out.append("")
        machine = []
        uptime = result.get("uptime")
        if isinstance(uptime, dict):
            machine.append(f"load before: `{uptime.get('before', '?').strip()}`")
        versions = result.get("versions")
        if isinstance(versions, dict):
            machine.append(", ".join(f"{k} {v}" for k, v in versions.items() if isinstance(v, str)))
        if machine:
            out += ["Machine: " + "; ".join(machine), ""]
    return "\n".join(out) + "\n"


def _machine(result: dict) -> str:
    versions = result.get("versions", {})
    load = result.get("uptime", {}).get("before", "")
    load = load.split("load average:")[-1].split(",")[0].strip() if "load average" in load else "?"
    backend = versions.get("backend", "?")
    kind = result.get("device", "").partition(": ")[2]  # "gpu: NVIDIA H100 80GB HBM3"
    if kind and kind != backend:
        backend = f"{backend} ({kind})"
    return (f"{backend}, {versions.get('devices', '?')} device(s), "
            f"jax {versions.get('jax', '?')}, load {load} before the run")  # fmt: skip


def _committed(name: str) -> dict | None:
    """``bench/results/<name>.json`` loaded, or None where no such result is committed."""
    path = os.path.join(ROOT, "bench", "results", f"{name}.json")
    return _load(name) if os.path.exists(path) else None


def _scientific(value: float) -> str:
    """``2.2e9`` for 2.228e9 (two significant digits)."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def _load(name: str) -> dict:
    with open(os.path.join(ROOT, "bench", "results", f"{name}.json"), encoding="utf-8") as handle:
        return json.load(handle)


ENGINE_WORKLOADS = {
    "modulated": "one modulated round, 10^{exponent} procedural clients, d = 10",
    "W": "one DP-SGD round, 10^{exponent} one-sample clients in arrays, d = 10",
}


def headline_markdown() -> str:
    """The README's headline numbers, each from a committed ``bench/results`` file."""
    lines = ["| benchmark | result | machine |", "|---|---|---|"]
    for name, n in (("engine_cpu", 10**6), ("engine_gpu", None)):
        result = _committed(name)
        if result is None:
            continue
        n = n or max(r["n"] for r in result["rows"])
        for workload, label in ENGINE_WORKLOADS.items():
            rows = {r["implementation"]: r for r in result["rows"]
                    if r["workload"] == workload and r["n"] == n}  # fmt: skip
            if "jfed" not in rows:
                continue
            jfed_row = rows["jfed"]
            if "numpy" in rows:  # where numpy ran, the ratio; else the throughput
                ratio = rows["numpy"]["seconds"] / jfed_row["seconds"]
                value = f"{jfed_row['seconds']:.3f} s, {ratio:.2f}x numpy vectorised"
            else:
                value = f"{_scientific(jfed_row['updates_per_second'])} client-updates/s"
            label = label.format(exponent=round(math.log10(n)))
            lines.append(f"| {label} (`bench/engine.py`) | {value} | {_machine(result)} |")
    for name in ("ldp_fl_cpu", "ldp_fl_gpu"):
        result = _committed(name)
        if result is None or not result.get("round_vs_pytorch_training"):
            continue
        jfed_row = next(r for r in result["rows"] if r["implementation"] == "jfed")
        ratio = result["round_vs_pytorch_training"]
        lines.append(
            f"| one LDP-FL round, {jfed_row['clients']} clients x "
            f"{jfed_row['images'] // jfed_row['clients']} images, CNN of {jfed_row['weights']:,} "
            f"weights (`bench/ldp_fl.py`) | {jfed_row['seconds_per_round']:.3f} s, "
            f"{ratio:.{2 if ratio < 10 else 1}f}x PyTorch's per-client loop on the same "
            f"{'GPU' if result['torch']['device'] == 'cuda' else 'CPU'} "
            f"| {_machine(result)} |"
        )
    result = _load("dp_fedavg")
    for row in result["rows"]:
        if row["implementation"] == "jfed":
            lines.append(
                f"| DP-FedAvg round, N = 10^4, K = {row['cohort']} (`bench/dp_fedavg.py`) "
                f"| {row['rounds_per_second']:.0f} rounds/s, {row['x_numpy']:.2f}x numpy "
                f"vectorised | {_machine(result)} |"
            )
    result = _load("cohort")
    best = max(
        (r for r in result["rows"] if r["n"] == max(q["n"] for q in result["rows"])),
        key=lambda r: r["clients_per_second"],
    )
    lines.append(
        f"| cohort of {best['cohort']} from N = {best['n']:.0e} clients, {best['kind']} "
        f"(`bench/cohort.py`) | {best['round_ms']:.3f} ms per round, memory flat in N "
        f"| {_machine(result)} |"
    )
    return "\n".join(lines) + "\n"


def methods_summary_markdown() -> str:
    """The README's methods table: every built-in method, its notion and protected unit (a
    plug-in or script registered in the same process is not jfed's)."""
    from jfed.methods import METHODS

    lines = ["| method | what | privacy | protects |", "|---|---|---|---|"]
    for declared in METHODS.values():
        if not declared.built_in:
            continue
        lines.append(
            f"| `{declared.name}` | {declared.summary} | {declared.notion} | {declared.protected} |"
        )
    return "\n".join(lines) + "\n"


README_BLOCKS = {
    "jfed methods --summary": methods_summary_markdown,
    "jfed bench headline": headline_markdown,
}


def readme_with_blocks(text: str) -> str:
    """``text`` with every generated block between its markers rewritten."""
    for marker, make in README_BLOCKS.items():
        begin, end = f"<!-- {marker}: begin -->", f"<!-- {marker}: end -->"
        head, found, rest = text.partition(begin)
        if not found or end not in rest:
            raise ValueError(f"markers {begin} ... {end} not found")
        text = head + begin + "\n" + make() + end + rest.partition(end)[2]
    return text


def generate(app=None) -> None:
    del app
    os.makedirs(GENERATED, exist_ok=True)
    for name, text in (
        ("cli.md", cli_markdown()),
        ("methods.md", methods_markdown()),
        ("benchmarks.md", benchmark_markdown()),
    ):
        path = os.path.join(GENERATED, name)
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                old = handle.read()
        if old != text:  # an unchanged file keeps its time stamp: Sphinx rebuilds nothing
            write_atomic(path, text.encode("utf-8"))


def setup(app):
    app.connect("builder-inited", generate)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # python docs/_ext/jfed_docs.py README.md: rewrite its generated blocks
    import sys

    from jfed._io import read_regular

    for path in sys.argv[1:]:
        write_atomic(path, readme_with_blocks(read_regular(path).decode("utf-8")))
