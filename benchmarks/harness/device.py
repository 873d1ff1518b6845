"""Where a process's framework computes, and the matmul peak it reaches there."""

from harness.timing import best_seconds


def device_kind(backend):
    """Where a process's framework computes: ``"cpu"``, else its accelerator (``"cuda"``,
    ``"gpu"``, ``"tpu"``). Keras puts a model there by itself; the PyTorch peers and the
    inputs are put there by the engines."""
    if backend == "torch":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend == "jax":
        import jax

        return jax.devices()[0].platform
    import tensorflow as tf

    return "gpu" if tf.config.list_physical_devices("GPU") else "cpu"


def torch_sync(device):
    """Waits for the device's queued kernels: a CUDA step returns before it has run."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


PEAK_DTYPES = ("float32", "bfloat16")
# A smoke run's (--quick) product: its peak is a column to fill, not a figure to quote, and a
# CPU without bfloat16 units takes most of a minute per 2048-sized bfloat16 product.
QUICK_PEAK_SIZE = 256


def _peak_size(device):
    # 2048 fills a CPU's caches and cores; an accelerator needs a larger product to reach its peak.
    return 2048 if device == "cpu" else 8192


def _matmul_peak(matmul, n, min_seconds=2.0):
    # The best of many calls, not the median: a peak is what the hardware can do, and a
    # median taken while the thread pool warms up reads low.
    return 2 * n**3 / best_seconds(matmul, warmup=3, min_steps=1, min_seconds=min_seconds) / 1e9


def framework_peaks(backend, device=None, dtypes=PEAK_DTYPES, quick=False):
    """``{dtype: GFLOP/s}`` for ``dtypes`` (of ``PEAK_DTYPES``): the framework's matmul peak on
    ``device`` (default: where it computes, ``device_kind``); ``quick``: on a small product,
    for a smoke run."""
    device = device or device_kind(backend)
    n = QUICK_PEAK_SIZE if quick else _peak_size(device)
    min_seconds = 0.0 if quick else 2.0
    if backend == "torch":
        return _torch_peaks(device, dtypes, n, min_seconds)
    import numpy as np

    a = np.random.default_rng(0).normal(size=(n, n)).astype("float32")
    peaks = {}
    for dtype in dtypes:
        if backend == "tensorflow":
            import tensorflow as tf

            x = tf.cast(tf.constant(a), dtype)
            peaks[dtype] = _matmul_peak(lambda: tf.linalg.matmul(x, x).numpy(), n, min_seconds)
        else:
            import jax
            import jax.numpy as jnp

            x = jnp.asarray(a, dtype=dtype)
            f = jax.jit(jnp.matmul)
            peaks[dtype] = _matmul_peak(lambda: f(x, x).block_until_ready(), n, min_seconds)
    return peaks


def _torch_peaks(device, dtypes, n, min_seconds):
    import torch

    peaks = {}
    for name in dtypes:
        x = torch.randn(n, n, dtype=getattr(torch, name), device=device)

        def matmul():
            torch.matmul(x, x)
            torch_sync(device)

        with torch.no_grad():
            peaks[name] = _matmul_peak(matmul, n, min_seconds)
    return peaks
