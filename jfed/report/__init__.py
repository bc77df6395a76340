"""Reporting: run records (JSON) and their provenance."""

from jfed.report.record import dumps, versions, write

__all__ = ["dumps", "versions", "write"]
