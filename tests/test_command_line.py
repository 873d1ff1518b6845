"""The command line's parsing and help: every flag described, hyphenated, in its group,
with its default as typed; both spellings of a flag, switches, the old --preset; no
abbreviations; the training's progress as the output suits."""

import argparse
import os

import pytest

from keras_vit.commands import COMMANDS, command
from keras_vit.commands.recipe_flags import parse_args
from keras_vit.training import make_config
from keras_vit.training.config import FIELDS, GROUPS, MAE_OPTIONS, MODEL_OPTIONS

pytestmark = pytest.mark.backend_free  # Python alone: runs once (tests/backend_free.py)


def _help(name):
    return " ".join(command(name).build_parser().format_help().split())


def _description(action):
    """A flag's help without the default the parser adds: ``(default: ...)`` at its end."""
    return action.help.partition("(default: ")[0].strip()


@pytest.mark.parametrize("name", COMMANDS)
def test_every_flag_has_a_description_beyond_its_default(name):
    undescribed = [
        action.option_strings[0] if action.option_strings else action.dest
        for action in command(name).build_parser()._actions
        if action.help is not argparse.SUPPRESS
        # No description, or a note to a programmer ("None: the dataset's own default").
        if not _description(action) or _description(action).startswith("None:")
    ]
    assert not undescribed, f"keras-vit {name} --help: no description for {', '.join(undescribed)}"


def test_every_flag_is_hyphenated_and_help_shows_groups_choices_and_defaults_as_typed():
    hidden = {"--preset"}  # the training commands' old spelling of --recipe, taken with a warning
    for name in COMMANDS:
        parser = command(name).build_parser()
        assert parser.prog == f"keras-vit {name}"
        shown = _help(name)
        for flag in parser.takes_value:
            assert "_" not in flag, f"keras-vit {name}: {flag}"
            if flag not in hidden and not flag.startswith("--no-"):
                assert f"{flag} " in shown or f"{flag}," in shown, f"keras-vit {name} --help lacks {flag}"
    # The recipes' flags: in their groups, with their fields' help, choices or types and the recipe's values.
    shown = _help("pretrain")
    config = make_config("digits_pretrain")
    for title in ("data:", "augmentation:", "model:", "optimisation:", "fine-tuning:", "output:", "distribution:"):
        assert f" {title} " in shown, title
    help = {name: field.metadata["help"] for name, field in {**FIELDS, **MODEL_OPTIONS}.items()}
    assert f"--learning-rate FLOAT {help['learning_rate']} (default: {config.learning_rate})" in shown
    assert "--optimizer {adam,sgd}" in shown and "--strategy {default,mirrored,tpu,data_parallel," in shown
    assert "--resume [true|false] continue the newest run" in shown and "(default: false; --no-resume: false)" in shown
    assert "--freeze {backbone,none}" in shown and f"--depth INT {help['depth']} (default: 4)" in shown
    assert f"--fewshot-shots TEXT {help['fewshot_shots']} (default: {config.fewshot_shots})" in shown
    # Every command: choices listed, a default as typed, none for a required or unset flag.
    assert "--normalization {auto,vit,imagenet}" in _help("export") and "(default: 1,5,10,25)" in _help("fewshot")
    assert "--head-fusion {mean,max,min}" in _help("inspect") and "--top TOP classes shown per image (default: 5)" in (
        _help("classify")
    )
    assert "--output OUTPUT folder to write into, e.g. saved_models/<run>/export --overwrite" in _help("export")
    assert "probability rows here" in _help("classify") and "rows here (default" not in _help("classify")


