"""Peak memory of a whole run: the sum of RSS over a command's process tree, sampled.

`collage-mlir partition` runs a main process and measuring workers (one backend at a time);
what a machine must hold is their sum at the worst moment, which neither the main process's
`ru_maxrss` nor the largest child's shows. This samples /proc every `--interval` seconds.

    python bench/memory.py -- collage-mlir partition m.onnx --backends onnxruntime -o out/
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time


def _tree_rss(root: int) -> tuple[int, int]:
    """(RSS of `root`, RSS of `root` and all its descendants), in bytes."""
    parent, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parent[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, frontier = 0, [root]
    while frontier:
        pid = frontier.pop()
        total += rss.get(pid, 0)
        frontier.extend(p for p, pp in parent.items() if pp == pid)
    return rss.get(root, 0), total


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--timeline", type=float, default=0.0, metavar="S",
                   help="also print main and tree RSS every S seconds (to find the phase)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    peak_main = peak_tree = 0
    next_line = 0.0
    while proc.poll() is None:
        main_rss, tree = _tree_rss(proc.pid)
        peak_main, peak_tree = max(peak_main, main_rss), max(peak_tree, tree)
        now = time.perf_counter() - t0
        if args.timeline and now >= next_line:
            print(f"[memory {now:7.1f} s] main {main_rss / 2**20:6.0f} MiB, "
                  f"tree {tree / 2**20:6.0f} MiB", flush=True)
            next_line = now + args.timeline
        time.sleep(args.interval)
    print(f"exit {proc.returncode} after {time.perf_counter() - t0:.1f} s; peak RSS: "
          f"main process {peak_main / 2**20:.0f} MiB, whole tree {peak_tree / 2**20:.0f} MiB")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
