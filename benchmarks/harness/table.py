"""The rows as a printed table and a CSV file, and keras-vit's speed over its peers."""

import csv
import os
import statistics

from engines.keras_vit_engine import COMPILED, COMPILED_TANH

COLUMNS = (
    "engine",
    "model",
    "precision",
    "mode",
    "batch",
    "images_per_s",
    "ms_per_step",
    "ms_range",
    "gflops_per_s",
    "peak_gflops_per_s",
    "fraction_of_peak",
    "peak_rss_mb",
    "peak_device_mb",
    "attention",
    "note",
)
# New columns go at the end, so that the CSV files recorded before them still read the same.
CSV_COLUMNS = COLUMNS + ("ms_per_repeat", "process", "numerics", "device", "fused_attention")
RATIO_COLUMNS = ("engine", "peer", "model", "precision", "mode", "speedup", "spread")


def _cell(value):
    if value is None or value == "":
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value)


def format_table(rows, columns=COLUMNS):
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def _fused(row):
    return row.get("fused_attention") or ""


def label(row):
    """A row's engine, with its attention switch where it was set (``auto``: the layer chose)."""
    fused = _fused(row)
    return row["engine"] if fused in ("", "auto") else f"{row['engine']} (fused {fused})"


def _peers(engine, fused):
    """The rows a keras-vit row is compared with: ``(engine, fused_attention)``."""
    backend = engine.split(":")[1].split("-")[0]
    peers = [(f"keras-hub:{backend}", "")]
    if engine in (COMPILED, COMPILED_TANH):
        peers.append(("keras-vit:torch", fused))
    if engine == COMPILED:  # the GELU rewrite on over off
        peers.append((COMPILED_TANH, fused))
    peers += [("timm", ""), ("timm-compile", ""), ("hf", "")]
    if fused == "1":  # fused attention over the written-out form, same engine
        peers.append((engine, "0"))
    return peers


def ratios(rows):
    """keras-vit's speed over each peer's, per row measured for both (same model/precision/mode).

    ``speedup`` is keras-vit's images/s over the peer's (above 1: keras-vit is faster; its
    inverse is the latency ratio). For rows timed in the same process it is the median of
    the rounds' ratios, with their ``spread`` (min-max); rows from different processes
    compare only their medians.
    """
    index = {(r["engine"], _fused(r), r["model"], r["precision"], r["mode"]): r for r in rows if r.get("images_per_s")}
    out = []
    for (engine, fused, model, precision, mode), ours in index.items():
        if not engine.startswith("keras-vit:"):
            continue
        for peer, peer_fused in _peers(engine, fused):
            theirs = index.get((peer, peer_fused, model, precision, mode))
            if not theirs:
                continue
            speedup, spread = ours["images_per_s"] / theirs["images_per_s"], "-"
            ours_ms, theirs_ms = _per_repeat(ours), _per_repeat(theirs)
            if ours.get("process") == theirs.get("process") and ours_ms and len(ours_ms) == len(theirs_ms):
                per_round = [t / o for o, t in zip(ours_ms, theirs_ms)]
                speedup, spread = statistics.median(per_round), f"{min(per_round):.3f}-{max(per_round):.3f}"
            out.append(
                dict(
                    engine=label(ours),
                    peer=label(theirs),
                    model=model,
                    precision=precision,
                    mode=mode,
                    speedup=round(speedup, 3),
                    spread=spread,
                )
            )
    return out


def _per_repeat(row):
    text = row.get("ms_per_repeat") or ""
    return [float(t) for t in text.split(";") if t]


def write_csv(rows, path):
    """All ``rows`` to ``path``, replacing it whole (a reader never sees half a file)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
