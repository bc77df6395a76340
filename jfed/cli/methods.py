"""``jfed methods [--json | --markdown]``: every method with its paper, privacy notion, trust model
and fields (flag, default, range, unit, help), from the declarations alone (no JAX).

The README's flag tables are this command's ``--markdown`` output between the markers
:data:`BEGIN` and :data:`END`; ``tests/test_methods.py`` checks that they are current, and
``jfed methods --update-readme README.md`` rewrites them.
"""

from __future__ import annotations

import argparse
import json
import textwrap

from jfed._io import read_regular, write_atomic
from jfed._validation import UsageError
from jfed.methods import ALIASES, METHODS, Method
from jfed.methods.fields import fields_of

BEGIN = "<!-- jfed methods --markdown: begin -->"
END = "<!-- jfed methods --markdown: end -->"
COLUMNS = ("flag", "default", "allowed", "unit", "help")


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "methods", help="list every method: paper, privacy notion, trust model and flags"
    )
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--json", dest="as_json", action="store_true", help="as JSON")
    form.add_argument("--markdown", action="store_true", help="as the README's tables")
    form.add_argument(
        "--update-readme", metavar="PATH",
        help="rewrite the tables between the markers of the README at PATH",
    )  # fmt: skip


def describe(declared: Method) -> dict:
    """A method as JSON-ready data."""
    return {
        "name": declared.name,
        "aliases": sorted(a for a, n in ALIASES.items() if n == declared.name),
        "summary": declared.summary,
        "paper": declared.paper,
        "algorithm": declared.algorithm,
        "private": declared.private,
        "notion": declared.notion,
        "protected": declared.protected,
        "trust_model": declared.trust_model,
        "fields": [f.to_dict() for f in fields_of(declared.config)],
    }


def _allowed(field: dict) -> str:
    if field["choices"]:
        return ", ".join(field["choices"])
    if field["type"] == "bool":
        return "switch"
    return field["range"] or ""


def markdown(built_in_only: bool = False) -> str:
    """One table per method (flag, default, allowed values, unit, help); ``built_in_only``:
    jfed's own methods alone (the documentation's, whatever a process has registered)."""
    parts = []
    for declared in METHODS.values():
        if built_in_only and not declared.built_in:
            continue
        info = describe(declared)
        aliases = f" (also `{'`, `'.join(info['aliases'])}`)" if info["aliases"] else ""
        eps = (
            f"eps: {info['notion']}, protecting {info['protected']}; {info['trust_model']}."
            if declared.private
            else "Non-private reference."
        )
        lines = [
            f"#### `{declared.name}`{aliases}",
            "",
            f"{declared.summary[0].upper()}{declared.summary[1:]}. From *{info['paper']}*: "
            f"{info['algorithm']}. {eps}",
            "",
            "| " + " | ".join(COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS),
        ]
        for field in info["fields"]:
            only = f" ({field['only']})" if field["only"] else ""
            tunable = " Tunable (`--grid`)." if field["tunable"] else ""
            cells = (
                f"`{field['flag']}`", field["default_text"], _allowed(field), field["unit"],
                f"{field['help']}{only}.{tunable}",
            )  # fmt: skip
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def readme_with_tables(text: str) -> str:
    """``text`` with the block between :data:`BEGIN` and :data:`END` replaced by the tables."""
    if BEGIN not in text or END not in text:
        raise UsageError(f"expected the markers {BEGIN} and {END} in the README")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n\n{markdown()}\n{END}{tail}"


def _text() -> str:
    lines = []
    for declared in METHODS.values():
        info = describe(declared)
        lines.append(f"{declared.name}: {declared.summary}")
        lines.append(f"  from: {info['paper']} ({info['algorithm']})")
        if declared.private:
            lines.append(f"  eps: {info['notion']}, protecting {info['protected']}")
            lines.append(f"  trust: {info['trust_model']}")
        for field in info["fields"]:
            facts = [f"default {field['default_text']}"]
            if _allowed(field):
                facts.append(f"allowed {_allowed(field)}")
            if field["unit"]:
                facts.append(f"unit {field['unit']}")
            lines.append(f"    {field['flag']}  ({'; '.join(facts)})")
            indent = " " * 8
            lines += textwrap.wrap(field["help"], 96, initial_indent=indent,
                                   subsequent_indent=indent, break_on_hyphens=False)  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> None:
    if args.as_json:
        print(json.dumps([describe(m) for m in METHODS.values()], indent=2))
    elif args.markdown:
        print(markdown(), end="")
    elif args.update_readme is not None:
        try:
            text = read_regular(args.update_readme).decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(
                f"--update-readme {args.update_readme} is not UTF-8 text: expected the README "
                "(Markdown) whose tables to rewrite"
            ) from None
        write_atomic(args.update_readme, readme_with_tables(text))
    else:
        print(_text(), end="")
