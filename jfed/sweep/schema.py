"""The one record every run writes, whether ``jfed run`` (one configuration) or ``jfed sweep``
(a row per run of ``runs.jsonl``), and the manifest that pins a sweep folder's configuration.

A record (schema version :data:`SCHEMA_VERSION`) has, flat:

- ``schema_version``, ``method``, ``paper``, ``algorithm`` (its name in the paper);
- every field of the method's configuration (:mod:`jfed.methods.declared`), fixed or swept,
  under its own name (``epsilon`` is the target eps, ``seed`` the run seed);
- the data: ``dataset``, ``n_clients``, ``dim`` (silos add ``n_silos``, ``records``, ``sampling``);
- privacy: ``epsilon_certified`` (what the accountant certifies for the noise used; ``None``
  where only a formula claims the target, ``exact_epsilon`` then gives PLD's eps of that noise),
  ``delta`` (the delta used), ``accountant``, ``notion``, ``protected``, ``trust_model``,
  ``sigma``, and the method's own (``sensitivity``, ``epsilon0``, ...);
- metrics: the method's (``test_r2``, ``validation_r2``, ``ols_r2``, curves ``*_per_round`` as
  lists, ...) and ``selection_metric``, ``selection_maximize``, ``report_metric`` (the method
  declaration's :class:`~jfed.methods.Metrics`);
- timing and place: ``compile_seconds`` (of the program that ran it), ``run_seconds`` (this run's
  share of its slice), ``calibration_seconds`` (its share of the host time spent calibrating the
  noise to the target eps and certifying it since the previous slice: the sweep's rows add up to
  all of it), ``plan``, ``device``, ``slice``, ``slice_size``, ``shared_noise``;
- provenance: ``timestamp`` (UTC, ISO 8601), ``jfed_version``, ``git_commit`` (``None`` outside a
  git checkout), ``versions`` (Python, platform, backend and key packages), ``config_key``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
from datetime import UTC, datetime
from functools import lru_cache

from jfed._io import read_regular, write_atomic
from jfed._validation import UsageError
from jfed.methods import Config, method_of
from jfed.report.record import json_safe, versions

SCHEMA_VERSION = 1
RUN_FIELDS = ("epsilon", "seed")


def config_fields(config: Config) -> dict:
    """``{"method": name, **every field}`` of a configuration."""
    return {"method": method_of(config).name, **dataclasses.asdict(config)}


def config_key(config: Config) -> str:
    """A stable identity of a configuration: its method and every field (what a resume matches)."""
    return json.dumps(config_fields(config), sort_keys=True)


def varying(configs: list[Config]) -> tuple[str, ...]:
    """Fields (other than eps and the seed) whose value differs across ``configs``."""
    values: dict = {}
    for config in configs:
        for name, value in dataclasses.asdict(config).items():
            values.setdefault(name, set()).add(json.dumps(value))
    return tuple(sorted(n for n, v in values.items() if len(v) > 1 and n not in RUN_FIELDS))


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the jfed checkout this process runs from (``None`` when not a checkout)."""
    folder = os.path.dirname(os.path.abspath(__file__))
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and commit else None


def jfed_version() -> str:
    from jfed import __version__

    return __version__


def row(experiment, config: Config, privacy: dict, metrics: dict, run_info: dict) -> dict:
    """The record of one finished run: its sections (:func:`sections`) flattened
    (:func:`flatten`), which refuses a name two sections state differently."""
    return flatten(sections(experiment, config, privacy, metrics, run_info))


def sections(experiment, config: Config, privacy: dict, metrics: dict, run_info: dict) -> dict:
    """The typed sections of one run's record, in the order they are written: ``method`` (what
    ran), ``configuration`` (every field, the target ``epsilon`` and the rounds), ``data`` (the
    population), ``privacy`` (the guarantee), ``metrics``, ``selection`` (how a sweep tunes and
    reports: the method declaration's :class:`~jfed.methods.Metrics`), ``run`` (where and how
    long), ``provenance`` (when, which jfed, which plug-in) and ``classification`` (what is
    outside the guarantee or secret: :meth:`~jfed.methods.Experiment.field_labels`)."""
    method = experiment.method
    found = {
        "method": {
            "schema_version": SCHEMA_VERSION,
            "method": method.name,
            "paper": method.paper,
            "algorithm": method.algorithm,
        },
        "configuration": {
            **dataclasses.asdict(config),
            "epsilon": float(getattr(config, "epsilon", math.inf)),
            "rounds": experiment.rounds,
        },
        "data": experiment.identity(),
        "privacy": privacy,
        "metrics": metrics,
        "selection": method.metrics_of(experiment.base_config, experiment).record_fields(),
        "run": run_info,
        "provenance": {
            "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
            "jfed_version": jfed_version(),
            "git_commit": git_commit(),
            "versions": dict(_versions()),
            **plugin_provenance(method),
            "config_key": config_key(config),
        },
    }
    # every field classified: inside the guarantee, public, outside or secret (the seed)
    found["classification"] = experiment.field_labels(found)
    return found


LABELS = {"dataset"}
"""Configuration fields the data section may state as a label of the same thing (a data set's
name with the parameters that define it: ``synthetic(1,1)`` for ``synthetic``)."""


class RecordCollisionError(UsageError):
    """Two sections of a record state one name differently."""


