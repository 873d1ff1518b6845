"""What bounds ViT inference here: the model beside its own matrix products alone.

For each Keras backend, in one process each, three rates in GFLOP/s:

    peak        one 2048x2048 float32 matmul, best of many calls (as speed_benchmark.py)
    matmuls     only the model's matrix products, at the model's shapes, compiled the way
                the model's predict step is (jax.jit; tf.function, with XLA only where
                Keras' jit_compile="auto" picks it, which is never on a CPU-only machine;
                eager torch):
                per block the fused qkv, QK^T, AV, output projection, fc1 and fc2
    model       the whole model's predict_on_batch

The model and its matmuls take turns over ``--rounds`` rounds in one process; each rate is
the median over the rounds, and ``model time / matmul time`` is the median of the rounds'
own ratios, with their min-max.

``model / matmuls`` near 1 says the non-matmul work (LayerNorm, softmax, GELU, residual adds,
layout changes) costs next to nothing and the model runs as fast as its matmuls can; the
gap to ``peak`` is then the matmul kernels at these shapes (a few hundred token rows,
K = 768), not the model code.

    python benchmarks/matmul_ceiling.py                      # ViT-B/16, 224, batch 32
    python benchmarks/matmul_ceiling.py --model vit_s16 --batch 8 --backends jax
"""

import argparse
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speed_benchmark  # noqa: E402  (the peak measurement and the engine environment)


def _matmul_chain(spec, batch, tokens):
    """The model's matrix products alone; returns (function, inputs, FLOPs)."""
    import numpy as np
    from keras import ops

    width, heads, mlp = spec.hidden_size, spec.num_heads, spec.mlp_dim
    rng = np.random.default_rng(0)
    weight = lambda *shape: (rng.standard_normal(shape) * 0.02).astype("float32")  # noqa: E731
    blocks = [
        dict(qkv=weight(width, 3 * width), out=weight(width, width), fc1=weight(width, mlp), fc2=weight(mlp, width))
        for _ in range(spec.depth)
    ]

    def chain(x, blocks):
        for w in blocks:
            qkv = ops.reshape(ops.matmul(x, w["qkv"]), (batch, tokens, 3, heads, width // heads))
            logits = ops.einsum("bqhd,bkhd->bhqk", qkv[:, :, 0], qkv[:, :, 1])
            # A scale, not a softmax: the point is to leave only the products.
            attended = ops.einsum("bhqk,bkhd->bqhd", logits * 1e-3, qkv[:, :, 2])
            x = x + ops.matmul(ops.reshape(attended, (batch * tokens, width)), w["out"])
            x = x + ops.matmul(ops.matmul(x, w["fc1"]), w["fc2"])
        return x

    per_block = 2 * batch * tokens * width * (3 * width + width + 2 * mlp) + 2 * 2 * batch * tokens * tokens * width
    return chain, (weight(batch * tokens, width), blocks), spec.depth * per_block


def _compiled(chain, inputs, backend, jit_compile):
    """A blocking call of ``chain`` compiled as the backend's predict step is."""
    if backend == "jax":
        import jax

        f, args = jax.jit(chain), jax.tree_util.tree_map(jax.numpy.asarray, inputs)
        return lambda: f(*args).block_until_ready()
    if backend == "tensorflow":
        import tensorflow as tf

        f, args = tf.function(chain, jit_compile=jit_compile), tf.nest.map_structure(tf.constant, inputs)
        return lambda: f(*args).numpy()
    import torch

    args = tuple(torch.utils._pytree.tree_map(torch.from_numpy, inputs))

    def eager():
        with torch.no_grad():
            return chain(*args)

    return eager


def measure(backend, name, image_size, batch, min_seconds, rounds):
    """One backend's row; runs in that backend's process."""
    import numpy as np

    import keras_vit
    from keras_vit.inspect import count_flops

    spec = keras_vit.get_spec(name).replace(image_size=image_size)
    tokens = spec.grid_size[0] * spec.grid_size[1] + spec.num_prefix_tokens
    chain, inputs, chain_flops = _matmul_chain(spec, batch, tokens)
    model = keras_vit.create_model(name, image_size=image_size)
    # On tensorflow, the model's jit_compile ("auto" resolved) decides XLA or Grappler:
    # the chain must run on the same kernels as the model it bounds.
    run_chain = _compiled(chain, inputs, backend, model.jit_compile)
    images = np.random.default_rng(0).random((batch, image_size, image_size, 3), dtype=np.float32)
    run_model = lambda: model.predict_on_batch(images)  # noqa: E731
    for step in (run_chain, run_model):  # compile, and let the thread pools settle
        speed_benchmark._timings(step, 1, 1, 0)
    # The two take turns, one round after another, so that each round's ratio compares calls
    # made seconds apart: this machine's speed drifts by more than the gaps being measured.
    seconds, _ = speed_benchmark.interleaved_timings(
        {"matmuls": run_chain, "model": run_model}, rounds, min_steps=1, min_seconds=min_seconds
    )
    model_flops = count_flops(name, image_size=image_size) * batch
    per_round = [m / c * chain_flops / model_flops for m, c in zip(seconds["model"], seconds["matmuls"])]
    return dict(
        backend=backend,
        model=f"{name}@{image_size}",
        batch=batch,
        peak=speed_benchmark.framework_peaks(backend, dtypes=("float32",))["float32"],
        matmuls=chain_flops / statistics.median(seconds["matmuls"]) / 1e9,
        model_gflops=model_flops / statistics.median(seconds["model"]) / 1e9,
        model_over_matmuls_time=statistics.median(per_round),
        rounds=per_round,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="vit_b16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--backends", default=",".join(speed_benchmark.BACKENDS))
    parser.add_argument("--min-seconds", type=float, default=20.0, help="time each rate for at least this long")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of the two taking turns")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        row = measure(args.worker, args.model, args.image_size, args.batch, args.min_seconds, args.rounds)
        speed_benchmark.print_row(row)
        return [row]
    backends = speed_benchmark._choices(args.backends, speed_benchmark.BACKENDS, "backend")
    rows = []
    for backend in backends:
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "--worker",
            backend,
            "--model",
            args.model,
            "--image-size",
            str(args.image_size),
            "--batch",
            str(args.batch),
            "--min-seconds",
            str(args.min_seconds),
            "--rounds",
            str(args.rounds),
        ]
        done = subprocess.run(
            command,
            env=speed_benchmark._worker_env([f"keras-vit:{backend}"]),
            capture_output=True,
            text=True,
            check=False,
        )
        got = speed_benchmark.worker_rows(done.stdout)
        if not got:
            raise RuntimeError(f"{backend} failed:\n{done.stderr[-2000:]}")
        rows.extend(got)
    print(
        "| backend | model | batch | peak GFLOP/s | matmuls alone | whole model | model / peak "
        "| matmuls / peak | model time / matmul time (per FLOP) | its min-max over the rounds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['model']} | {r['batch']} | {r['peak']:.0f} | {r['matmuls']:.0f} "
            f"| {r['model_gflops']:.0f} | {r['model_gflops'] / r['peak']:.2f} | {r['matmuls'] / r['peak']:.2f} "
            f"| {r['model_over_matmuls_time']:.3f} | {min(r['rounds']):.3f}-{max(r['rounds']):.3f} |"
        )
    return rows


if __name__ == "__main__":
    main()
