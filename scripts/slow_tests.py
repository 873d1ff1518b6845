"""Writes tests/slow_tests.txt, the slow tier, from the durations of a full run.

    bash scripts/test.sh --durations=0 | tee run.log
    python scripts/slow_tests.py run.log --budget 240

Each test's time is its setup, call and teardown, the most over the backends in the logs;
the fast tier takes each test file's quickest test, then the quickest others until their
total, on the slowest backend, reaches ``--budget`` seconds times ``--load`` (how much
slower the logged run was than a lone one: ``scripts/test.sh`` runs three backends at once
on two cores), and every other test is slow.
"""

import argparse
import collections
import re
import sys

# A line of pytest's --durations report, as scripts/test.sh prefixes it: "[jax] 1.23s call tests/x.py::y"
# ("[jax-2]", "[jax-users]": a backend's other processes, counted as that backend).
LINE = re.compile(r"^(?:\[(\w+)(?:-\w+)?\] )?([0-9.]+)s (setup|call|teardown)\s+(\S+)$")


def durations(paths):
    """{backend: {node id: seconds}} from the logs."""
    times = collections.defaultdict(lambda: collections.defaultdict(float))
    for path in paths:
        with open(path) as f:
            for line in f:
                match = LINE.match(line.strip())
                if match:
                    backend, seconds, _, node = match.groups()
                    times[backend or "?"][node] += float(seconds)
    return times


def split(times, budget):
    """(fast, slow) node ids: each file's quickest test (so the fast tier reaches every
    file), then the quickest others (by their slowest backend) within ``budget`` seconds
    on every backend."""
    worst = collections.defaultdict(float)
    for per_backend in times.values():
        for node, seconds in per_backend.items():
            worst[node] = max(worst[node], seconds)
    by_time = sorted(worst, key=lambda n: (worst[n], n))
    quickest = {}
    for node in by_time:
        quickest.setdefault(node.split("::")[0], node)
    totals = collections.defaultdict(float)
    fast = []

    def take(node):
        fast.append(node)
        for backend, per_backend in times.items():
            totals[backend] += per_backend.get(node, 0.0)

    for node in quickest.values():
        take(node)
    for node in by_time:
        if node in fast:
            continue
        if all(totals[b] + per_backend.get(node, 0.0) <= budget for b, per_backend in times.items()):
            take(node)
    chosen = set(fast)
    return fast, sorted(n for n in worst if n not in chosen)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", help="output of scripts/test.sh --durations=0")
    parser.add_argument("--budget", type=float, default=240.0, help="fast tier seconds per backend, run alone")
    parser.add_argument("--load", type=float, default=1.0, help="how much slower the logged run was than a lone one")
    parser.add_argument("--output", default="tests/slow_tests.txt")
    args = parser.parse_args(argv)
    times = durations(args.logs)
    if not times:
        parser.error(f"no --durations lines in {', '.join(args.logs)}")
    fast, slow = split(times, args.budget * args.load)
    with open(args.output, "w") as f:
        f.write("# The slow tier: written by scripts/slow_tests.py from a full run's durations; see tests/tiers.py.\n")
        f.writelines(node + "\n" for node in slow)
    print(f"{len(fast)} fast, {len(slow)} slow -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
