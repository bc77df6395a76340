"""One declaration per method: the flags, the records, the resume key, the README's tables and
the results tables all come from it."""

import dataclasses
import hashlib
import json
import os
import re
from datetime import datetime

import pytest

from jfed.cli import methods as methods_command
from jfed.cli.main import build_parser, main
from jfed.methods import METHODS, fields_of
from jfed.sweep import read_rows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_SHOT = ["--dataset", "modechoice", "--no-progress"]
# one run per compiled call, each with its own noise: a sweep that runs the program of `jfed run`
# (where neither the slices nor the shared noise are what a test is about)
ONE_PER_CALL = ["--no-shared-noise", "--slice-size", "1"]


def test_every_declared_default_is_in_its_range_and_documented():
    for name, declared in METHODS.items():
        config = declared.config().check()  # the defaults pass their own checks
        assert type(config).method == name
        for field in fields_of(config):
            assert field.help and not field.help.endswith("."), (name, field.name)
            if field.tunable:
                # numbers with a range (integers: the design sizes of the estimation studies)
                assert field.kind in (float, int) and field.range is not None, (name, field.name)
                assert field.kind is float or field.range.integer, (name, field.name)


def test_one_name_means_one_thing_across_methods():
    """A field shared by several methods has the same help and unit everywhere (its range may
    depend on the method); the clip of features and the clip of gradients have different names.
    Negative control: the check catches a field whose meaning differs (an edited copy of one
    declaration)."""

    def meanings(declarations):
        seen: dict = {}
        for declared in declarations:
            for field in fields_of(declared.config):
                meaning = (field.help, field.unit)
                seen.setdefault(field.name, set()).add(meaning)
        return {name: m for name, m in seen.items() if len(m) > 1}

    # eps and delta of a silo are per silo, of a local-DP run per client run: worded apart; an
    # accountant is one concept whose choices depend on the mechanism, so each family says which;
    # an audit's canaries are what the method protects (clients in DP-FedAvg, a silo's records);
    # the noise's arithmetic (discrete or float) is one choice whose other options (distributed
    # noises) only DP-FedAvg has
    allowed = {"epsilon", "delta", "dataset", "rounds", "sampling", "accountant", "audit_canaries",
               "noise"}  # fmt: skip
    assert set(meanings(METHODS.values())) <= allowed
    names = {f.name for m in METHODS.values() for f in fields_of(m.config)}
    assert "clip" not in names and {"feature_clip", "gradient_clip"} <= names

    class Edited:
        @dataclasses.dataclass(frozen=True)
        class config:  # noqa: N801 - stands in for a configuration class
            radius: float = dataclasses.field(
                default=1.0,
                metadata={"jfed": dict(kind=float, help="clip radius", unit="", range=None,
                                       choices=None, tunable=True, default_text=None,
                                       requires=None, group="method")},
            )  # fmt: skip

    assert "radius" in meanings([*METHODS.values(), Edited])


def _help(argv: list[str]) -> str:
    import contextlib
    import io

    text = io.StringIO()
    with contextlib.redirect_stdout(text), pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return text.getvalue()


def _entry(text: str, flag: str) -> str:
    """The help entry of ``flag`` (its lines in the options list, not the usage line)."""
    match = re.search(rf"^  {re.escape(flag)}\b.*?(?=^  -|\Z)", text, re.M | re.S)
    assert match, flag
    return " ".join(match.group(0).split())


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_flag_shows_its_default(name):
    for command in ("run", "sweep"):
        text = _help([command, name])
        for field in fields_of(METHODS[name].config):
            if command == "sweep" and field.name in ("epsilon", "seed"):
                continue
            assert "default:" in _entry(text, field.flag), (command, name, field.flag)


def test_silo_rounds_default_is_one_value_for_run_and_sweep():
    for command in ("run", "sweep"):
        assert "default: 25" in _entry(_help([command, "noisy-mbsgd"]), "--rounds")


