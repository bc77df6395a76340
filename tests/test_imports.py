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
    assert _undeclared(_imported_top_level_names(ROOT / "tests"), _declared("test")) == []


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


def test_zcdp_runs_do_not_load_dp_accounting():
    code = (
        "import json, sys\n"
        "from jfed.cli.main import main\n"
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['run', 'modulated', '--dataset', 'modechoice', '--rounds', '2',\n"
        "          '--compilation-cache', 'off', '--accountant', sys.argv[1]])\n"
        "print(json.dumps(['jax' in sys.modules, 'dp_accounting' in sys.modules]))\n"
    )
    for accountant, expected in (("zcdp", [True, False]), ("pld", [True, True])):
        result = subprocess.run(
            [sys.executable, "-c", code, accountant], capture_output=True, text=True, cwd=ROOT
        )
        # pld is the negative control: the check sees dp-accounting when it is loaded
        assert json.loads(result.stdout) == expected, (accountant, result.stderr)


@pytest.mark.parametrize("name", sorted(catalog.REGRESSION_DATASETS))
def test_catalog_dimensions_match_the_data(name):
    from jfed.data.regression import _LOADERS

    features, _, info = _LOADERS[name]()
    assert features.shape[1] == catalog.REGRESSION_DATASETS[name] == len(info.features)


def test_catalog_names_match_the_implementations():
    from jfed.data import available_datasets
    from jfed.methods import METHODS

    assert available_datasets() == list(catalog.REGRESSION_DATASETS)
    assert len(METHODS) == 13
    for name, declared in METHODS.items():
        assert declared.config.method == name  # a configuration names its own method
        assert hasattr(declared.load(), "calibrate")  # and its experiment is where it says
