"""The recipe-overhead benchmark's quick mode runs end to end and writes what it measured."""

import csv
import importlib
import os
import sys

import keras
import pytest
from helpers import once_on

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def recipe_overhead():
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        return importlib.import_module("recipe_overhead")
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))


@once_on("torch", "the benchmark's harness is one for every backend; the recipe itself runs on each in test_recipes")
def test_quick_mode_times_the_recipe_beside_a_bare_fit(recipe_overhead, tmp_path, capsys):
    path = tmp_path / "overhead.csv"
    ratios = recipe_overhead.main(["--quick", "--csv", str(path)])
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(ratios) == 1
    row = rows[0]
    assert row["backend"] == keras.backend.backend() and row["recipe"] == "digits_pretrain"
    recipe, bare = float(row["recipe_step_ms"]), float(row["bare_step_ms"])
    assert recipe > 0 and bare > 0
    assert float(row["ratio"]) == pytest.approx(recipe / bare, rel=0.01)
    assert f"recipe step / bare fit step = {ratios[0]:.3f}" in capsys.readouterr().out


def test_steady_median_leaves_out_the_first_epoch_and_each_epochs_first_step(recipe_overhead):
    timer = recipe_overhead.StepTimes()
    timer.epochs = [[9.0, 9.0, 9.0], [5.0, 1.0, 3.0], [7.0, 2.0, 2.0]]
    assert timer.steady_median() == 2.0
    timer.epochs = [[1.0, 2.0]]
    with pytest.raises(ValueError, match="at least two epochs"):
        timer.steady_median()
