"""Sphinx configuration of jfed's documentation: MyST pages, myst-nb notebooks executed at build.

Build (from the repository root, warnings as errors):

    python3 -m pip install -e ".[docs]"
    python3 -m sphinx -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

import jfed  # noqa: E402

project = "jfed"
author = "The jfed authors"
copyright = "2026, The jfed authors"
release = jfed.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "jfed_docs",  # generated pages: the CLI reference, the method tables, the benchmark tables
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "_generated", "jupyter_execute", "**.ipynb_checkpoints", "README.md"]
root_doc = "index"

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# notebooks run at build time, every time, in the repository root (relative paths as in the README);
# a failing cell fails the build
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 600
nb_execution_in_temp = False
nb_merge_streams = True

autosummary_generate = False
autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # dataclass fields are documented once, in their class
# an :ivar: field's name is looked up as a Python object: a field named like several objects'
# attributes (``adjacency``: a guarantee's, a ledger's, a release's) is ambiguous, not wrong
suppress_warnings = ["ref.python"]

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
}
# no network in CI: intersphinx would warn on every build
intersphinx_disabled_reftypes = ["*"]
intersphinx_mapping = {}

html_theme = "furo"
html_title = f"jfed {release}"
html_static_path = []

# docstrings are written for `help()` and the terminal (shapes like ``x: f32[d]``): their plain
# layout is kept, not parsed into Sphinx cross-references that would point nowhere
nitpicky = False
