"""keras-vit as a user installs and runs it: the wheel in a fresh environment with one
backend, the ``keras-vit`` program and its help, quiet output, and what ``import keras_vit``
pulls in."""

import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile

import keras
import numpy as np
import pytest
from helpers import TINY_ENCODER, once_on, to_numpy
from upstream import write_original_npz

import keras_vit
from keras_vit.commands import COMMANDS, command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND = keras.backend.backend()
PROGRAM = shutil.which("keras-vit", path=os.path.dirname(sys.executable))  # installed beside this Python
FRAMEWORKS = ("tensorflow", "torch")  # the backends that are whole frameworks of their own
TINY_RUN = ["--epochs", "1", "--steps_per_epoch", "2", "--batch_size", "16", "--depth", "1",
            "--hidden_size", "32", "--num_heads", "2", "--mlp_dim", "64", "--progress", "2"]  # fmt: skip


def child_env(**env):
    """A child process's environment: this test run's backend, the source tree importable."""
    env = {**os.environ, "KERAS_BACKEND": BACKEND, "PYTHONPATH": ROOT, **env}
    for name in ("KERAS_VIT_VERBOSE", "TF_CPP_MIN_LOG_LEVEL"):  # as in a new shell (importing Keras sets the latter)
        env.pop(name, None)
    return env


def run(argv, **env):
    """``argv`` in a child process (``child_env``), its output captured."""
    return subprocess.run(argv, env=child_env(**env), capture_output=True, text=True, timeout=600)


def test_import_keras_vit_imports_no_other_framework():
    # A name used: the package itself imports none until then (tests/test_imports.py).
    used = "import sys, keras_vit; keras_vit.create_model"
    code = f"{used}; print(' '.join(m for m in {FRAMEWORKS} if m in sys.modules))"
    child = run([sys.executable, "-c", code])
    assert child.returncode == 0, child.stderr
    assert set(child.stdout.split()) == {BACKEND} & set(FRAMEWORKS), child.stdout


# command: (a bad value, the arguments that lead to it). Each is found before any work.
BAD_VALUES = {
    "pretrain": ["--epochs", "many"],
    "finetune": ["--optimizer", "adamw"],
    "launch": ["--num-processes", "two", "pretrain"],
    "main": ["--progress", "3"],
    "classify": ["model.keras", "photo.jpg", "--top", "x"],
    "export": ["model.keras", "--output", "out", "--top-k", "x"],
    "fewshot": ["model.keras", "--shots", "1,x"],
    "evaluate": ["clip.keras", "--images", "photos", "--top-k", "1,x"],
    "inspect": ["model.keras", "--head-fusion", "median"],
    "presets": ["no_such_preset*"],
}
POSITIONALS = {"classify": ["model.keras", "photo.jpg"], "export": ["model.keras", "--output", "out"],
               "fewshot": ["model.keras"], "inspect": ["model.keras"],
               "evaluate": ["clip.keras", "--images", "photos"]}  # fmt: skip


def _status(argv):
    from keras_vit.commands import main

    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def test_every_command_answers_bad_input_and_a_closed_output_in_one_error_line(capsys):
    assert set(BAD_VALUES) == set(COMMANDS)
    for name in COMMANDS:
        for argv in ([*POSITIONALS.get(name, []), "--no-such-flag", "1"], BAD_VALUES[name]):
            status = _status([name, *argv])
            out, err = capsys.readouterr()
            assert status == 2 and out == "", (name, argv, status, out)
            assert len(err.splitlines()) == 1 and err.startswith("error: "), (name, argv, err)
        # The help into a pipe its reader has closed (keras-vit pretrain --help | head -0).
        read, write = os.pipe()
        os.close(read)
        stdout = sys.stdout
        sys.stdout = os.fdopen(write, "w")
        try:
            status = _status([name, "--help"])
        finally:
            sys.stdout.close()
            sys.stdout = stdout
        out, err = capsys.readouterr()
        assert status == 2, (name, status)
        assert err == "error: standard output was closed before the command finished (its reader ended)\n", err


