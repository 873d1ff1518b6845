"""Sums the CPU time a suite run logged with ``KERAS_VIT_CPU_LOG`` (tests/cpu_time.py).

    KERAS_VIT_CPU_LOG=/tmp/cpu.jsonl bash scripts/test.sh
    python scripts/cpu_time.py /tmp/cpu.jsonl --top 30

Prints the CPU seconds (the test processes' own plus their children's) by backend, by file
(over the backends) and the costliest tests.
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    records = load(args.log)
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
