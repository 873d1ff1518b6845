"""Writes the ImageNet label sets that ship in ``keras_vit/labels/`` (run once, by hand).

The class order and names are facts of the datasets: ImageNet-1k's 1000 WordNet synsets
in the order every ImageNet-1k classifier uses (sorted synset ids), and the 21843
synsets of Google's ImageNet-21k release in the order of its checkpoints' classifiers,
each with its WordNet lemmas. timm installs both lists (``timm/data/_info``), so this
script reads them from an installed timm (the test extra) instead of the network.

    .venv/bin/python scripts/make_label_sets.py
"""

import importlib.util
import os

INFO = os.path.join(os.path.dirname(importlib.util.find_spec("timm").origin), "data", "_info")
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "keras_vit", "labels")
SETS = {"imagenet1k": "imagenet_synsets.txt", "imagenet21k": "imagenet21k_goog_synsets.txt"}


def _lines(name):
    with open(os.path.join(INFO, name), encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def main():
    lemmas = dict(line.split("\t", 1) for line in _lines("imagenet_synset_to_lemma.txt"))
    for label_set, synsets in SETS.items():
        rows = [f"{wnid}\t{lemmas[wnid]}" for wnid in _lines(synsets)]
        path = os.path.join(OUT, f"{label_set}.tsv")
        with open(path + ".tmp", "w", encoding="utf-8", newline="\n") as f:
            f.write("\n".join(rows) + "\n")
        os.replace(path + ".tmp", path)
        print(f"{path}: {len(rows)} classes")


if __name__ == "__main__":
    main()