def test_methods_json_lists_every_method_with_its_fields(capsys):
    assert main(["methods", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in listed] == list(METHODS)
    for entry in listed:
        assert entry["paper"] and entry["notion"] and entry["trust_model"]
        assert {f["name"] for f in entry["fields"]} == {
            f.name for f in fields_of(METHODS[entry["name"]].config)
        }
        assert all({"default", "range", "help", "unit"} <= set(f) for f in entry["fields"])
    assert main(["methods"]) == 0
    assert "modulated-iterative" in capsys.readouterr().out


def test_flag_tables_are_generated_for_the_docs_and_update_a_marked_file():
    """The flag tables are `jfed methods --markdown`, generated into the docs at build time
    (docs/reference/methods.md includes them), so they cannot go stale there;
    `jfed methods --update-readme FILE` rewrites them between the markers of any file.
    Negative control: a stale table is caught."""
    with open(os.path.join(ROOT, "docs", "reference", "methods.md"), encoding="utf-8") as handle:
        assert "{include} ../_generated/methods.md" in handle.read()
    marked = f"intro\n{methods_command.BEGIN}\n{methods_command.END}\noutro\n"
    current = methods_command.readme_with_tables(marked)
    assert "| `--feature-clip` |" in current
    assert methods_command.readme_with_tables(current) == current
    stale = current.replace("| `--feature-clip` |", "| `--clip` |", 1)
    assert stale != current and methods_command.readme_with_tables(stale) != stale


def test_run_is_a_sweep_of_one_configuration(tmp_path, capsys):
    """`jfed run` and a one-configuration `jfed sweep` go through one path: the same result, bit
    for bit, and the same record fields."""
    assert main(["run", "modulated-one-shot", *ONE_SHOT, "--epsilon", "2", "--json", "-"]) == 0
    record = json.loads(capsys.readouterr().out)
    out = str(tmp_path / "one")
    argv = ["sweep", "modulated-one-shot", *ONE_SHOT, "--epsilon", "2", "--seeds", "1"]
    assert main([*argv, "--out", out]) == 0
    (row,) = read_rows(os.path.join(out, "runs.jsonl"))
    assert row["test_r2"] == record["test_r2"] and row["sigma"] == record["sigma"]
    assert row["config_key"] == record["config_key"]
    assert set(row) == set(record)
    assert record["schema_version"] == 1 and record["jfed_version"]
    assert datetime.fromisoformat(record["timestamp"]).tzinfo is not None
    assert record["git_commit"] is None or len(record["git_commit"]) == 40
    for field in fields_of(METHODS["modulated-one-shot"].config):
        assert field.name in record  # every configuration field, fixed or swept


def test_fixed_fields_are_recorded_and_resume_is_keyed_by_the_whole_configuration(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = ["sweep", "modulated-one-shot", *ONE_SHOT, *ONE_PER_CALL, "--epsilon", "1,4",
            "--seeds", "2", "--set", "beta=0.3", "--grid", "ridge_scale=0.5,1",
            "--extend-edges", "0", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = read_rows(str(out / "runs.jsonl"))
    assert len(rows) == 8 and {r["beta"] for r in rows} == {0.3}
    assert {r["ridge_scale"] for r in rows} == {0.5, 1.0}

    def snapshot():
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.iterdir()}

    before = snapshot()
    capsys.readouterr()
    refused = [
        ["--dataset", "co2"],
        ["--delta", "1e-6"],
        ["--set", "beta=0.5"],
        ["--accountant", "pld"],
    ]
    for change in refused:
        changed = [*argv, "--resume"]
        if change[0] == "--set":
            changed[changed.index("beta=0.3")] = change[1]
        elif change[0] in changed:  # the flag given once, with the new value
            changed[changed.index(change[0]) + 1] = change[1]
        else:
            changed += change
        assert main(changed) == 2, change
        err = capsys.readouterr().err.strip()
        assert "cannot resume" in err and "\n" not in err, err
        assert snapshot() == before  # the folder is left untouched
    grid_changed = [*argv[:-2], "--grid", "beta=0.1,0.2", "--out", str(out), "--resume"]
    grid_changed.remove("--set")
    grid_changed.remove("beta=0.3")
    assert main(grid_changed) == 2 and "cannot resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0  # the same arguments continue
    assert len(read_rows(str(out / "runs.jsonl"))) == 8


def test_silo_sweep_uses_the_given_delta(tmp_path):
    out = str(tmp_path / "silo")
    # float noise: the given delta reaches the record the same way on the grid, whose compile
    # takes twice as long (the exact release is tested in tests/test_silo_exact.py)
    assert main(["sweep", "noisy-mbsgd", "--epsilon", "2", "--seeds", "1", "--rounds", "2",
                 "--delta", "1e-8", "--calibration", "theorem", "--noise", "float",
                 "--out", out]) == 0  # fmt: skip
    (row,) = read_rows(os.path.join(out, "runs.jsonl"))
    assert row["delta"] == 1e-8 and row["rounds"] == 2


def test_results_tables_load_and_plot_overlays_several_sweeps(tmp_path, capsys):
    import pandas as pd
    import pyarrow.parquet as pq

    import jfed

    folders = []
    # one configuration per call: the programs of `jfed run modulated --rounds 3` and `jfed run
    # modulated-one-shot` (the memory budget's slices: tests/test_compilation_cache.py's sweep)
    for name, extra in (("modulated-iterative", ["--rounds", "3"]), ("modulated-one-shot", [])):
        folder = str(tmp_path / name)
        assert main(["sweep", name, *ONE_SHOT, *ONE_PER_CALL, *extra, "--epsilon", "1,10",
                     "--seeds", "2", "--out", folder]) == 0  # fmt: skip
        folders.append(folder)
    schema = pq.read_schema(os.path.join(folders[0], "runs.parquet"))
    assert str(schema.field("test_r2_per_round").type) == "list<element: double>"
    # a one-round method draws no convergence figure; the iterative one does
    assert os.path.exists(os.path.join(folders[0], "convergence.png"))
    assert not os.path.exists(os.path.join(folders[1], "convergence.png"))
    frame = jfed.load_results(folders)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 8
    assert set(frame.method) == {"modulated-iterative", "modulated-one-shot"}
    assert list(frame.loc[frame.method == "modulated-iterative", "test_r2_per_round"].iloc[0])
    assert set(frame.source) == set(folders)
    # the same rows from the JSON lines
    assert len(jfed.load_results([os.path.join(f, "runs.jsonl") for f in folders])) == 8
    capsys.readouterr()
    out = tmp_path / "compare"
    assert main(["plot", *folders, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "modulated-iterative" in printed and "modulated-one-shot" in printed
    assert (out / "utility.png").stat().st_size > 1000


def test_progress_bars_only_on_a_terminal(tmp_path, capsys):
    assert main(["sweep", "modulated-one-shot", *ONE_SHOT[:2], *ONE_PER_CALL, "--epsilon",
                 "1,2", "--seeds", "2", "--out", str(tmp_path / "quiet")]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert "run/s" not in err and "it/s" not in err and "sweep modulated" not in err


def test_help_speaks_of_papers_and_algorithms_not_internal_labels():
    for name in METHODS:
        text = " ".join(_help(["run", name]).split())
        assert "seed 00" not in text and "From:" in text
    assert "Algorithm 2" in _help(["run", "noisy-mbsgd"])
