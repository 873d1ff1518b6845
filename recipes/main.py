"""The README's main job: pre-train on the embedded digits, then fine-tune at 1.5x resolution.

    python recipes/main.py              # offline, on any backend (KERAS_BACKEND)
    python recipes/main.py --epochs 2   # a smoke run; the flags apply to both phases

The same as ``keras-vit main``; the code is ``keras_vit/commands/main_job.py``.
"""

from _command import run

if __name__ == "__main__":
    run("main")
