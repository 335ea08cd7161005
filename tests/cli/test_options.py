"""Numeric options are checked in one line naming the option, the value and what is allowed;
positionals (data overrides, key=value) may come anywhere among the options."""

from __future__ import annotations

import pytest

from rlcap.cli import main



@pytest.mark.parametrize(("argv", "line"), [
    (["eval", "ckpt", "--beam-size", "0"],
     "rlcap eval: error: argument --beam-size: expected an integer >= 1, got 0 (see rlcap eval --help)"),
    (["eval", "ckpt", "--beam-size", "-2"],
     "rlcap eval: error: argument --beam-size: expected an integer >= 1, got -2 (see rlcap eval --help)"),
    (["eval", "ckpt", "--max-len", "0"],
     "rlcap eval: error: argument --max-len: expected an integer from 1 to 512, got 0 (see rlcap eval --help)"),
    (["eval", "ckpt", "--beam-size", "two"],
     "rlcap eval: error: argument --beam-size: expected an integer >= 1, got 'two' (see rlcap eval --help)"),
    (["eval", "ckpt", "--length-penalty", "-0.5"],
     "rlcap eval: error: argument --length-penalty: expected a number >= 0, got -0.5 (see rlcap eval --help)"),
    (["eval", "ckpt", "--length-penalty", "nan"],
     "rlcap eval: error: argument --length-penalty: expected a number >= 0, got nan (see rlcap eval --help)"),
    (["caption", "ckpt", "a.png", "--beam-size", "0"],
     "rlcap caption: error: argument --beam-size: expected an integer >= 1, got 0 (see rlcap caption --help)"),
    (["caption", "ckpt", "a.png", "--max-len", "0"],
     "rlcap caption: error: argument --max-len: expected an integer from 1 to 512, got 0 (see rlcap caption --help)"),
    (["caption", "ckpt", "a.png", "--image-size", "16"],
     "rlcap caption: error: argument --image-size: expected an integer >= 32, got 16 (see rlcap caption --help)"),
    (["caption", "ckpt", "a.png", "--batch-size", "0"],
     "rlcap caption: error: argument --batch-size: expected an integer >= 1, got 0 (see rlcap caption --help)"),
    (["features", "im", "--out", "f.h5", "--image-size", "0"],
     "rlcap features: error: argument --image-size: expected an integer >= 32, got 0 (see rlcap features --help)"),
    (["features", "im", "--out", "f.h5", "--batch-size", "0"],
     "rlcap features: error: argument --batch-size: expected an integer >= 1, got 0 (see rlcap features --help)"),
    (["features", "im", "--out", "f.h5", "--workers", "-1"],
     "rlcap features: error: argument --workers: expected an integer >= 0, got -1 (see rlcap features --help)"),
    (["features", "im", "--out", "f.h5", "--threads", "0"],
     "rlcap features: error: argument --threads: expected auto or an integer >= 1, got '0' (see rlcap features --help)"),
    (["features", "im", "--out", "f.h5", "--threads", "many"],
     "rlcap features: error: argument --threads: expected auto or an integer >= 1, got 'many' (see rlcap features "
     "--help)"),
    (["eval", "ckpt", "--threads", "0"],
     "rlcap eval: error: argument --threads: expected auto or an integer >= 1, got '0' (see rlcap eval --help)"),
    (["caption", "ckpt", "a.png", "--threads", "many"],
     "rlcap caption: error: argument --threads: expected auto or an integer >= 1, got 'many' (see rlcap caption "
     "--help)"),
    (["bench", "--out", "o", "--threads", "0"],
     "rlcap bench: error: argument --threads: expected auto or an integer >= 1, got '0' (see rlcap bench --help)"),
    (["demo", "--image-size", "8"],
     "rlcap demo: error: argument --image-size: expected an integer >= 32, got 8 (see rlcap demo --help)"),
    (["demo", "--n-train", "0"],
     "rlcap demo: error: argument --n-train: expected an integer >= 1, got 0 (see rlcap demo --help)"),
    (["demo", "--n-val", "0"],
     "rlcap demo: error: argument --n-val: expected an integer >= 1, got 0 (see rlcap demo --help)"),
    (["demo", "--n-test", "-3"],
     "rlcap demo: error: argument --n-test: expected an integer >= 1, got -3 (see rlcap demo --help)"),
    (["bench", "--out", "o", "--image-size", "31"],
     "rlcap bench: error: argument --image-size: expected an integer >= 32, got 31 (see rlcap bench --help)"),
    (["data", "shapes", "--out", "o", "--n-train", "-1"],
     "rlcap data shapes: error: argument --n-train: expected an integer >= 0, got -1 (see rlcap data shapes --help)"),
    (["data", "shapes", "--out", "o", "--workers", "0"],
     "rlcap data shapes: error: argument --workers: expected an integer >= 1, got 0 (see rlcap data shapes --help)"),
    (["data", "shapes", "--out", "o", "--image-size", "10"],
     "rlcap data shapes: error: argument --image-size: expected an integer >= 32, got 10 "
     "(see rlcap data shapes --help)"),
    (["eval", "ckpt", "--nope"],
     "rlcap: error: unrecognized arguments: --nope (see rlcap --help)"),
])
def test_bad_numeric_option_is_one_line(capsys, argv, line):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err == line + "\n" and captured.out == ""


