"""Samples the memory of a process tree until its root exits, and keeps the peak.

    python scripts/peak_memory.py ROOT_PID OUT_FILE [--every SECONDS]

Every ``--every`` seconds it sums the proportional set size (PSS: a page shared by N
processes counts 1/N in each, so the sum is what the tree holds together) of every
descendant of ROOT_PID, and writes the largest sum seen so far to OUT_FILE, in bytes.
``scripts/test.sh`` runs it over its test processes and their children, and prints the
figure at the end. Linux only (``/proc``); elsewhere it writes nothing and exits.
"""

import argparse
import os
import time


def _children_of():
    """``{pid: [child pids]}`` of every process that can be read now."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                # The command name (field 2) may hold spaces: the parent's pid follows its ')'.
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # gone since the listing
            continue
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(root):
    """Every process below ``root`` (not ``root`` itself)."""
    children, found, todo = _children_of(), [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def pss_bytes(pid):
    """The process's PSS in bytes (its RSS where the kernel gives no ``smaps_rollup``); 0 when gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=int)
    parser.add_argument("out")
    parser.add_argument("--every", type=float, default=2.0)
    args = parser.parse_args(argv)
    if not os.path.isdir("/proc"):
        return
    peak = 0
    while os.path.exists(f"/proc/{args.root}"):
        total = sum(pss_bytes(pid) for pid in descendants(args.root) if pid != os.getpid())
        if total > peak:
            peak = total
            with open(args.out + ".tmp", "w") as f:
                f.write(f"{peak}\n")
            os.replace(args.out + ".tmp", args.out)  # read whole at any moment
        time.sleep(args.every)


if __name__ == "__main__":
    main()
