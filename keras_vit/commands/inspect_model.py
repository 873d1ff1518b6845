"""Seeing inside a trained ViT: the paper's section 4.5 figures, as PNGs and CSVs.

    keras-vit inspect saved_models/main-finetune/model.keras
    keras-vit inspect vit_b16.augreg2_in21k_ft_in1k --images photos/

The model is a ``.keras`` file, a local preset folder or a preset name; the images a
folder (.jpg, .png, ...) or, by default, the embedded digits' test split. They go
through the model's own pre-processing. Written to ``--output`` (default: ``figures/``
beside a model file, else ``saved_models/<name>/figures/``), each figure with the
numbers behind it:

- ``attention_rollout.png`` / ``.csv``: the images (taken in turn from each class: the
  folder's subfolders, the digits' labels), each with its class and the model's top
  prediction, and the attention rolled out through every block (Abnar & Zuidema 2020) over
  them (the paper's figure 6): the class token's, or for a model without one (average
  pooling) the mean over all tokens;
- ``attention_distance.png`` / ``.csv``: each head's mean attention distance in pixels
  against its depth (figure 7, right; figure 10 for a hybrid);
- ``position_embedding_similarity.png`` / ``.csv``: each patch's position-embedding
  cosine similarity with every other's (figure 7, centre);
- ``embedding_filters.png`` / ``.csv``: the principal components of the patch filters
  (figure 7, left; a plain ViT's only).

With ``--reconstruct``, for a masked autoencoder's model (``keras-vit pretrain --objective
mae``), one figure instead: ``reconstructions.png`` / ``.csv``, each image, its masked
input (the hidden patches black) and the reconstruction (the visible patches as they are,
the decoder's pixels in the hidden ones), with each image's reconstruction loss on its
hidden patches. The masks are the model's evaluation masks: the same every time.

Images, blocks, heads, patch rows and columns and components are counted from 1, in the
CSVs as in the plots. The files appear together or not at all. Exit status: 0 done, 2 bad
input (nothing written).
"""

import csv
import itertools
import os

import numpy as np

from keras_vit import commands
from keras_vit.atomic import StagedWrites
from keras_vit.commands.sources import image_paths
from keras_vit.dependencies import require
from keras_vit.images import read_image
from keras_vit.vocabulary import HEAD_FUSIONS

FIGURES = ("attention_rollout", "attention_distance", "position_embedding_similarity", "embedding_filters")