@once_on("jax", "the program's entry is one for every backend (each backend's quiet start: the main job's test)")
def test_the_program_lists_its_commands_and_answers_a_wrong_one_and_a_closed_pipe_in_one_line():
    assert PROGRAM, "keras-vit is not installed beside this Python: pip install -e ."
    listing = run([PROGRAM, "--help"])
    assert listing.returncode == 0 and listing.stderr == "", listing.stderr
    assert all(f"  {name} " in listing.stdout for name in COMMANDS), listing.stdout
    wrong = run([sys.executable, "-m", "keras_vit", "pretrian"])
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr.splitlines() == [
        f"error: Unknown command 'pretrian' (did you mean pretrain?); expected one of {', '.join(COMMANDS)}."
    ]
    # Into a pipe whose reader has ended, as a shell runs it (keras-vit presets | head -0):
    # Python's own flush of stdout at exit must not fail either.
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as stdout:
        child = subprocess.run([PROGRAM, "presets"], stdout=stdout, stderr=subprocess.PIPE, text=True, env=child_env(),
                               timeout=300)  # fmt: skip
    assert child.returncode == 2, child.stderr
    assert child.stderr.splitlines() == [
        "error: standard output was closed before the command finished (its reader ended)"
    ], child.stderr


def test_the_main_job_is_quiet(tmp_path):
    # The README's main job, small: no line from a backend's C++ logging, no warning.
    quiet = run([sys.executable, os.path.join(ROOT, "recipes", "main.py"), "--output_dir", str(tmp_path), *TINY_RUN])
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert quiet.stderr == "", quiet.stderr[-3000:]
    assert "warning" not in quiet.stdout.lower(), quiet.stdout[-3000:]
    assert "phase" in quiet.stdout and "finetune" in quiet.stdout  # it ends with the summary table
    assert glob.glob(str(tmp_path / "*finetune*" / "model.keras"))


@once_on("tensorflow", "TensorFlow serves the data pipelines on every backend: its lines are the ones held back")
def test_verbose_brings_the_backends_lines_back(tmp_path):
    # A few-shot evaluation (the data, a model, no training) as the main job's quiet start
    # would hold its lines back; --verbose shows them.
    model = str(tmp_path / "model.keras")
    small = keras_vit.create_model("vit_ti16", image_size=16, patch_size=4, num_classes=10, depth=1, **TINY_ENCODER)
    keras_vit.save_model(small, model)
    loud = run([PROGRAM, "fewshot", model, "--shots", "1", "--seeds", "1", "--verbose"])
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert "few-shot linear accuracy" in loud.stdout, loud.stdout[-3000:]
    assert "oneDNN" in loud.stderr or "cuda" in loud.stderr.lower(), f"--verbose showed: {loud.stderr[-3000:]}"


