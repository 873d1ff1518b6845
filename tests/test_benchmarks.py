"""The speed benchmark's quick mode runs end to end, so that it cannot rot."""

import csv
import itertools
import os
import sys

import keras
import pytest

from keras_vit.inspect import count_flops

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND = keras.backend.backend()


@pytest.fixture(scope="module")
def speed_benchmark():
    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    try:
        import speed_benchmark as module
    finally:
        sys.path.remove(os.path.join(REPO, "benchmarks"))
    return module


def test_quick_mode_measures_every_row_beside_the_peers(speed_benchmark, tmp_path, capsys):
    engines = [f"keras-vit:{BACKEND}", f"keras-hub:{BACKEND}"]
    if BACKEND == "torch":  # the PyTorch peers, once
        engines += ["timm", "hf"]
    csv_path = tmp_path / "speed.csv"
    rows = speed_benchmark.main(["--quick", "--engines", ",".join(engines), "--csv", str(csv_path)])
    printed = capsys.readouterr().out

    expected = set(itertools.product(engines, speed_benchmark.PRECISIONS, speed_benchmark.MODES))
    assert {(r["engine"], r["precision"], r["mode"]) for r in rows} == expected
    flops = count_flops("vit_ti16", image_size=32, depth=2)
    for row in rows:
        assert row["note"] == "", row
        batch = speed_benchmark.MODES[row["mode"]][1]
        assert row["batch"] == batch and row["images_per_s"] > 0 and row["peak_rss_mb"] > 0
        work = flops * batch * (3 if row["mode"].startswith("train") else 1)
        assert row["gflops_per_s"] == pytest.approx(work / row["ms_per_step"] / 1e6, rel=0.02)
        assert row["fraction_of_peak"] == pytest.approx(row["gflops_per_s"] / row["peak_gflops_per_s"], rel=0.02)
        assert 0 < row["fraction_of_peak"] < 2  # a tiny model is far from peak, but it is measured
        assert row["peak_gflops_per_s"] > 1
    assert f"keras-hub:{BACKEND}" in printed and "speedup" in printed
    with open(csv_path) as f:
        written = list(csv.DictReader(f))
    assert [(r["engine"], r["precision"], r["mode"]) for r in written] == [
        (r["engine"], r["precision"], r["mode"]) for r in rows
    ]


@pytest.mark.parametrize("argv, message", [
    (["--engines", "keras-vit:numpy"], "unknown engine ['keras-vit:numpy']"),
    (["--models", "vit_b16@512"], "unknown model ['vit_b16@512']"),
    (["--precisions", "float16"], "unknown precision ['float16']"),
])
def test_bad_arguments_say_what_is_expected(speed_benchmark, argv, message):
    with pytest.raises(SystemExit, match=message.replace("[", r"\[").replace("]", r"\]")):
        speed_benchmark.parse_args(argv)
