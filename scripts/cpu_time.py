"""Sums the CPU time a suite run logged with ``KERAS_VIT_CPU_LOG`` (tests/cpu_time.py).

    KERAS_VIT_CPU_LOG=/tmp/cpu.jsonl bash scripts/test.sh
    python scripts/cpu_time.py /tmp/cpu.jsonl --top 30

Prints the CPU seconds (the test processes' own plus their children's) by backend, by file
(over the backends) and the costliest tests; ``--summary``: one line, the total and each
backend's (``scripts/test.sh`` prints it at the end of a run).
"""

import argparse
import collections
import json


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def table(title, totals, top):
    print(f"\n{title}")
    for name, (own, children) in sorted(totals.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"{own + children:9.1f} {own:9.1f} {children:9.1f}  {name}")


def summary(records):
    """``"logged test CPU: T s (jax J, tensorflow F, torch P)"`` of a log's records."""
    by_backend = collections.Counter()
    for r in records:
        by_backend[r["backend"]] += r["cpu"] + r["children"]
    parts = ", ".join(f"{backend} {seconds:,.0f}" for backend, seconds in sorted(by_backend.items()))
    return f"logged test CPU: {sum(by_backend.values()):,.0f} s ({parts or 'no tests logged'})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--summary", action="store_true", help="one line: the total and each backend's")
    args = parser.parse_args(argv)
    records = load(args.log)
    if args.summary:
        print(summary(records))
        return
    by_backend, by_file, by_test = (collections.defaultdict(lambda: [0.0, 0.0]) for _ in range(3))
    for r in records:
        for totals, key in (
            (by_backend, r["backend"]),
            (by_file, r["node"].split("::")[0]),
            (by_test, f"{r['backend']} {r['node']}"),
        ):
            totals[key][0] += r["cpu"]
            totals[key][1] += r["children"]
    print("      all       own  children")
    table("by backend", by_backend, args.top)
    table("by file", by_file, args.top)
    table("by test", by_test, args.top)


if __name__ == "__main__":
    main()
