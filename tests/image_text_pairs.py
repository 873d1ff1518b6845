"""Small transformers image-text pairs (``CLIPModel``, ``SiglipModel``) written by
transformers' own ``save_pretrained`` with their tokenizer and image processor, at the hub's
paths: what the image-text tests and the documented pages load by hub name."""

import json
import re

import numpy as np
from helpers import REPOSITORY, pil_processor, randomize_torch, train_sentencepiece, write_clip_vocabulary

VISION = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=48, patch_size=8
)
TEXT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
BICUBIC = 3  # PIL's number for it, as the image processors store it


def _clip_tokenizer(folder):
    """transformers' CLIPTokenizer over the real CLIP vocabulary."""
    from transformers import CLIPTokenizer

    write_clip_vocabulary(folder)
    return CLIPTokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"), model_max_length=77)


def _siglip_tokenizer(folder):
    """transformers' SiglipTokenizer over a SentencePiece model trained here on the README."""
    from transformers import SiglipTokenizer

    return SiglipTokenizer(vocab_file=str(train_sentencepiece(folder, 300)))


def _gemma_tokenizer(folder):
    """transformers' Siglip2Tokenizer (Gemma's byte-fallback BPE, lower case) over a vocabulary
    trained here on the README, with Gemma's special ids first."""
    import tokenizers
    from transformers.models.siglip2.tokenization_siglip2 import Siglip2Tokenizer

    trained = tokenizers.Tokenizer(tokenizers.models.BPE(byte_fallback=True, unk_token="<unk>"))
    trained.normalizer = tokenizers.normalizers.Replace(" ", "\u2581")
    trained.pre_tokenizer = tokenizers.pre_tokenizers.Split("\u2581", behavior="merged_with_previous")
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=400, special_tokens=specials)
    trained.train_from_iterator([(REPOSITORY / "README.md").read_text(encoding="utf-8")], trainer)
    model = json.loads(trained.to_str())["model"]
    tokenizer = Siglip2Tokenizer(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]])
    tokenizer.save_pretrained(str(folder))
    return tokenizer


def informative_scores(model):
    """Sets a torch pair's scale (and bias, where it has one: SigLIP's) so that its
    probabilities are far from even and from 0 and 1 (random towers' cosines of the tests'
    photos and labels: CLIP's 0.24 to 0.48, SigLIP's 0.23 to 0.25), so that 0.02 tells;
    returns the model."""
    import torch

    bias = getattr(model, "logit_bias", None)
    with torch.no_grad():
        model.logit_scale.fill_(np.log(10.0 if bias is None else 150.0))
        if bias is not None:
            bias.fill_(-35.5)
    return model


def write_transformers_pair(kind, folder):
    """transformers' pair of ``kind`` (``"clip"``, ``"siglip"``, or ``"siglip2"``: SigLIP 2 at
    a fixed resolution, a ``SiglipModel`` with its Gemma tokenizer), its tokenizer and image
    processor, saved in ``folder`` (where the tokenizer's own files are written first);
    returns ``(model, tokenizer, processor)``."""
    import transformers

    folder.mkdir(parents=True, exist_ok=True)
    if kind == "clip":
        tokenizer = _clip_tokenizer(folder)
        config = transformers.CLIPConfig(
            vision_config=dict(VISION, hidden_act="quick_gelu"),
            text_config=dict(TEXT, vocab_size=49408),
            projection_dim=24,
        )
        model = transformers.CLIPModel(config)
        processor = pil_processor("CLIPImageProcessor")(
            size={"shortest_edge": 48}, crop_size={"height": 48, "width": 48}, resample=BICUBIC
        )
    else:
        tokenizer = _siglip_tokenizer(folder) if kind == "siglip" else _gemma_tokenizer(folder)
        config = transformers.SiglipConfig(vision_config=VISION, text_config=dict(TEXT, vocab_size=len(tokenizer)))
        model = transformers.SiglipModel(config)
        processor = pil_processor("SiglipImageProcessor")(size={"height": 48, "width": 48}, resample=BICUBIC)
    model = informative_scores(randomize_torch(model.eval(), seed=3, informative=True))
    for part in (model, tokenizer, processor):
        part.save_pretrained(str(folder))
    return model, tokenizer, processor


# A page's hub names of image-text pairs: an organisation and a name holding clip or siglip.
PAIR_NAME = re.compile(r"hf-hub:([\w-]+/[\w.-]*(clip|siglip)[\w.-]*)")


def serve_pairs(text, served):
    """Writes a small pair at the hub's paths under ``served`` for each pair hub name in
    ``text`` (a page's blocks), of the kind its name says."""
    for repository, kind in sorted(set(PAIR_NAME.findall(text))):
        if not repository.startswith("timm/"):
            write_transformers_pair(kind, served / repository / "resolve" / "main")
