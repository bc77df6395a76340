"""The flags of ``jfed run METHOD`` and ``jfed sweep METHOD``, generated from the method
declarations (:mod:`jfed.methods.declared`), and the configuration built back from them.

Every declared field is a flag (``feature_clip`` -> ``--feature-clip``) whose help shows its
default, unit and range. Flags default to ``None`` so that what the user gave is known; the
declared defaults fill the rest when the configuration is built, and every value is checked
against its declared range before JAX is imported.
"""

from __future__ import annotations

import argparse

from jfed._validation import ConfigurationError, UsageError
from jfed.cli.checks import DEFAULT_EPSILONS, parse_numbers
from jfed.methods import ALIASES, METHODS, Config, Method, method
from jfed.methods.fields import Field, field_map, fields_of

SWEEP_ONLY_RUN_FIELDS = ("epsilon", "seed")  # a sweep takes a list of eps and a seed count


def field_help(declared: Field) -> str:
    """``help (default X; unit; range)``."""
    details = [f"default: {declared.describe_default()}"]
    if declared.unit:
        details.append(declared.unit)
    if declared.range is not None:
        details.append(declared.range.describe())
    if declared.requires is not None:
        details.append(declared.requires[1])
    if declared.tunable:
        details.append("tunable")
    # argparse formats help with %: a literal percent sign must be doubled
    return f"{declared.help} ({'; '.join(details)})".replace("%", "%%")


def add_field_flags(parser: argparse.ArgumentParser, config: type, skip: tuple = ()) -> None:
    """One flag per declared field of ``config``, grouped as declared."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for declared in fields_of(config):
        if declared.name in skip:
            continue
        group = groups.get(declared.group)
        if group is None:
            group = groups[declared.group] = parser.add_argument_group(declared.group)
        flag, text = declared.flag, field_help(declared)
        if declared.kind is bool:
            group.add_argument(flag, action="store_true", default=None, help=text)
        elif declared.choices is not None:
            group.add_argument(flag, choices=declared.choices, default=None, help=text)
        else:
            metavar = declared.kind.__name__.upper()
            group.add_argument(flag, type=declared.kind, default=None, metavar=metavar, help=text)


def method_parsers(subparsers, command: str, add_extra) -> None:
    """A sub-command per method (with its aliases) under ``subparsers``; ``add_extra(parser,
    method)`` adds the command's own flags."""
    aliases: dict[str, list[str]] = {}
    for alias, name in ALIASES.items():
        aliases.setdefault(name, []).append(alias)
    for name, declared in METHODS.items():
        parser = subparsers.add_parser(
            name, aliases=aliases.get(name, []), help=declared.summary,
            description=f"{declared.summary}. From: {declared.paper} ({declared.algorithm}). "
            f"eps: {declared.notion}, protecting {declared.protected}; {declared.trust_model}.",
        )  # fmt: skip
        skip = SWEEP_ONLY_RUN_FIELDS if command == "sweep" else ()
        add_field_flags(parser, declared.config, skip)
        add_extra(parser, declared)


def given_fields(args: argparse.Namespace, config: Config | type[Config]) -> dict:
    """The declared fields the user gave as flags (a sweep's ``--epsilon`` list is not one)."""
    skip = SWEEP_ONLY_RUN_FIELDS if getattr(args, "command", None) == "sweep" else ()
    return {
        f.name: getattr(args, f.name)
        for f in fields_of(config)
        if getattr(args, f.name, None) is not None and f.name not in skip
    }


def chosen_method(args: argparse.Namespace) -> Method:
    return method(args.algorithm)


def _value(declared: Field, flag: str, text: str):
    if declared.kind is bool:
        lowered = text.strip().lower()
        if lowered not in ("true", "false", "on", "off", "1", "0"):
            raise UsageError(f"expected true or false for {flag}, got {text!r}")
        return lowered in ("true", "on", "1")
    if declared.kind is str:
        return declared.check(flag, text.strip())
    (number,) = parse_numbers(flag, text)
    return declared.check(flag, number)


