"""A fresh machine has exactly what pyproject.toml declares: every module of jfed imports, every
package it imports is declared, and the command line loads heavy packages only when it needs them.
"""

import ast
import importlib.metadata
import json
import pathlib
import re
import subprocess
import sys
import textwrap
import tomllib

import pytest

import jfed
from jfed import catalog

ROOT = pathlib.Path(jfed.__file__).resolve().parent.parent
PACKAGE = ROOT / "jfed"
# import names whose distribution is named otherwise, for packages not installed where this runs
DISTRIBUTION_ALIASES = {"sklearn": "scikit-learn", "attr": "attrs", "yaml": "pyyaml"}


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )


def _normalise(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement.strip())[0].lower().replace("_", "-")


def _imported_top_level_names(folder: pathlib.Path) -> dict[str, set[str]]:
    """Top-level module names imported anywhere in ``folder`` (inside functions too) -> files."""
    names: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found = [node.module.split(".")[0]]
            else:
                continue
            for name in found:
                names.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return names


def _undeclared(imported: dict[str, set[str]], declared: set[str]) -> list[str]:
    owners = importlib.metadata.packages_distributions()
    missing = []
    for name in sorted(set(imported) - set(sys.stdlib_module_names) - {"jfed", "__future__"}):
        distributions = {_normalise(d) for d in owners.get(name, [])}
        distributions = distributions or {DISTRIBUTION_ALIASES.get(name, name)}
        if not distributions & declared:
            missing.append(f"{name} ({', '.join(sorted(imported[name]))})")
    return missing


def _declared(extra: str | None = None) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"]
    if extra:
        requirements = requirements + project["optional-dependencies"][extra]
    return {_normalise(r) for r in requirements}


def test_every_module_imports_in_a_fresh_process():
    code = (
        "import importlib, pkgutil, jfed\n"
        "failed = []\n"
        "for info in pkgutil.walk_packages(jfed.__path__, 'jfed.'):\n"
        "    if info.name == 'jfed.__main__':\n"
        "        continue  # `python -m jfed`: importing it runs the command\n"
        "    try:\n"
        "        importlib.import_module(info.name)\n"
        "    except Exception as error:\n"
        "        failed.append(f'{info.name}: {type(error).__name__}: {error}')\n"
        "print('\\n'.join(failed) or 'ok')\n"
    )
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok", result.stdout
    # the walk reached the whole package (a broken walk would also print "ok")
    count = _run_python(
        "import pkgutil, jfed; print(len(list(pkgutil.walk_packages(jfed.__path__, 'jfed.'))))"
    )
    assert int(count.stdout) == sum(1 for _ in PACKAGE.rglob("*.py")) - 1  # less jfed/__init__


def test_every_imported_package_is_declared():
    """Imports inside functions count too: a lazily imported package is still a dependency."""
    assert _undeclared(_imported_top_level_names(PACKAGE), _declared()) == []
    tests = _imported_top_level_names(ROOT / "tests")
    for helper in (ROOT / "tests").glob("*.py"):  # the tests' own modules (docs_blocks, ...)
        tests.pop(helper.stem, None)
    assert _undeclared(tests, _declared("test")) == []
    docs = _imported_top_level_names(ROOT / "docs")
    docs.pop("jfed_docs", None)  # the docs' own extension
    assert _undeclared(docs, _declared("docs")) == []


def test_the_declaration_check_catches_a_missing_dependency():
    # negative control: the same check with scikit-learn (imported only inside a loader function)
    # and attrs taken out of the declared set
    imported = _imported_top_level_names(PACKAGE)
    missing = _undeclared(imported, _declared() - {"scikit-learn", "attrs"})
    assert [entry.split()[0] for entry in missing] == ["attr", "sklearn"]