@pytest.mark.skipif(BACKEND != "jax", reason="the fresh environment has JAX only: one install, in the JAX run")
def test_the_wheel_installs_with_one_backend_and_works(tmp_path, rng):
    dist, env = tmp_path / "dist", tmp_path / "env"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), ROOT]
    subprocess.run(build, check=True, capture_output=True, timeout=300)
    (wheel,) = glob.glob(str(dist / "*.whl"))
    assert os.path.basename(wheel).startswith("keras_vision_transformer-")
    files = zipfile.ZipFile(wheel).namelist()
    data = ["keras_vit/labels/imagenet1k.tsv", "keras_vit/labels/imagenet21k.tsv", "keras_vit/presets/catalog.py"]
    tables = ("timm_architectures", "timm_pretrained", "open_clip_defaults")
    data += [f"keras_vit/checkpoints/{table}.json" for table in tables]
    for path in data:
        assert path in files, path
    assert not any(f.startswith(("tests/", "recipes/", "benchmarks/")) for f in files)

    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, timeout=300)
    python, program = str(env / "bin" / "python"), str(env / "bin" / "keras-vit")
    # From the local wheel; its requirements from the package index (this machine's cache).
    install = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[jax]"]
    installed = subprocess.run(install, capture_output=True, text=True, timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]

    checkpoint = write_original_npz(str(tmp_path / "ViT-tiny.npz"), rng, 64, 2, 4, 128, 8, 17, 10)
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.save(tmp_path / "images.npy", images)
    import torch  # here, not there: a PyTorch file the fresh environment cannot read

    torch.save({"weight": torch.zeros(2)}, tmp_path / "model.pth")
    script = textwrap.dedent("""
        import json, sys
        import keras, numpy as np
        import keras_vit, keras_vit.data
        from keras_vit.dependencies import MissingDependencyError
        from keras_vit.labels import decode_predictions, resolve_class_names

        facts = {"file": keras_vit.__file__, "frameworks": [m for m in ("tensorflow", "torch") if m in sys.modules]}
        model = keras_vit.create_model("vit_ti16", image_size=32, patch_size=8, hidden_size=64, depth=2,
                                       num_heads=4, mlp_dim=128, num_classes=10)
        facts["layout"] = keras_vit.load_weights(model, "ViT-tiny.npz").layout
        np.save("logits.npy", keras.ops.convert_to_numpy(model.predict(np.load("images.npy"), verbose=0)))
        facts["tabby"] = decode_predictions(np.eye(1000, dtype="float32")[281], top=1)[0][0][1]
        facts["classes_21k"] = len(resolve_class_names("imagenet21k", 21843))
        facts["presets"] = len(keras_vit.list_models(pretrained=True))
        facts["card"] = keras_vit.get_preset("vit_b16.augreg2_in21k_ft_in1k").card()
        for key, call in (("data", lambda: keras_vit.data.load_dataset("digits")),
                          ("tfds", lambda: keras_vit.data.load_dataset("cifar10")),
                          ("torch", lambda: keras_vit.load_weights(model, "model.pth"))):
            try:
                call()
            except MissingDependencyError as error:
                facts[key] = str(error)
        print(json.dumps(facts))
    """)
    fresh = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERAS_VIT_VERBOSE", "TF_CPP_MIN_LOG_LEVEL")
    }
    fresh["KERAS_BACKEND"] = "jax"
    child = subprocess.run([python, "-c", script], cwd=tmp_path, env=fresh, capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-3000:]
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    assert facts["file"].startswith(str(env)), facts["file"]  # the installed copy, not the source tree
    assert facts["frameworks"] == [] and facts["layout"] == "original"
    assert facts["tabby"] == "tabby, tabby cat" and facts["classes_21k"] == 21843
    assert facts["presets"] == len(keras_vit.list_models(pretrained=True)) and "augreg2" in facts["card"]
    assert "pip install 'keras-vision-transformer[data]'" in facts["data"], facts
    assert facts["tfds"].startswith("tensorflow") and "keras-vision-transformer[data]" in facts["tfds"], facts
    assert "pip install 'keras-vision-transformer[torch]'" in facts["torch"], facts

    # The same file gives the same logits as the source tree here.
    model = keras_vit.create_model("vit_ti16", image_size=32, patch_size=8, hidden_size=64, depth=2, num_heads=4,
                                   mlp_dim=128, num_classes=10)  # fmt: skip
    keras_vit.load_weights(model, checkpoint)
    np.testing.assert_allclose(np.load(tmp_path / "logits.npy"), to_numpy(model(images)), atol=1e-5, rtol=0)

    helped = subprocess.run([program, "--help"], env=fresh, capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0 and all(f"  {name} " in helped.stdout for name in COMMANDS), helped.stderr
    # A command that needs the data extra says so, in one line, before any work.
    needs = subprocess.run([program, "pretrain", "--epochs", "1"], cwd=tmp_path, env=fresh, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert needs.returncode == 2 and not (tmp_path / "saved_models").exists(), needs.stderr[-3000:]
    assert needs.stderr.splitlines() == [f"error: {facts['data']}"]


def test_classify_prints_each_images_top_classes_as_the_model_computes_them(tmp_path, capsys):
    from PIL import Image

    from keras_vit.layers import ImagePreprocessing

    model = keras_vit.VisionTransformer(
        image_size=16, patch_size=8, hidden_size=16, depth=1, num_heads=2, mlp_dim=32, num_classes=3,
        head_zero_init=False, preprocessing=ImagePreprocessing(16), class_names=["cat", "dog", "fox"],
    )  # fmt: skip
    keras_vit.save_preset(model, str(tmp_path / "preset"))
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 256, (20 + 4 * i, 24, 3), dtype=np.uint8) for i in range(3)]
    for i, image in enumerate(pixels):
        Image.fromarray(image).save(photos / f"{i}.png")
    table = tmp_path / "top.csv"
    status = command("classify").main([str(tmp_path / "preset"), str(photos), "--top", "2", "--csv", str(table)])
    assert status == 0
    printed = capsys.readouterr().out.splitlines()
    expected = model.classify(pixels)
    rows = list(csv.DictReader(open(table)))
    assert len(printed) == 3 * 3 and len(rows) == 3 * 2
    for i, row in enumerate(rows):
        image, rank = i // 2, i % 2
        index = int(np.argsort(-expected[image])[rank])
        assert row["image"] == str(photos / f"{image}.png") and row["class"] == ["cat", "dog", "fox"][index]
        assert abs(float(row["probability"]) - expected[image, index]) < 1e-5
        assert printed[3 * image + 1 + rank].endswith(f"{row['class']} ({index})")


def test_the_extras_that_errors_name_are_the_distributions_own():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from keras_vit import dependencies

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert dependencies.DISTRIBUTION == project["name"]
    assert set(dependencies.EXTRAS) <= set(project["optional-dependencies"])
    assert project["scripts"]["keras-vit"] == "keras_vit.commands:main"
