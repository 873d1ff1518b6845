"""The preset registry as data: one record per published checkpoint, named ``<model>.<tag>``.

A preset names everything that belongs to one published weights file: where its
publisher keeps it, the model it fits (a ``create_model`` name, its image size and class
count), the numerics it was trained with (its file layout's record in
``keras_vit.checkpoints.layouts``, plus ``options`` where it differs), the pre-processing
it was evaluated with, its label set, licence and the ImageNet top-1 reported for it.
The tags follow timm's (``augreg2_in21k_ft_in1k``); checkpoints fine-tuned at 384 carry
``_384``, since the model names here do not hold a resolution.
"""

import dataclasses
import fnmatch
import textwrap

GCS = "https://storage.googleapis.com/vit_models/"
HF_HUB = "https://huggingface.co/"


@dataclasses.dataclass(frozen=True)
class Preset:
    """One published checkpoint (see the module docstring).

    Attributes:
        name: ``"<model>.<tag>"``, e.g. ``"vit_b16.augreg2_in21k_ft_in1k"``.
        url: where the publisher keeps the file.
        layout: the file's layout, a key of ``keras_vit.checkpoints.layouts.LAYOUTS``.
        image_size: the resolution it was trained (fine-tuned) at.
        num_classes: its classifier's outputs.
        preprocessing: ``keras_vit.layers.ImagePreprocessing`` arguments (all but the image
            size) of its evaluation.
        labels: its label set (``keras_vit.labels.LABEL_SETS``), None if its classifier is
            not meant to be used.
        license: the licence its publisher gives the weights.
        top1: ImageNet-1k top-1 (%) reported for it, None where none is.
        top1_source: who reported ``top1``, and how it was measured.
        options: ``ViTSpec`` fields beyond the variant's and its layout's numerics (the
            pre-logits layer of the original ImageNet-21k checkpoints).
        size: the file's size in bytes, where the publisher lists it.
        sha256: the file's SHA-256, where the publisher lists it (else the first
            download's hash is recorded in the cache and checked from then on).
        note: what a user should know before using it.
    """

    name: str
    url: str
    layout: str
    image_size: int
    num_classes: int
    preprocessing: dict
    labels: str | None
    license: str
    top1: float | None = None
    top1_source: str | None = None
    options: dict = dataclasses.field(default_factory=dict)
    size: int | None = None
    sha256: str | None = None
    note: str = ""

    @property
    def model(self):
        return self.name.split(".", 1)[0]

    @property
    def tag(self):
        return self.name.split(".", 1)[1]

    @property
    def spec_options(self):
        """The ``create_model`` options that build this checkpoint's model: its size, task,
        and the numerics it was trained with."""
        from keras_vit.checkpoints.layouts import LAYOUTS  # here: the table of presets needs no backend
        from keras_vit.models.variants import VARIANTS

        layout = LAYOUTS[self.layout]
        numerics = dict(layout.numerics)
        if VARIANTS[self.model].resnet is not None:
            numerics.update({f"resnet_{k}": v for k, v in layout.resnet_numerics.items()})
        return dict(numerics, image_size=self.image_size, num_classes=self.num_classes, **self.options)

    @property
    def spec(self):
        """The ``ViTSpec`` this checkpoint's weights were trained as."""
        from keras_vit.models.variants import VARIANTS

        return VARIANTS[self.model].replace(**self.spec_options)

    def card(self):
        """A readable summary: file, model, numerics, pre-processing, accuracy, licence."""
        spec = self.spec
        numerics = {k: v for k, v in self.spec_options.items() if k not in ("image_size", "num_classes")}
        top1 = f"{self.top1:.2f}% ({self.top1_source})" if self.top1 is not None else "not reported"
        rows = [
            ("file", self.url),
            ("size", f"{self.size:,} bytes" if self.size else "not listed by the publisher"),
            ("sha256", self.sha256 or "not listed (the first download's hash is recorded and checked)"),
            ("layout", self.layout),
            ("model", f"{self.model}: {spec.hidden_size} wide, {spec.depth} blocks, patch {spec.patch_size}"),
            ("image size", f"{self.image_size}"),
            ("classes", f"{self.num_classes} ({self.labels or 'classifier not meant for use'})"),
            ("numerics", ", ".join(f"{k}={v!r}" for k, v in numerics.items())),
            ("pre-processing", ", ".join(f"{k}={v!r}" for k, v in self.preprocessing.items())),
            ("ImageNet top-1", top1),
            ("licence", self.license),
        ]
        if self.note:
            rows.append(("note", self.note))
        width = max(len(k) for k, _ in rows)
        lines = [self.name] + [f"  {k:<{width}}  {v}" for k, v in rows]
        return "\n".join(textwrap.shorten(line, 200) if len(line) > 200 else line for line in lines)


