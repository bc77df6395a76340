"""The ``jfed`` command-line interface."""