def build_parser():
    parser = commands.parser("inspect", __doc__)
    parser.add_argument("model", help="a .keras file, a local preset folder or a preset name")
    parser.add_argument("--images", help="a folder of images, subfolders too (none: the embedded digits' test split)")
    parser.add_argument("--num-images", type=int, default=8, help="images shown and averaged over")
    parser.add_argument("--output", help="folder for the figures (none: see above)")
    parser.add_argument(
        "--head-fusion",
        default="mean",
        choices=HEAD_FUSIONS,
        help="how the rollout fuses each block's heads: their mean (the paper's), max or min",
    )
    parser.add_argument(
        "--discard-ratio",
        type=float,
        default=0.0,
        help="share of each block's weakest attention weights the rollout drops, in [0, 1)",
    )
    parser.add_argument(
        "--num-components", type=int, default=28, help="principal components of the patch filters drawn"
    )
    parser.add_argument(
        "--reconstruct",
        action="store_true",
        help="a masked autoencoder's reconstructions of the images (reconstructions.png), not the figures above",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace figures already there")
    return parser


def pick_images(folder, count):
    """Up to ``count`` raw uint8 images and each one's class (None where unknown): from
    ``folder`` or the digits' test split, taken in turn from each class (a folder's
    subfolders, by name; the files in each sorted by path), so that every class is shown."""
    if folder is None:
        from keras_vit.data import load_digits

        test = load_digits().test
        labels = [str(label) for label in test.labels]
        chosen = _in_turn(labels, count)
        return [test.images[i] for i in chosen], [labels[i] for i in chosen]
    try:
        paths = image_paths(folder)
        classes = [os.path.dirname(os.path.relpath(path, folder)).split(os.sep)[0] or None for path in paths]
        chosen = _in_turn(classes, count)
        return [read_image(paths[i]) for i in chosen], [classes[i] for i in chosen]
    except ValueError as error:
        raise ValueError(f"--images: {error}") from None


def load_images(folder, count):
    """Up to ``count`` raw uint8 images, as ``pick_images`` picks them."""
    return pick_images(folder, count)[0]


def _in_turn(classes, count):
    """Indices of up to ``count`` items, one of each class in turn (classes sorted, each's in order)."""
    queues = {}
    for i, name in enumerate(classes):
        queues.setdefault(name, []).append(i)
    order = [queues[name] for name in sorted(queues, key=str)]
    turns = (queue[k] for k in range(max(map(len, order))) for queue in order if k < len(queue))
    return list(itertools.islice(turns, count))


def predictions(model, images):
    """The model's top class of each pre-processed image: ``(name, probability)``; None
    for a model without classifier."""
    if not model.spec.include_top:
        return [None] * len(images)
    scores = np.asarray(model.predict(images, verbose=0), dtype="float64")
    if not model.spec.outputs_probabilities:
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
    names = model.class_names
    top = scores.argmax(axis=-1)
    return [(str(names[k]) if names else str(k), float(scores[i, k])) for i, k in enumerate(top)]


def preprocess(model, raw):
    """Raw images -> (the model's input, the same images resized for display, 0..255)."""
    import keras

    from keras_vit.layers import ImagePreprocessing

    layer = model.preprocessing or ImagePreprocessing.from_normalization("vit", model.spec.image_size)
    display = ImagePreprocessing.from_config({**layer.get_config(), "mean": [0.0], "std": [1 / 255]})
    as_batch = lambda lay: np.stack([keras.ops.convert_to_numpy(lay(image)) for image in raw])  # noqa: E731
    return as_batch(layer), as_batch(display)


def figure_paths(output, figures):
    return {f"{name}.{ext}": os.path.join(output, f"{name}.{ext}") for name in figures for ext in ("png", "csv")}


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def plot_rollout(plt, path, shown, overlays, title, labels, predicted):
    count = len(shown)
    fig, axes = plt.subplots(2, count, figsize=(1.6 * count + 0.4, 4.2), squeeze=False)
    for i in range(count):
        for row, picture in enumerate((shown[i], overlays[i])):
            axes[row, i].imshow(picture.astype("uint8"), interpolation="nearest")
            axes[row, i].set_xticks([])
            axes[row, i].set_yticks([])
        caption = [] if labels[i] is None else [f"class {labels[i]}"]
        if predicted[i] is not None:
            caption.append(f"model: {predicted[i][0]} {predicted[i][1]:.0%}")
        axes[0, i].set_title("\n".join(caption), fontsize=7)
    axes[0, 0].set_ylabel("input")
    axes[1, 0].set_ylabel("attention")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def plot_distance(plt, path, distance, stride, uniform, title):
    depth, heads = distance.shape
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.axhline(uniform, color="grey", linestyle="--", linewidth=1, label="uniform attention")
    for head in range(heads):
        ax.scatter(np.arange(1, depth + 1), distance[:, head], s=18, label=f"head {head + 1}")
    ax.set_xlabel("network depth (block, from 1)")
    ax.set_ylabel("mean attention distance (pixels)")
    ax.set_xticks(np.arange(1, depth + 1))
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    if heads <= 16:
        ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    ax.text(0.99, 0.01, f"patch spacing {stride} px", transform=ax.transAxes, ha="right", va="bottom", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def plot_similarity(plt, path, similarity, title):
    grid_h, grid_w = similarity.shape[:2]
    fig, axes = plt.subplots(grid_h, grid_w, figsize=(0.7 * grid_w + 1.4, 0.7 * grid_h + 0.8), squeeze=False)
    for i in range(grid_h):
        for j in range(grid_w):
            image = axes[i, j].imshow(similarity[i, j], vmin=-1, vmax=1, cmap="viridis", interpolation="nearest")
            axes[i, j].set_xticks([])
            axes[i, j].set_yticks([])
            if j == 0:
                axes[i, j].set_ylabel(str(i + 1), rotation=0, labelpad=8, fontsize=7)
            if i == grid_h - 1:
                axes[i, j].set_xlabel(str(j + 1), fontsize=7)
    fig.supxlabel("input patch column")
    fig.supylabel("input patch row")
    fig.suptitle(title)
    fig.colorbar(image, ax=axes, shrink=0.8, label="cosine similarity")
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def plot_filters(plt, path, components, title):
    count = len(components)
    cols = min(7, count)
    rows = -(-count // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.1 * cols, 1.1 * rows + 0.5), squeeze=False)
    for k, ax in enumerate(axes.flat):
        ax.set_xticks([])
        ax.set_yticks([])
        if k < count:
            tile = components[k]
            tile = (tile - tile.min()) / max(tile.max() - tile.min(), 1e-12)  # each scaled to 0..1
            ax.imshow(tile if tile.shape[-1] == 3 else tile[..., 0], cmap="gray", interpolation="nearest")
        else:
            ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def plot_reconstructions(plt, path, rows, title):
    count = len(rows[0][1])
    fig, axes = plt.subplots(len(rows), count, figsize=(1.6 * count + 0.4, 1.3 * len(rows) + 0.5), squeeze=False)
    for r, (label, pictures) in enumerate(rows):
        for i, picture in enumerate(pictures):
            axes[r, i].imshow(picture.astype("uint8"), interpolation="nearest")
            axes[r, i].set_xticks([])
            axes[r, i].set_yticks([])
        axes[r, 0].set_ylabel(label)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=120)
    plt.close(fig)


def _checked_model(model, reconstruct, what):
    from keras_vit.inspect.attention import check_vit
    from keras_vit.models.masked_autoencoder import MaskedAutoencoder

    if reconstruct and not isinstance(model, MaskedAutoencoder):
        raise ValueError(
            f"--reconstruct draws a masked autoencoder's reconstructions: expected a model pre-trained with "
            f"keras-vit pretrain --objective mae; got a {type(model).__name__} {getattr(model, 'name', '')!r} ({what})."
        )
    return model if reconstruct else check_vit(model, what)


def main(argv=None):
    args = build_parser().parse_args(argv)
    require("matplotlib", "inspect").use("Agg")  # files only: no display needed
    plt = require("matplotlib.pyplot", "inspect")
    try:
        if args.num_images < 1:
            raise ValueError(f"--num-images must be at least 1; got {args.num_images}.")
        if args.output:
            output = args.output
        elif os.path.isfile(args.model):
            output = os.path.join(os.path.dirname(os.path.abspath(args.model)), "figures")
        else:
            output = os.path.join("saved_models", os.path.basename(os.path.normpath(args.model)), "figures")
        from keras_vit.atomic import check_targets, check_writable, remove_leftovers

        check_writable(output, "--output")  # before the model loads: nothing to wait for
        from keras_vit import inspect  # here, as the loader: --help needs no backend
        from keras_vit.factory import load_model

        model = _checked_model(load_model(args.model, tower="image"), args.reconstruct, args.model)
        raw, labels = pick_images(args.images, args.num_images)
        if args.reconstruct:
            figures = ("reconstructions",)
        else:  # a hybrid's patch embedding sees ResNet features: it has no pixel filters to draw
            figures = FIGURES if model.spec.resnet is None else FIGURES[:-1]
        paths = figure_paths(output, figures)
        remove_leftovers(paths.values())  # what a killed run left
        check_targets(paths.values(), args.overwrite)
    except (ValueError, OSError) as error:
        commands.bad_input(error)
    if args.reconstruct:
        return _reconstruct(plt, model, raw, paths, args.overwrite)

    images, shown = preprocess(model, raw)
    spec = model.spec
    predicted = predictions(model, images)
    rollout = inspect.attention_rollout(model, images, args.head_fusion, args.discard_ratio, preprocessed=True)
    distance = inspect.mean_attention_distance(model, images, preprocessed=True)
    similarity = inspect.position_embedding_similarity(model)
    name = model.name
    with StagedWrites(paths, overwrite=args.overwrite) as staging:
        staged = staging.paths
        plot_rollout(plt, staged["attention_rollout.png"], shown, inspect.overlay(shown, rollout),
                     f"{name}: attention rollout ({args.head_fusion} over heads)", labels, predicted)  # fmt: skip
        guess = [("", "") if p is None else (p[0], f"{p[1]:.4f}") for p in predicted]
        write_csv(staged["attention_rollout.csv"], ["image", "class", "predicted", "probability", "row", "column",
                                                    "rollout"],
                  [(i + 1, labels[i] or "", *guess[i], r + 1, c + 1, f"{v:.6g}")
                   for (i, r, c), v in np.ndenumerate(rollout)])  # fmt: skip
        grid, prefix = spec.grid_size, spec.num_prefix_tokens
        uniform = inspect.attention_distance(
            np.ones((1, 1, 1, *[prefix + grid[0] * grid[1]] * 2)), grid, spec.stride, prefix
        )
        plot_distance(plt, staged["attention_distance.png"], distance, spec.stride, float(uniform[0, 0]),
                      f"{name}: attention distance ({len(images)} images)")  # fmt: skip
        write_csv(staged["attention_distance.csv"], ["block", "head", "mean_distance_pixels"],
                  [(b + 1, h + 1, f"{v:.6g}") for (b, h), v in np.ndenumerate(distance)])  # fmt: skip
        plot_similarity(plt, staged["position_embedding_similarity.png"], similarity,
                        f"{name}: position embedding similarity")  # fmt: skip
        write_csv(staged["position_embedding_similarity.csv"], ["row", "column", "other_row", "other_column", "cosine"],
                  [(*(k + 1 for k in index), f"{v:.6g}") for index, v in np.ndenumerate(similarity)])  # fmt: skip
        if "embedding_filters.png" in staged:
            count = min(args.num_components, spec.hidden_size, spec.patch_size**2 * spec.num_channels)
            components, explained = inspect.embedding_filters(model, count, return_explained=True)
            plot_filters(plt, staged["embedding_filters.png"], components,
                         f"{name}: embedding filters, first {count} principal components")  # fmt: skip
            write_csv(staged["embedding_filters.csv"], ["component", "explained_variance"],
                      [(k, f"{v:.6g}") for k, v in enumerate(explained, start=1)])  # fmt: skip
        staging.commit()
    for target in staging.targets.values():
        print(target)
    return staging.targets


def _reconstruct(plt, model, raw, paths, overwrite):
    """``--reconstruct``: a masked autoencoder's reconstructions, drawn and listed."""
    images, shown = preprocess(model.backbone, raw)
    masked, filled = (np.asarray(x) for x in model.reconstruct_images(images))
    losses = model.reconstruction_losses(images)
    with StagedWrites(paths, overwrite=overwrite) as staging:
        rows = [("input", shown), ("masked", masked), ("reconstruction", filled)]
        title = f"{model.name}: reconstructions ({model.mae_spec.mask_ratio:.0%} of the patches hidden)"
        plot_reconstructions(plt, staging.paths["reconstructions.png"], rows, title)
        write_csv(staging.paths["reconstructions.csv"], ["image", "hidden_patches", "reconstruction_loss"],
                  [(i, model.num_patches - model.num_visible, f"{v:.6g}")
                   for i, v in enumerate(losses, start=1)])  # fmt: skip
        staging.commit()
    for target in staging.targets.values():
        print(target)
    return staging.targets