def _eval(image_size):
    """timm's evaluation of these checkpoints (its pretrained configs): bicubic, the shorter
    side resized to image_size / crop_fraction, a center crop, [-1, 1] (mean = std = 0.5)."""
    return dict(
        crop_mode="center",
        crop_fraction=0.9 if image_size == 224 else 1.0,
        interpolation="bicubic",
        mean=(0.5, 0.5, 0.5),
        std=(0.5, 0.5, 0.5),
    )


_APACHE = "apache-2.0"  # google-research/vision_transformer's licence; timm records the same
_IN21K_CLASSES = 21843

# The paper's checkpoints (google-research/vision_transformer): ImageNet-21k, and fine-tuned
# on ImageNet at 384. model: (file stem, pre-logits width of the 21k checkpoint).
_ORIGINAL = {
    "vit_b16": ("ViT-B_16", 768),
    "vit_b32": ("ViT-B_32", 768),
    "vit_l16": ("ViT-L_16", 1024),
    "vit_l32": ("ViT-L_32", 1024),
    "vit_h14": ("ViT-H_14", 1280),
    "r50_vit_b16": ("R50+ViT-B_16", 768),
}
_ORIGINAL_FINETUNED = ("vit_b16", "vit_b32", "vit_l16", "vit_l32", "r50_vit_b16")

# AugReg ("How to train your ViT?", Steiner et al. 2022): the ImageNet-21k checkpoints and
# the ImageNet fine-tunings that timm picked, as file stems under gs://vit_models/augreg/.
# fmt: off
_AUGREG_IN21K = {
    "vit_ti16": "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "vit_s32": "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "vit_s16": "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "vit_b32": "B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0",
    "vit_b16": "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "vit_b8": "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "vit_l16": "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
}
_AUGREG_FINETUNED = {
    # (model, image size): (upstream checkpoint, fine-tuning learning rate)
    ("vit_ti16", 224): (_AUGREG_IN21K["vit_ti16"], "0.03"),
    ("vit_ti16", 384): (_AUGREG_IN21K["vit_ti16"], "0.03"),
    ("vit_s32", 224): (_AUGREG_IN21K["vit_s32"], "0.03"),
    ("vit_s32", 384): (_AUGREG_IN21K["vit_s32"], "0.03"),
    ("vit_s16", 224): (_AUGREG_IN21K["vit_s16"], "0.03"),
    ("vit_s16", 384): (_AUGREG_IN21K["vit_s16"], "0.03"),
    ("vit_b32", 224): (_AUGREG_IN21K["vit_b32"], "0.03"),
    ("vit_b32", 384): ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "0.03"),
    ("vit_b16", 224): (_AUGREG_IN21K["vit_b16"], "0.01"),
    ("vit_b16", 384): (_AUGREG_IN21K["vit_b16"], "0.01"),
    ("vit_b8", 224): (_AUGREG_IN21K["vit_b8"], "0.01"),
    ("vit_l16", 224): (_AUGREG_IN21K["vit_l16"], "0.01"),
    ("vit_l16", 384): (_AUGREG_IN21K["vit_l16"], "0.01"),
}
# timm's re-fine-tuning of the AugReg B/16 and B/8 (timm-trained, so timm's numerics).
_AUGREG2 = ("vit_b16", "vit_b8")

# ImageNet-1k top-1 (%) reported for each preset: the paper's Table 5 for its own checkpoints
# (its evaluation: the whole image resized to 384), timm's results-imagenet.csv (with the
# presets' pre-processing) for the rest.
_PAPER, _TIMM = "the ViT paper, Table 5", "timm's results-imagenet.csv, with this pre-processing"
TOP1 = {
    "vit_b16.orig_in21k_ft_in1k_384": (83.97, _PAPER),
    "vit_b32.orig_in21k_ft_in1k_384": (81.28, _PAPER),
    "vit_l16.orig_in21k_ft_in1k_384": (85.15, _PAPER),
    "vit_l32.orig_in21k_ft_in1k_384": (80.99, _PAPER),
    "r50_vit_b16.orig_in21k_ft_in1k_384": (84.988, _TIMM),
    "vit_ti16.augreg_in21k_ft_in1k": (75.452, _TIMM),
    "vit_ti16.augreg_in21k_ft_in1k_384": (78.438, _TIMM),
    "vit_s32.augreg_in21k_ft_in1k": (76.010, _TIMM),
    "vit_s32.augreg_in21k_ft_in1k_384": (80.476, _TIMM),
    "vit_s16.augreg_in21k_ft_in1k": (81.402, _TIMM),
    "vit_s16.augreg_in21k_ft_in1k_384": (83.814, _TIMM),
    "vit_b32.augreg_in21k_ft_in1k": (80.732, _TIMM),
    "vit_b32.augreg_in21k_ft_in1k_384": (83.358, _TIMM),
    "vit_b16.augreg_in21k_ft_in1k": (84.534, _TIMM),
    "vit_b16.augreg_in21k_ft_in1k_384": (86.010, _TIMM),
    "vit_b8.augreg_in21k_ft_in1k": (85.838, _TIMM),
    "vit_l16.augreg_in21k_ft_in1k": (85.856, _TIMM),
    "vit_l16.augreg_in21k_ft_in1k_384": (87.096, _TIMM),
    "vit_b16.augreg2_in21k_ft_in1k": (85.108, _TIMM),
    "vit_b8.augreg2_in21k_ft_in1k": (86.252, _TIMM),
}
# fmt: on