def test_every_numeric_option_is_checked():
    """No subcommand reads a number with a bare int/float (which would accept 0 or -2 silently)."""
    from rlcap.cli import SUBCOMMANDS, build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert set(SUBCOMMANDS) <= set(commands)
    stack = list(commands.values())
    while stack:
        sub = stack.pop()
        for action in sub._actions:
            assert action.type not in (int, float), f"{sub.prog} {action.option_strings}"
            if action.choices and isinstance(action.choices, dict):
                stack.extend(action.choices.values())


def test_a_range_includes_its_upper_bound_when_told():
    import argparse

    from rlcap.cli.options import float_range

    below, up_to = float_range(0.0, 1.0), float_range(0.0, 1.0, include_high=True)
    assert up_to("1") == 1.0 and up_to("0") == 0.0 and below("0.5") == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match=r"expected a number in \[0, 1\), got 1$"):
        below("1")
    for bad in ("1.5", "-0.1", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"expected a number in \[0, 1\], got"):
            up_to(bad)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from tests.tiny import tiny_xe_run

    return tiny_xe_run(tmp_path_factory.mktemp("options"), epochs=1)


@pytest.mark.parametrize("order", ["after-checkpoint", "after-options", "between-options"])
def test_eval_data_overrides_anywhere(trained, tmp_path, capsys, order):
    dataset, feats, ckpt = trained
    override, out = f"data.features={feats}", ["--out", str(tmp_path / "e")]
    argv = {
        "after-checkpoint": ["eval", str(ckpt), override, "--beam-size", "1", *out],
        "after-options": ["eval", str(ckpt), "--beam-size", "1", *out, override],
        "between-options": ["eval", "--beam-size", "1", str(ckpt), override, *out, "--split", "val"],
    }[order]
    assert main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "e" / "predictions.json").is_file()


def test_train_overrides_anywhere():
    """`rlcap train CONFIG key=value` overrides are read wherever an option sits among them."""
    from rlcap.cli import build_parser

    for argv in (["train", "c.yaml", "--help-config", "a=1", "b=2"], ["train", "--help-config", "c.yaml", "a=1", "b=2"],
                 ["train", "c.yaml", "a=1", "--help-config", "b=2"]):
        args = build_parser(argv).parse_args(argv)
        assert (args.config, args.overrides, args.help_config) == ("c.yaml", ["a=1", "b=2"], True)


def test_command_options_are_told_from_the_runs_settings():
    """resume=, overwrite= and nproc= are what rlcap train does, not settings of the run: taken out of
    the overrides (the last of each wins), checked, and the rest left in their order."""
    from rlcap.command_options import CommandOptions, command_options
    from rlcap.errors import ConfigError

    options, rest = command_options(["optim.lr=0.1", "resume=true", "nproc=2", "resume=False", "overwrite=TRUE",
                                     "data.resume=x"])
    assert options == CommandOptions(nproc=2, resume=False, overwrite=True)
    assert rest == ["optim.lr=0.1", "data.resume=x"]
    assert command_options(["seed=3"]) == (CommandOptions(1, False, False), ["seed=3"])
    with pytest.raises(ConfigError, match="resume: expected true or false, got '3'"):
        command_options(["resume=3"])
    with pytest.raises(ConfigError, match="nproc: expected a whole number of processes >= 1, got '0'"):
        command_options(["nproc=0"])


def test_a_command_option_in_a_recipe_says_where_it_belongs(tmp_path, capsys):
    """A recipe (or an api override) holding resume is refused with where resume goes instead."""
    from rlcap.errors import ConfigError
    from rlcap.methods import load_run_config

    recipe = tmp_path / "old.yaml"
    recipe.write_text("algorithm: xe\nresume: true\n")
    with pytest.raises(ConfigError, match=r"resume is not a setting of the run but an option of the command: "
                                          r"resume=\.\.\. on the rlcap train command line, or api.train\(cfg, "
                                          r"resume=True\)"):
        load_run_config(recipe)
    with pytest.raises(ConfigError, match="overwrite is not a setting of the run"):
        load_run_config(None, ["overwrite=true"])
    assert main(["train", "--help-config", "algorithm=xe", "resume=true"]) == 0  # the option is not a key
    out = capsys.readouterr().out
    assert "\nresume " not in out and "options of the command, not settings of the run: resume=... continue" in out
