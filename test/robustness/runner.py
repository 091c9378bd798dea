"""Run robustness cases in this process, one JSON line of result per case (flushed), so the
parent sees how far it got if a native crash kills the process.

    python runner.py cases.json results.jsonl START
"""

from __future__ import annotations

import contextlib
import io
import json
import sys


def invoke(tool: str, argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stderr, escaped exception or "") of one command run in process."""
    from collage_mlir.tools import cli, collage_opt

    err, out = io.StringIO(), io.StringIO()
    escaped = ""
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = (collage_opt.main if tool == "collage-opt" else cli.main)(argv)
        except SystemExit as e:  # argparse
            code = e.code if isinstance(e.code, int) else 2
        except BaseException as e:  # noqa: BLE001 - what the suite is looking for
            code, escaped = -1, f"{type(e).__name__}: {e}"
    return code, err.getvalue(), escaped


def main() -> int:
    cases_path, results_path, start = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cases = json.loads(open(cases_path).read())
    with open(results_path, "a") as results:
        for k in range(start, len(cases)):
            code, err, escaped = invoke(cases[k]["tool"], cases[k]["argv"])
            results.write(json.dumps({"k": k, "code": code, "err": err, "escaped": escaped}) + "\n")
            results.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