def test_declared_packages_are_used():
    imported = set(_imported_top_level_names(PACKAGE))
    owners = importlib.metadata.packages_distributions()
    used = {_normalise(d) for name in imported for d in owners.get(name, [])}
    used |= {DISTRIBUTION_ALIASES.get(name, name) for name in imported}
    unused = _declared() - used - {"jaxlib"}  # jaxlib is jax's own runtime, imported through jax
    assert unused == set()


# layers (DESIGN.md): these import nothing of the sweep or the command line
LOWER_LAYERS = ("jfed.engine", "jfed.privacy", "jfed.algorithms", "jfed.data", "jfed.methods",
                "jfed.report")  # fmt: skip
UPPER_LAYERS = ("jfed.sweep", "jfed.cli")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _import_graph(package: pathlib.Path) -> dict[str, set[str]]:
    """Module name -> the modules of ``package`` it imports anywhere (inside functions too: a lazy
    import is still a dependency); ``from a import b`` counts as module ``a.b`` when that is a
    module, else as ``a``."""
    files = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:  # relative: from the module's package, up level - 1 packages
                    parts = name.split(".")
                    base = parts[: len(parts) + is_package - node.level]
                    module = ".".join(base + ([node.module] if node.module else []))
                targets = [
                    f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                while target not in files and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in files and target != name:
                    imported.add(target)
        graph[name] = imported
    return graph


def _reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Modules reached from ``start`` by one import or more."""
    seen: set[str] = set()
    todo = list(edges[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += edges.get(module, ())
    return seen


def _layer_findings(graph: dict[str, set[str]]) -> list[str]:
    """Upward imports (a lower layer importing the sweep or the command line), then import cycles
    (a package importing its own submodules, or being imported by them, is no cycle)."""
    findings = [
        f"upward import: {module} -> {imported}"
        for module in sorted(graph) if _within(module, LOWER_LAYERS)
        for imported in sorted(graph[module]) if _within(imported, UPPER_LAYERS)
    ]  # fmt: skip
    edges = {
        module: {d for d in deps if not (d.startswith(module + ".") or module.startswith(d + "."))}
        for module, deps in graph.items()
    }
    reach = {module: _reachable(edges, module) for module in edges}
    cycles = {
        tuple(sorted({module} | {d for d in reach[module] if module in reach[d]}))
        for module in edges
        if module in reach[module]
    }
    return findings + [f"import cycle: {' <-> '.join(cycle)}" for cycle in sorted(cycles)]


def test_layers_import_down_and_no_module_imports_itself_back():
    graph = _import_graph(PACKAGE)
    assert _layer_findings(graph) == []
    # the walk saw the whole package, and the imports inside functions
    assert len(graph) == sum(1 for _ in PACKAGE.rglob("*.py"))
    assert "jfed.sweep" in graph["jfed.cli.main"]  # imported only inside a function


def test_the_layer_check_catches_an_upward_import_and_cycles():
    # negative control: a synthetic graph
    graph = {
        "jfed.cli": {"jfed.cli.main"},
        "jfed.cli.main": {"jfed.cli", "jfed.cli.sweep"},  # a package and its own module: no cycle
        "jfed.cli.sweep": {"jfed.cli.main"},
        "jfed.methods.running": {"jfed.sweep", "jfed.engine"},
        "jfed.sweep": {"jfed.engine", "jfed.cli"},  # downward
        "jfed.engine": set(),
        "jfed.data.a": {"jfed.data.b"},
        "jfed.data.b": {"jfed.data.c"},
        "jfed.data.c": {"jfed.data.a", "jfed.engine"},
    }
    assert _layer_findings(graph) == [
        "upward import: jfed.methods.running -> jfed.sweep",
        "import cycle: jfed.cli.main <-> jfed.cli.sweep",
        "import cycle: jfed.data.a <-> jfed.data.b <-> jfed.data.c",
    ]


def test_the_import_graph_sees_relative_and_lazy_imports(tmp_path):
    # negative control of the walk: an upward import inside a function, written relative
    package = tmp_path / "jfed"
    files = {
        "__init__.py": "",
        "report/__init__.py": "from jfed.report.results import load\n",
        "report/results.py": "import os\n\ndef load():\n    from ..sweep import runner\n",
        "sweep/__init__.py": "from . import runner\n",
        "sweep/runner.py": "import numpy as np\nfrom jfed.report import results\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    graph = _import_graph(package)
    assert graph["jfed.report.results"] == {"jfed.sweep.runner"}
    assert graph["jfed.sweep.runner"] == {"jfed.report.results"}
    assert _layer_findings(graph) == [
        "upward import: jfed.report.results -> jfed.sweep.runner",
        "import cycle: jfed.report.results <-> jfed.sweep.runner",
    ]


REFUSED = [
    ["run", "modulated", "--epsilon", "-1"],
    ["run", "modulated", "--accountant", "magic"],
    ["sweep", "dpsgd", "--delta", "2"],
    ["run", "noisy-mbsgd", "--mixing", "2"],
    ["demo", "--scale-clients", "-3"],
]


def test_help_and_bad_input_import_no_jax():
    """`jfed --help` and refused arguments never import JAX, so no device is touched."""
    code = textwrap.dedent(
        """
        import contextlib, io, json, sys
        from jfed.cli.main import main
        codes = [main(argv) for argv in json.loads(sys.argv[1])]
        with contextlib.redirect_stdout(io.StringIO()):
            codes.append(main(["--help"]))
        print(json.dumps([codes, "jax" in sys.modules, "dp_accounting" in sys.modules]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(REFUSED)], capture_output=True, text=True, cwd=ROOT
    )
    assert json.loads(result.stdout) == [[2] * len(REFUSED) + [0], False, False], result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == len(REFUSED) and all(line.startswith("jfed: error:") for line in lines)


def test_listing_methods_loads_no_numerical_package_and_a_run_loads_its_accountant():
    """`jfed methods` answers from the declarations alone (no JAX, no dp-accounting); a private
    run loads dp-accounting, the one accountant system every eps goes through (the negative
    control: the check sees it when it is loaded)."""
    code = (
        "import json, sys\n"
        "from jfed.cli.main import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(sys.argv[1:])\n"
        "print(json.dumps(['jax' in sys.modules, 'dp_accounting' in sys.modules]))\n"
    )
    cases = (
        (["methods", "--json"], [False, False]),
        (["run", "modulated", "--dataset", "modechoice", "--rounds", "2",
          "--compilation-cache", "off", "--accountant", "zcdp"], [True, True]),
    )  # fmt: skip
    for arguments, expected in cases:
        result = subprocess.run(
            [sys.executable, "-c", code, *arguments], capture_output=True, text=True, cwd=ROOT
        )
        assert json.loads(result.stdout) == expected, (arguments, result.stderr)


@pytest.mark.parametrize("name", sorted(catalog.REGRESSION_DATASETS))
def test_catalog_dimensions_match_the_data(name):
    from jfed.data.regression import _LOADERS

    features, _, info = _LOADERS[name]()
    assert features.shape[1] == catalog.REGRESSION_DATASETS[name] == len(info.features)


def test_catalog_names_match_the_implementations():
    from jfed.data import available_datasets
    from jfed.methods import METHODS
    from jfed.models import MODELS

    assert available_datasets() == list(catalog.REGRESSION_DATASETS)
    papers = {"modulated-iterative", "modulated-one-shot", "dpsgd", "ols", "noisy-mbsgd",
              "accel-mbsgd", "shuffle-mbsgd", "local-sgd", "mbsgd", "fedavg", "ldp-fl",
              "estimation", "functional-estimation", "dp-fedavg", "fedavg-sampled"}  # fmt: skip
    assert papers <= set(METHODS)
    assert list(catalog.FEDERATED_MODELS) == list(MODELS)
    for name, declared in METHODS.items():
        assert declared.config.method == name  # a configuration names its own method
        assert hasattr(declared.load(), "calibrate")  # and its experiment is where it says