def parse_pairs(items: list[str], config: type[Config], many: bool) -> dict:
    """``--grid NAME=V1,V2`` (``many``: tunable fields only) or ``--set NAME=V`` items as
    ``{name: values}``, every value checked against the field's declared kind and range."""
    flag = "--grid" if many else "--set"
    declared = field_map(config)
    parsed: dict = {}
    for item in items:
        name, _, values = item.partition("=")
        name = name.strip().replace("-", "_")
        if not name or not values.strip():
            raise UsageError(f"expected {flag} NAME={'V1,V2' if many else 'V'}, got {item!r}")
        allowed = [
            f for f, d in declared.items()
            if (d.tunable if many else f not in SWEEP_ONLY_RUN_FIELDS)
        ]  # fmt: skip
        if name not in allowed:
            raise UsageError(
                f"unknown {flag} {name} for {method(config.method).name}; expected one of {allowed}"
            )
        if name in parsed:
            raise UsageError(f"{flag} {name} is given twice")
        texts = values.split(",") if many else [values]
        if not many and "," in values:
            raise UsageError(f"expected one value in --set {name}, got {values!r} (--grid sweeps)")
        if many:
            parse_numbers(f"{flag} {name}", values)  # one message for a malformed list
        parsed_values = [_value(declared[name], f"{flag} {name}", text) for text in texts]
        if len(set(parsed_values)) != len(parsed_values):
            raise UsageError(f"expected distinct values in {flag} {name}, got {values!r}")
        parsed[name] = parsed_values if many else parsed_values[0]
    return parsed


# a field whose value "none" makes a configuration release without noise: eps and delta then
# certify nothing, and giving them is refused rather than recorded as if they did
NO_PRIVACY_SWITCHES = ("setting", "noise_shape")
PRIVACY_FIELDS = ("epsilon", "delta")


def check_given(args: argparse.Namespace, config: Config, extra: dict | None = None) -> None:
    """Refuse (``UsageError`` naming the flag) what the declared ranges alone let pass: a field
    given where it does not apply even at its default value (``--dataset fair --synthetic``),
    eps or delta given to a setting that adds no noise."""
    given = {**given_fields(args, config), **(extra or {})}
    declared = field_map(config)
    for name in given:
        requires = declared[name].requires
        if requires is not None and not requires[0](config):
            raise UsageError(f"{declared[name].flag} applies {requires[1]}")
    switches = [n for n in NO_PRIVACY_SWITCHES if getattr(config, n, None) == "none"]
    for switch, name in ((s, n) for s in switches[:1] for n in PRIVACY_FIELDS):
        if name in given or (name == "epsilon" and _sweep_epsilon_given(args)):
            raise UsageError(
                f"--{name} applies only to a private setting: --{switch.replace('_', '-')} none "
                "adds no noise and certifies no eps"
            )


def _sweep_epsilon_given(args: argparse.Namespace) -> bool:
    return getattr(args, "command", None) == "sweep" and getattr(
        args, "epsilon", DEFAULT_EPSILONS
    ) not in (None, DEFAULT_EPSILONS)


def build_config(args: argparse.Namespace, extra: dict | None = None) -> Config:
    """The checked configuration of the flags given (``extra``: ``--set`` values; a field given
    both ways is refused).

    Raises:
      ConfigurationError: the declaration refuses it (its ``check``'s ``ValueError``, said as
        it was).
    """
    declared = chosen_method(args)
    given = given_fields(args, declared.config)
    for name in sorted(set(given) & set(extra or {})):
        raise UsageError(f"--{name.replace('_', '-')} is given twice (as a flag and with --set)")
    return checked_config(lambda: declared.config(**given, **(extra or {})).check())


def checked_config(build, prefix: str = "") -> Config:
    """``build()``, a configuration built and checked, with the ``ValueError`` of any check
    that refuses it raised as :class:`~jfed._validation.ConfigurationError` (``prefix``: what
    the user gave, e.g. ``"--grid sites=1: "``)."""
    try:
        return build()
    except ConfigurationError:
        raise
    except ValueError as error:
        raise ConfigurationError(f"{prefix}{error}") from None
