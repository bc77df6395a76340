"""Behaviour is dispatched by objects, not by string comparisons: in the layers below the
command line (jfed/methods, jfed/algorithms, jfed/engine, jfed/privacy), no comparison of a
value against a string literal (``x == "name"``, ``x != "name"``, ``x in ("a", "b")``) chooses
what runs. A configuration's names become objects (cohort kinds, aggregators, losses, settings,
accountant specs) looked up once in a table keyed by name.

Allowed, each with its reason: the method declarations (``jfed/methods/declared/``) validate
the user's input as the command line does (a field's ``requires`` predicate, a refusal naming
the flag); a key looked up in a mapping (``"name" in record``); and the few comparisons listed
in :data:`ALLOWED`, which read the environment or a declaration's syntax, not a configuration.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jfed"
LAYERS = ("methods", "algorithms", "engine", "privacy")
DECLARATIONS = ROOT / "methods" / "declared"

ALLOWED = {
    # the backend the program runs on, not a configuration
    ("engine/plan.py", "platform == 'cpu'"),
    ("engine/distributed.py", "os.environ.get('JFED_DISTRIBUTED') == '1'"),
    ("methods/cost.py", "jax.default_backend() != 'cpu'"),
    ("methods/cost.py", "jax.default_backend() == 'cpu'"),
    # an Output declaration's own syntax (a path into "state" or "infos", a reduction's name)
    ("methods/experiment.py", "parts[:1] == ['state']"),
    ("methods/experiment.py", "self.reduce != 'all'"),
    ("methods/experiment.py", "root == 'state'"),
    ("methods/experiment.py", "output.reduce != 'all'"),
    # Python's attribute protocol (a wrapper forwarding what it lacks), not a configuration
    ("privacy/canary_aggregator.py", "name == 'inner'"),
    # where a method's code lives (jfed's own or a plug-in's package), not a configuration
    ("methods/registry.py", "str(module).split(':')[0].split('.')[0] == 'jfed'"),
    # calibrate_grid's verify is True, False or "auto" (its documented default)
    ("privacy/accounting.py", "verify == 'auto'"),
}


def _string_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_string_literal(e) for e in node.elts)
    return False


def string_comparisons(path: pathlib.Path) -> list[str]:
    """Every comparison in ``path`` of an expression against a string literal, unparsed, except
    a literal key looked up in a container (``"name" in mapping``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        left = node.left
        for op, right in zip(node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and _string_literal(left):
                pass  # a key in a mapping or a set: membership, not a choice of behaviour
            elif isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) and (
                _string_literal(left) or _string_literal(right)
            ):
                found.append(ast.unparse(node))
            left = right
    return found


def _violations() -> list[str]:
    violations = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            if DECLARATIONS in path.parents:
                continue
            relative = path.relative_to(ROOT).as_posix()
            for comparison in string_comparisons(path):
                if (relative, comparison) not in ALLOWED:
                    violations.append(f"{relative}: {comparison}")
    return violations


def test_no_string_comparison_dispatches_behaviour_below_the_command_line():
    assert _violations() == []


def test_the_walk_finds_a_string_dispatch(tmp_path):
    """Negative control: the walk catches each form of a string dispatch, and lets a key lookup
    pass."""
    source = tmp_path / "module.py"
    source.write_text(
        "def f(config, record):\n"
        "    if config.sampling == 'poisson':\n"
        "        return 1\n"
        "    if 'poisson' != config.sampling or config.loss in ('squared', 'logistic'):\n"
        "        return 2\n"
        "    return 'key' in record\n"
    )
    found = string_comparisons(source)
    assert found == [
        "config.sampling == 'poisson'",
        "'poisson' != config.sampling",
        "config.loss in ('squared', 'logistic')",
    ]


@pytest.mark.parametrize("entry", sorted(ALLOWED))
def test_every_allowed_comparison_still_exists(entry):
    """The allowances stay true: each names a comparison that is there (a stale one would hide
    nothing, but says something false)."""
    relative, comparison = entry
    assert comparison in string_comparisons(ROOT / relative)