def flatten(sections: dict[str, dict]) -> dict:
    """One flat record from ``sections`` (in order). A name stated by two sections is refused
    (:class:`RecordCollisionError`, naming it, both sections and both values) unless the later one
    resolves a configuration field: the configuration left it ``None`` (the method's default,
    which the record then states), both state the same value, or it is a label
    (:data:`LABELS`)."""
    flat: dict = {}
    owner: dict[str, str] = {}
    for section, fields in sections.items():
        for name, value in fields.items():
            if name in flat:
                earlier = flat[name]
                resolves = owner[name] == "configuration" and (
                    earlier is None or _same(earlier, value)
                    or (name in LABELS and section == "data")
                )  # fmt: skip
                if not resolves:
                    raise RecordCollisionError(
                        f"record field {name!r} is stated by the {owner[name]} section "
                        f"({earlier!r}) and by the {section} section ({value!r}): rename one "
                        "(a configuration field may not share a name with what a run records)"
                    )
            flat[name] = value
            owner.setdefault(name, section)
    return flat


def _same(a, b) -> bool:
    try:
        return bool(a == b) or (
            isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
        )
    except (TypeError, ValueError):  # arrays and the like: never the same fact
        return False


def plugin_provenance(method) -> dict:
    """The package and version a plug-in method comes from (``{}`` for jfed's own)."""
    if method.built_in:
        return {}
    experiment = method.experiment
    module = experiment if isinstance(experiment, str) else getattr(experiment, "__module__", "")
    top = str(module).split(":")[0].split(".")[0]
    if not top:
        return {}
    from importlib import metadata

    packages = metadata.packages_distributions().get(top, [])
    if not packages:
        return {"plugin": top, "plugin_version": None}
    try:
        version = metadata.version(packages[0])
    except metadata.PackageNotFoundError:
        version = None
    return {"plugin": packages[0], "plugin_version": version}


@lru_cache(maxsize=1)
def _versions() -> dict:
    return versions()


# ----------------------------------------------------------------------------- sweep manifests


def manifest_path(results_path: str) -> str:
    """``out/runs.jsonl`` -> ``out/runs.sweep.json``."""
    stem = results_path[: -len(".jsonl")] if results_path.endswith(".jsonl") else results_path
    return stem + ".sweep.json"


def manifest(base: Config, swept: tuple[str, ...]) -> dict:
    """What a sweep folder was run with: the method, every fixed field, the swept names, the
    jfed version."""
    fixed = {k: v for k, v in config_fields(base).items() if k not in RUN_FIELDS and k not in swept}
    return {
        "schema_version": SCHEMA_VERSION,
        "method": fixed.pop("method"),
        "fixed": json_safe(fixed),
        "swept": sorted(swept),
        "jfed_version": jfed_version(),
    }


def manifest_differences(saved: dict, wanted: dict, limit: int = 3) -> list[str]:
    """What differs between a folder's manifest and this sweep's, in the user's flags
    (``--dataset fair, not co2``), at most ``limit`` of them."""
    differences = []
    for key in ("method", "jfed_version"):
        if saved.get(key) != wanted.get(key):
            differences.append(f"{key.replace('_', ' ')} {saved.get(key)}, not {wanted.get(key)}")
    old, new = saved.get("fixed", {}), wanted.get("fixed", {})
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            flag = "--" + name.replace("_", "-")
            differences.append(f"{flag} {old.get(name)}, not {new.get(name)}")
    if saved.get("swept") != wanted.get("swept"):
        differences.append(
            f"--grid over {saved.get('swept') or 'nothing'}, not {wanted.get('swept') or 'nothing'}"
        )
    if len(differences) > limit:
        differences = [*differences[:limit], f"{len(differences) - limit} more"]
    return differences


MANIFEST_FIELDS = {"method": str, "fixed": dict, "swept": list}


def read_manifest(results_path: str) -> dict | None:
    """The manifest kept beside ``results_path`` (``None`` when there is none).

    Raises:
      UsageError: the manifest is not a regular file, not JSON (truncated, say) or not a jfed
        manifest; one line naming it and what is wrong.
    """
    path = manifest_path(results_path)
    if not os.path.lexists(path):
        return None
    data = read_regular(path)
    try:
        content = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path} is binary data, not the JSON manifest jfed writes") from None
    except json.JSONDecodeError as error:
        raise UsageError(
            f"{path} is not valid JSON ({error.msg} at line {error.lineno}, column "
            f"{error.colno}; truncated?): the manifest of this folder is damaged"
        ) from None
    if not isinstance(content, dict):
        raise UsageError(
            f"{path} holds a JSON {type(content).__name__}, not the object jfed writes "
            "(method, fixed, swept): the manifest of this folder is damaged"
        )
    for name, kind in MANIFEST_FIELDS.items():
        if not isinstance(content.get(name), kind):
            raise UsageError(
                f"{path} lacks the {kind.__name__} field {name!r} of a jfed manifest: the "
                "manifest of this folder is damaged"
            )
    return content


def write_manifest(results_path: str, content: dict) -> None:
    """Keep ``content`` (:func:`manifest`) beside ``results_path``, written whole or not at all."""
    write_atomic(manifest_path(results_path), json.dumps(content, indent=2) + "\n")


def foreign_row(manifest: dict, row: dict) -> str | None:
    """What makes ``row`` (a record of a results file) not a run of the sweep that ``manifest``
    describes: another method, or another value of a fixed field (``None`` when it is one)."""
    if row.get("method") != manifest["method"]:
        return f"a run of {row.get('method')}, not {manifest['method']}"
    try:
        fields = json.loads(row["config_key"])
    except (TypeError, json.JSONDecodeError):
        return "a row whose config_key is not a configuration jfed wrote"
    if not isinstance(fields, dict):
        return "a row whose config_key is not a configuration jfed wrote"
    if fields.get("method") != manifest["method"]:
        return f"a run of {fields.get('method')}, not {manifest['method']}"
    for name, value in sorted(manifest["fixed"].items()):
        if json_safe(fields.get(name)) != value:
            flag = "--" + name.replace("_", "-")
            return f"a run with {flag} {json_safe(fields.get(name))}, not {value}"
    return None
