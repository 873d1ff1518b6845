"""A PyTorch module's timed steps, shared by the PyTorch peers (timm, HF transformers).

Inference runs under ``torch.inference_mode``; training is forward, backward and torch's
AdamW on one fixed batch; ``mixed_bfloat16`` is ``torch.autocast`` to bfloat16.
"""

from harness.device import torch_sync

FRAMEWORK = "torch"


def backend(engine):
    del engine  # every PyTorch peer runs in the torch backend's process
    return "torch"


def steps(model, forward, arch, precision, batch, device):
    """``(infer, train)`` on ``model`` (on ``device``), called through ``forward`` (the
    model itself, or its ``torch.compile``)."""
    import torch

    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "mixed_bfloat16")
    x = (torch.rand(batch, 3, arch.image_size, arch.image_size) * 2 - 1).to(device)
    y = torch.randint(0, 1000, (batch,)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def logits(out):
        return out.logits if hasattr(out, "logits") else out

    def infer():
        model.eval()
        with torch.inference_mode(), autocast:
            out = logits(forward(x))
        torch_sync(device)
        return out

    def train():
        model.train()
        with autocast:
            loss = torch.nn.functional.cross_entropy(logits(forward(x)).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return infer, train
