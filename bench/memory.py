"""Peak memory of a whole run: the sum of RSS over a command's process tree, sampled.

`collage-mlir partition` runs a main process and measuring workers (one backend at a time);
what a machine must hold is their sum at the worst moment, which neither the main process's
`ru_maxrss` nor the largest child's shows. This samples /proc every `--interval` seconds.
It reports the summed RSS and the summed PSS (proportional set size: a page that k processes
share counts 1/k in each, so a weight file mapped by the main process and a worker counts
once — what the machine really holds).

    python bench/memory.py -- collage-mlir partition m.onnx --backends onnxruntime -o out/
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time


def _pss(pid: int) -> int:
    """Proportional set size of one process in bytes (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _processes() -> dict[int, tuple[int, int]]:
    """pid → (parent pid, RSS in bytes) of every process."""
    out = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[int(entry)] = (int(fields[1]), int(fields[21]) * page)
        except (OSError, IndexError, ValueError):
            continue
    return out


def _tree(root: int, processes: dict[int, tuple[int, int]]) -> list[int]:
    """`root` and all its descendants."""
    out, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        out.append(pid)
        frontier.extend(p for p, (pp, _) in processes.items() if pp == pid)
    return out


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
    peak_main = peak_tree = peak_pss = 0
    next_line = 0.0
    while proc.poll() is None:
        processes = _processes()
        pids = _tree(proc.pid, processes)
        main_rss = processes.get(proc.pid, (0, 0))[1]
        tree = sum(processes.get(pid, (0, 0))[1] for pid in pids)
        peak_main, peak_tree = max(peak_main, main_rss), max(peak_tree, tree)
        now = time.perf_counter() - t0
        line_due = args.timeline and now >= next_line
        if tree > peak_pss or line_due:  # PSS <= RSS: only then can it be a new peak
            pss = sum(_pss(pid) for pid in pids)  # reading smaps is not cheap
            peak_pss = max(peak_pss, pss)
        if line_due:
            print(f"[memory {now:7.1f} s] main {main_rss / 2**20:6.0f} MiB, "
                  f"tree {tree / 2**20:6.0f} MiB, tree PSS {pss / 2**20:6.0f} MiB", flush=True)
            next_line = now + args.timeline
        time.sleep(args.interval)
    print(f"exit {proc.returncode} after {time.perf_counter() - t0:.1f} s; peak RSS: "
          f"main process {peak_main / 2**20:.0f} MiB, whole tree {peak_tree / 2**20:.0f} MiB; "
          f"peak PSS of the tree {peak_pss / 2**20:.0f} MiB")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
