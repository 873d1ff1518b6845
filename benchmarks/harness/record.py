"""Where a recorded run's CSV lands: ``docs/benchmarks/<device>-<YYYY-MM-DD>/<name>.csv``.

The device is the machine's GPU (the first one ``nvidia-smi`` lists) or else its CPU model,
as a short slug (``h100``, ``cpu-intel-xeon``), read without importing a framework: the
parent process decides the path before its workers start.
"""

import datetime
import os
import platform
import re
import subprocess

# Words that name the vendor's trade marks, sizes and clocks rather than the chip.
_NOISE = re.compile(r"\((r|tm)\)|\bnvidia\b|\bcpu\b|\bprocessor\b|\b\d+-core\b|@.*$|\b\d+\s*gb\b|\bhbm\w*")


def slug(text):
    """``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``; ``"Intel(R) Xeon(R) Processor"`` -> ``"intel-xeon"``."""
    text = _NOISE.sub(" ", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-") or "unknown"


def _gpu_name():
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0] if out.returncode == 0 and lines else None


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name():
    """The machine's short name for its results folder: the GPU's, else ``cpu-<model>``."""
    gpu = _gpu_name()
    return slug(gpu) if gpu else f"cpu-{slug(_cpu_name())}"


def recorded_path(out_dir, name, device=None, day=None):
    """``out_dir/<device>-<day>/<name>.csv``, numbered (``<name>_2.csv``, ...) rather than
    over a recorded file."""
    day = day or datetime.date.today()
    folder = os.path.join(out_dir, f"{device or device_name()}-{day.isoformat()}")
    path, number = os.path.join(folder, f"{name}.csv"), 2
    while os.path.exists(path):
        path, number = os.path.join(folder, f"{name}_{number}.csv"), number + 1
    return path
