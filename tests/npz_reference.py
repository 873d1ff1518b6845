"""An independent float64 numpy forward of the original google-research ViT and its
ResNet(BiT) hybrid, read straight from an ``.npz`` in their key layout (tests import this
module, never each other).

Written from the papers and the original code's published definitions (``vit_jax``'s
``models_vit.py`` and ``models_resnet.py``), not from keras-vit or timm: TF "SAME"
padding, the weight-standardised convolution ``(w - mean) / (std + std_eps)``, flax's
GroupNorm (32 groups, epsilon ``group_norm_epsilon``), LayerNorm ``layer_norm_epsilon``,
and flax's GELU (``approximate=True``: the tanh form). Each of those numerics is an
argument, so a test can ask for the forward a wrong option would give.
"""

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def _same_padding(size, kernel, stride):
    """TF "SAME": the output is ceil(size / stride); the odd extra pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _pad_same(x, kernel, stride, value=0.0):
    rows, cols = (_same_padding(x.shape[i], kernel, stride) for i in (1, 2))
    return np.pad(x, ((0, 0), rows, cols, (0, 0)), constant_values=value)


def conv_same(x, kernel, stride):
    """NHWC convolution with an HWIO kernel and TF "SAME" padding."""
    k = kernel.shape[0]
    windows = sliding_window_view(_pad_same(x, k, stride), (k, k), axis=(1, 2))[:, ::stride, ::stride]
    return np.einsum("nhwcij,ijco->nhwo", windows, kernel)


def max_pool_same(x, size=3, stride=2):
    windows = sliding_window_view(_pad_same(x, size, stride, -np.inf), (size, size), axis=(1, 2))
    return windows[:, ::stride, ::stride].max(axis=(-2, -1))


def standardize(kernel, form="std_eps", epsilon=1e-5):
    """BiT's weight standardisation over (kh, kw, in), per output channel."""
    centred = kernel - kernel.mean(axis=(0, 1, 2))
    variance = centred.var(axis=(0, 1, 2))
    return centred / (np.sqrt(variance) + epsilon if form == "std_eps" else np.sqrt(variance + epsilon))


def group_norm(x, scale, bias, groups=32, epsilon=1e-6):
    n, h, w, c = x.shape
    g = x.reshape(n, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)
    return ((g - mean) / np.sqrt(var + epsilon)).reshape(x.shape) * scale + bias


def layer_norm(x, scale, bias, epsilon=1e-6):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + epsilon) * scale + bias


def gelu(x, approximate=True):
    if approximate:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def resnet(w, x, block_units, std_conv_form="std_eps", std_conv_epsilon=1e-5, group_norm_epsilon=1e-6):
    """The hybrid's BiT ResNet (v1 bottlenecks, no pre-activation), ``w`` the .npz arrays."""

    def conv(x, name, stride=1):
        return conv_same(x, standardize(w[name + "/kernel"], std_conv_form, std_conv_epsilon), stride)

    def norm(x, name):
        return group_norm(x, w[name + "/scale"], w[name + "/bias"], epsilon=group_norm_epsilon)

    relu = lambda v: np.maximum(v, 0)
    x = max_pool_same(relu(norm(conv(x, "conv_root", 2), "gn_root")))
    for i, units in enumerate(block_units, 1):
        for j in range(1, units + 1):
            u = f"block{i}/unit{j}/"
            stride = 2 if (i > 1 and j == 1) else 1
            residual = norm(conv(x, u + "conv_proj", stride), u + "gn_proj") if j == 1 else x
            y = relu(norm(conv(x, u + "conv1"), u + "gn1"))
            y = relu(norm(conv(y, u + "conv2", stride), u + "gn2"))
            x = relu(residual + norm(conv(y, u + "conv3"), u + "gn3"))
    return x


def vit_logits(
    path,
    images,
    patch,
    heads,
    pooling="token",
    block_units=None,
    gelu_approximate=True,
    layer_norm_epsilon=1e-6,
    norm_after_pool=False,
    **resnet_numerics,
):
    """The logits of the ``.npz`` at ``path`` for NHWC ``images``, in float64."""
    w = {k: v.astype(np.float64) for k, v in np.load(path).items()}
    x = np.asarray(images, np.float64)
    if block_units is not None:
        x = resnet(w, x, block_units, **resnet_numerics)
    x = conv_same(x, w["embedding/kernel"], patch) + w["embedding/bias"]
    x = x.reshape(x.shape[0], -1, x.shape[-1])
    if "cls" in w:
        x = np.concatenate([np.broadcast_to(w["cls"], (x.shape[0], 1, x.shape[-1])), x], axis=1)
    x = x + w["Transformer/posembed_input/pos_embedding"]
    depth = len({k.split("/")[1] for k in w if k.startswith("Transformer/encoderblock_")})
    for i in range(depth):
        b = f"Transformer/encoderblock_{i}/"
        a = b + "MultiHeadDotProductAttention_1/"
        y = layer_norm(x, w[b + "LayerNorm_0/scale"], w[b + "LayerNorm_0/bias"], layer_norm_epsilon)
        q, k, v = (
            np.einsum("ntd,dhk->nhtk", y, w[a + n + "/kernel"]) + w[a + n + "/bias"][:, None]
            for n in ("query", "key", "value")
        )
        logits = np.einsum("nhtk,nhsk->nhts", q, k) / math.sqrt(q.shape[-1])
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        y = np.einsum("nhts,nhsk->nthk", weights, v)
        x = x + np.einsum("nthk,hkd->ntd", y, w[a + "out/kernel"]) + w[a + "out/bias"]
        y = layer_norm(x, w[b + "LayerNorm_2/scale"], w[b + "LayerNorm_2/bias"], layer_norm_epsilon)
        m = b + "MlpBlock_3/"
        y = gelu(y @ w[m + "Dense_0/kernel"] + w[m + "Dense_0/bias"], gelu_approximate)
        x = x + y @ w[m + "Dense_1/kernel"] + w[m + "Dense_1/bias"]
    norm = lambda v: layer_norm(
        v, w["Transformer/encoder_norm/scale"], w["Transformer/encoder_norm/bias"], layer_norm_epsilon
    )
    if norm_after_pool:
        pooled = norm(x[:, 0] if pooling == "token" else x.mean(axis=1))
    else:
        x = norm(x)
        pooled = x[:, 0] if pooling == "token" else x.mean(axis=1)
    return pooled @ w["head/kernel"] + w["head/bias"]