def test_flags_take_both_spellings_switches_and_the_old_recipe_flag(capsys):
    # Every field is a flag in exactly one group (a field left out would have no flag).
    grouped = [name for names in GROUPS.values() for name in names]
    assert sorted(grouped) == sorted([*FIELDS, *MODEL_OPTIONS, *MAE_OPTIONS])

    hyphens = parse_args(["--learning-rate", "0.5", "--no-jit-compile", "--resume", "--depth=2"], "digits_pretrain")
    underscores = parse_args(["--learning_rate", "0.5", "--jit_compile", "false", "--resume", "true", "--depth=2"],
                             "digits_pretrain")  # fmt: skip
    assert hyphens == underscores
    assert (hyphens.learning_rate, hyphens.jit_compile, hyphens.resume) == (0.5, False, True)
    assert hyphens.model_options["depth"] == 2
    # A field of integers takes one or several, joined by commas.
    grids = [parse_args(["--rope-reference-grid", text], "digits_pretrain").model_options for text in ("4", "4,6")]
    assert [options["rope_reference_grid"] for options in grids] == [4, (4, 6)]
    assert parse_args(["--recipe", "paper_finetune"], "digits_pretrain").optimizer == "sgd"
    assert capsys.readouterr().err == ""
    assert parse_args(["--preset", "paper_finetune"], "digits_pretrain").optimizer == "sgd"
    assert (
        capsys.readouterr().err
        == "warning: --preset paper_finetune is --recipe paper_finetune now (--preset names pretrained weights).\n"
    )
    with pytest.raises(ValueError, match="take a recipe as --recipe .* and pretrained weights as --init-from vit_s16"):
        parse_args(["--preset", "vit_s16.augreg_in21k"], "digits_finetune")
    # The flags of a program launch starts are that program's: passed on as written.
    launch = command("launch").build_parser()
    args = launch.parse_args(["--num_processes", "3", "train.py", "--num_processes", "x", "--my_flag"])
    assert args.num_processes == 3 and args.arguments == ["--num_processes", "x", "--my_flag"]


def test_a_bad_flag_or_value_is_one_line_naming_the_flag_and_exit_status_2(capsys):
    with pytest.raises(SystemExit) as exit:
        parse_args(["--objective", "masked_patches"], "digits_pretrain")
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--objective: invalid choice: 'masked_patches'" in err
    assert "keras-vit pretrain --help lists the flags" in err
    with pytest.raises(ValueError, match=r"--resume expects true or false, got 'maybe'"):
        parse_args(["--resume", "maybe"], "digits_pretrain")
    with pytest.raises(ValueError, match=r"--rope-reference-grid expects an integer or integers joined by commas, got"):
        parse_args(["--rope-reference-grid", "4x6"], "digits_pretrain")
    with pytest.raises(ValueError, match=r"Unknown flag\(s\): --lr \(did you mean --learning-rate"):
        parse_args(["--lr", "0.1"], "digits_finetune")


def test_an_abbreviated_flag_is_refused_not_taken_for_the_flag_it_begins(capsys):
    # argparse's default takes --epoch for --epochs silently; here it is an unknown flag.
    with pytest.raises(ValueError, match=r"Unknown flag\(s\): --epoch \(did you mean --epochs"):
        parse_args(["--epoch", "5"], "digits_pretrain")
    for name in COMMANDS:
        assert command(name).build_parser().allow_abbrev is False, name
    with pytest.raises(SystemExit) as exit:
        command("presets").build_parser().parse_args(["--verb"])  # not --verbose
    assert exit.value.code == 2
    assert (
        capsys.readouterr().err == "error: unrecognized arguments: --verb; keras-vit presets --help lists the flags\n"
    )


def test_training_shows_progress_bars_on_a_terminal_and_one_line_per_epoch_elsewhere():
    from keras_vit.training.processes import fit_verbosity

    assert parse_args([], "digits_pretrain").progress is None  # the default: the output decides
    assert parse_args(["--progress", "none"], "digits_pretrain").progress is None
    leader, follower = os.openpty()  # a terminal, as a shell gives one
    try:
        with open(follower, "w", closefd=False) as terminal, open(os.devnull, "w") as log:
            assert [fit_verbosity(None, terminal), fit_verbosity(None, log)] == [1, 2]
            assert [fit_verbosity(p, log) for p in (0, 1, 2)] == [0, 1, 2]  # as asked, wherever it goes
    finally:
        os.close(leader)
        os.close(follower)


def test_presets_timm_lists_timms_pretrained_names_with_their_repositories(capsys):
    assert command("presets").main(["--timm", "*reg4_dinov2*"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines()[2:]]
    assert [
        "| vit_small_patch14_reg4_dinov2.lvd142m",
        "518",
        "0",
        "timm/vit_small_patch14_reg4_dinov2.lvd142m |",
    ] in rows
    assert all(row[0].strip("| ").endswith(".lvd142m") for row in rows) and len(rows) == 4  # small, base, large, giant
    assert command("presets").main(["--timm", "no_such*"]) == 2
    assert "no timm name matches 'no_such*'" in capsys.readouterr().err