def _presets():
    for model, (stem, width) in _ORIGINAL.items():
        yield Preset(
            f"{model}.orig_in21k", f"{GCS}imagenet21k/{stem}.npz", "original", 224, _IN21K_CLASSES,
            _eval(224), None, _APACHE, options={"representation_size": width},
            note="ImageNet-21k pre-training with its pre-logits layer; the classifier was not released "
            "in a usable state (timm: 'classifier not valid'): fine-tune it (num_classes=...).",
        )  # fmt: skip
    for model in _ORIGINAL_FINETUNED:
        stem, _ = _ORIGINAL[model]
        yield Preset(
            f"{model}.orig_in21k_ft_in1k_384", f"{GCS}imagenet21k+imagenet2012/{stem}.npz", "original", 384, 1000,
            _eval(384), "imagenet1k", _APACHE,
        )  # fmt: skip
    for model, stem in _AUGREG_IN21K.items():
        yield Preset(
            f"{model}.augreg_in21k", f"{GCS}augreg/{stem}.npz", "original", 224, _IN21K_CLASSES,
            _eval(224), "imagenet21k", _APACHE,
        )  # fmt: skip
    for (model, size), (stem, lr) in _AUGREG_FINETUNED.items():
        suffix = "" if size == 224 else f"_{size}"
        yield Preset(
            f"{model}.augreg_in21k_ft_in1k{suffix}",
            f"{GCS}augreg/{stem}--imagenet2012-steps_20k-lr_{lr}-res_{size}.npz", "original", size, 1000,
            _eval(size), "imagenet1k", _APACHE,
        )  # fmt: skip
    for model in _AUGREG2:
        timm_name = f"vit_base_patch{model[len('vit_b') :]}_224.augreg2_in21k_ft_in1k"
        yield Preset(
            f"{model}.augreg2_in21k_ft_in1k", f"{HF_HUB}timm/{timm_name}/resolve/main/model.safetensors", "timm",
            224, 1000, _eval(224), "imagenet1k", _APACHE,
        )  # fmt: skip


def _with_top1(preset):
    if preset.name not in TOP1:
        return preset
    top1, source = TOP1[preset.name]
    return dataclasses.replace(preset, top1=top1, top1_source=source)


PRESETS = {preset.name: _with_top1(preset) for preset in _presets()}


def list_presets(pattern="*"):
    """Preset names matching a shell-style pattern, sorted.

    >>> list_presets("vit_b16.augreg*")[:2]
    ['vit_b16.augreg2_in21k_ft_in1k', 'vit_b16.augreg_in21k']
    """
    return sorted(name for name in PRESETS if fnmatch.fnmatch(name, pattern))


def get_preset(name):
    """The ``Preset`` of a name; an unknown name is an error that suggests close ones.

    >>> print(get_preset("vit_b16.augreg2_in21k_ft_in1k").card())  # doctest: +ELLIPSIS
    vit_b16.augreg2_in21k_ft_in1k
      file            https://huggingface.co/timm/vit_base_patch16_224.augreg2_in21k_ft_in1k/resolve/main/model.safetensors
    ...
    """
    import difflib

    try:
        return PRESETS[name]
    except KeyError:
        close = difflib.get_close_matches(str(name), PRESETS, n=4, cutoff=0.6)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        model = str(name).partition(".")[0]
        tags = [p.partition(".")[2] for p in PRESETS if p.startswith(model + ".")]
        if tags:
            hint += f" The tags of {model}: {', '.join(tags)}."
        raise ValueError(
            f"Unknown preset {name!r}.{hint} Known presets: keras_vit.list_models(pretrained=True)."
        ) from None
