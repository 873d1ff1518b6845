"""How long the command line takes to answer: ``keras-vit --help``, ``keras-vit presets`` and
each command's ``--help``.

Each command runs as a user runs it, in a fresh process (``python -m keras_vit``, the
``keras-vit`` program's code), its wall time from start to exit; ``--runs`` rounds, each
command once a round, and the row's time is the median over the rounds. ``--compare
LABEL=PATH`` times another source tree's package too (a checkout of an older commit),
taking turns with this one round by round, so that both see the same machine. The target
is the issue's: under ``TARGET_SECONDS`` a command (``within_target``).

    python benchmarks/cli_startup.py --out-dir docs/benchmarks
    git worktree add /tmp/before <commit>
    python benchmarks/cli_startup.py --out-dir docs/benchmarks --compare before=/tmp/before

Rows go to ``<out-dir>/<device>-<day>/cli_startup.csv`` (appended to, with the header once),
or to ``--csv``; a line per row to stdout.
"""

import argparse
import csv
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def commands():
    """What a user types first: the program's help, the presets table, and each command's help."""
    sys.path.insert(0, ROOT)
    from keras_vit.commands import COMMANDS  # the command line's table: no backend

    return (("--help",), ("presets",), *((name, "--help") for name in COMMANDS))


TARGET_SECONDS = 1.5
FIELDS = ("label", "command", "backend", "runs", "median_s", "min_s", "max_s", "target_s", "within_target",
          "machine")  # fmt: skip


def seconds(tree, argv, env):
    """One run's wall time: ``python -m keras_vit ARGV`` with ``tree``'s package, output discarded."""
    env = {**env, "PYTHONPATH": tree}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "keras_vit", *argv], cwd=tree, env=env, timeout=600,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"keras-vit {' '.join(argv)} in {tree} exited with {done.returncode}: {done.stderr[-500:]}")
    return elapsed


def measure(trees, argvs, runs=5, env=None):
    """``{(label, command): [seconds per round]}``: the trees taking turns, round by round."""
    env = dict(os.environ if env is None else env)
    env.pop("KERAS_VIT_VERBOSE", None)
    times = {(label, argv): [] for label in trees for argv in argvs}
    for _ in range(runs):
        for label, tree in trees.items():
            for argv in argvs:
                times[label, argv].append(seconds(tree, argv, env))
    return times


def rows(times, backend, machine):
    out = []
    for (label, argv), values in times.items():
        median = statistics.median(values)
        out.append({
            "label": label, "command": "keras-vit " + " ".join(argv), "backend": backend, "runs": len(values),
            "median_s": f"{median:.3f}", "min_s": f"{min(values):.3f}", "max_s": f"{max(values):.3f}",
            "target_s": TARGET_SECONDS, "within_target": "yes" if median < TARGET_SECONDS else "no",
            "machine": machine,
        })  # fmt: skip
    return out


def append_csv(path, new_rows):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new_file = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new_file:
            writer.writeheader()
        writer.writerows(new_rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds; each row is their median (default: 5)")
    parser.add_argument("--label", default="this tree", help="this tree's rows' label")
    parser.add_argument("--compare", action="append", default=[], metavar="LABEL=PATH",
                        help="another source tree to time, taking turns with this one")  # fmt: skip
    parser.add_argument("--out-dir", default=os.path.join("docs", "benchmarks"))
    parser.add_argument(
        "--folder", default=None, help="a results folder under --out-dir (default: this machine's, today)"
    )
    parser.add_argument("--csv", default=None, help="write here instead of --out-dir's folder")
    args = parser.parse_args(argv)
    trees = {args.label: ROOT}
    for pair in args.compare:
        label, sep, path = pair.partition("=")
        if not sep or not os.path.isdir(os.path.join(path, "keras_vit")):
            parser.error(f"--compare expects LABEL=PATH of a source tree holding keras_vit/; got {pair!r}")
        trees[label] = os.path.abspath(path)

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from harness.record import device_name, recorded_path

    path = args.csv
    if path is None:
        folder = os.path.join(args.out_dir, args.folder) if args.folder else os.path.dirname(
            recorded_path(args.out_dir, "cli_startup"))  # fmt: skip
        path = os.path.join(folder, "cli_startup.csv")
    machine = f"{device_name()} ({os.cpu_count()} cores, {platform.machine()})"
    backend = os.environ.get("KERAS_BACKEND") or "tensorflow"
    measured = rows(measure(trees, commands(), runs=args.runs), backend, machine)
    append_csv(path, measured)
    for row in measured:
        print(", ".join(f"{k} {row[k]}" for k in FIELDS))
    return measured


if __name__ == "__main__":
    main()
