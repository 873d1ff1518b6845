"""A process's resident set and its peak (Linux), and PyTorch's device memory on CUDA."""


def reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (Linux >= 4.0)
    except OSError:
        pass


def _status_mb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def peak_rss_mb():
    return _status_mb("VmHWM")


def rss_mb():
    return _status_mb("VmRSS")


def reset_device_peak(backend, device):
    """The device memory allocated now, the peak counter reset (PyTorch on CUDA; else None)."""
    if backend != "torch" or device != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    return torch.cuda.memory_allocated()


def device_peak_mb(before):
    """The rise of the device's peak allocation over ``before`` (``reset_device_peak``'s), in
    MB: the other engines' models stay allocated in the shared process, so only the rise is
    the row's. None where nothing was read."""
    if before is None:
        return None
    import torch

    return round((torch.cuda.max_memory_allocated() - before) / 2**20)
