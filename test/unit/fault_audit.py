"""One cell of the fault-injection audit (issue 15), run as a child process by
test_final_isolation.py: partition a tiny model over the numpy test backend and the
fault-injecting test double (`fault_backend.StagedFaultBackend`, its fault picked by
$COLLAGE_FAULT_MODE / _ON / _WHEN / _WHERE), then run the result.

Prints one JSON line: {"outcome": "ok", "max_err": ..., "backends": [...], "left_out": [...]}
when the run finished (outputs compared with numpy's), or {"outcome": "refused", "error":
"<the CollageError>"}. Anything else (a death, a traceback) is the audit's failure.

    python test/unit/fault_audit.py CACHE [--pin] [--favour-fault] [--timeout S]
    python test/unit/fault_audit.py --table   # every cell, as a markdown table
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

MODEL = """
<ir_version: 8, opset_import: ["" : 17]>
g (float[8,8] x, float[8,8] w) => (float[8,8] y) {
  a = MatMul(x, w)
  b = Relu(a)
  c = Sigmoid(b)
  y = Add(c, x)
}
"""
PIN = {"placement": [{"pattern": {"match": {"node_type": "Relu"},
                                  "rewrite": {"backend": "fault"}}}]}


def expected(x, w):
    import numpy as np

    return 1 / (1 + np.exp(-np.maximum(x @ w, 0))) + x


def cell(cache: str, pin: bool, favour_fault: bool, timeout_s: float, scale: float = 1.0,
         given: bool = False) -> dict:
    """Partition and run once; the outcome as a dict. The runs that judge it feed `x`
    scaled by `scale`; with `given`, the partitioning is given one such input set."""
    import numpy as np
    import onnx.parser
    from fault_backend import NumpyTestBackend, StagedFaultBackend

    import collage_mlir
    from collage_mlir.backends.registry import register_backend
    from collage_mlir.cost.measure import MeasuringEstimator
    from collage_mlir.cost.protocol import MeasureSettings
    from collage_mlir.errors import CollageError

    class Audit(MeasuringEstimator):
        """Test double: measured costs, hand-offs free (no hand-off experiment: faster)."""

        def transition_cost(self, src_backend, dst_backend, nbytes):
            return 0.0

    class FaultFavouring(Audit):
        """Test double: every candidate is measured, then each of the other backend's costs
        gets a second added, far above any measured cost of this model: the pick holds the
        fault backend's regions whatever the machine's load did to the timings."""

        def estimate(self, candidates, progress=None):
            costs = super().estimate(candidates, progress)
            return [c if k.backend == "fault" else c + 1.0
                    for c, k in zip(costs, candidates, strict=True)]

    for cls in (NumpyTestBackend, StagedFaultBackend):
        register_backend(cls)
    numpy_spec, fault_spec = "fault_backend:NumpyTestBackend", "fault_backend:StagedFaultBackend"
    fast = MeasureSettings(warmup=1, min_runs=3, max_runs=10, budget_s=0.01, cold_bytes=0)
    placement = None
    if pin:
        placement = Path(cache).with_suffix(".placement.json")
        placement.write_text(json.dumps(PIN))
    estimator_cls = FaultFavouring if favour_fault else Audit
    rng = np.random.default_rng(7)
    sets = [[rng.standard_normal((8, 8)).astype(np.float32) * np.float32(f)
             for f in (scale, 1.0)] for _ in range(3)]
    try:
        with estimator_cls({numpy_spec: {}, fault_spec: {}}, cache_path=cache,
                           reference=numpy_spec, settings=fast, timeout_s=timeout_s,
                           transition_timeout_s=4 * timeout_s) as est:
            model = collage_mlir.compile(onnx.parser.parse_model(MODEL),
                                         backends=["numpy_test", "fault"], estimator=est,
                                         max_depth=2, placement=placement, verify=True,
                                         timeout_s=timeout_s,
                                         # refinement times real neighbours end to end: it
                                         # would undo the favoured pick
                                         refine_budget_s=0 if favour_fault else None,
                                         inputs={"x": sets[0][0], "w": sets[0][1]} if given
                                         else None)
        err = 0.0
        for x, w in sets:
            (y,) = model.run([x, w])
            if y.shape != (8, 8) or y.dtype != np.float32:
                return {"outcome": "wrong", "error": f"{y.dtype}{y.shape}"}
            err = max(err, float(np.abs(y - expected(x, w)).max()))
        x[0, 0] = np.nan
        nan_out_finite = int(np.isfinite(model.run([x, w])[0]).sum())
    except CollageError as e:
        return {"outcome": "refused", "error": str(e)}
    return {"outcome": "ok" if err < 1e-4 * max(1.0, scale) else "wrong", "max_err": err,
            "backends": sorted({s.backend for s in model.plan.steps}),
            "regions": [[r.backend, r.op_types] for r in model.report_rows],
            "left_out": [f"{g.backend}: {g.reason}" for g in model.rejected],
            "finite_given_nan": nan_out_finite}


def run_cell(mode: str, when: str, where: str, *, pin: bool = True,
             favour_fault: bool = False, timeout_s: float = 2.0, limit_s: float = 120.0,
             scale: float = 1.0, given: bool = False, on: str = "Relu"
             ) -> tuple[int, dict | None, str]:
    """One cell in a child process: (exit status, its JSON or None, its stderr)."""
    env = dict(os.environ, COLLAGE_FAULT_MODE=mode, COLLAGE_FAULT_ON=on,
               COLLAGE_FAULT_WHEN=when, COLLAGE_FAULT_WHERE=where)
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, __file__, str(Path(tmp) / "cache.sqlite"),
                "--timeout", str(timeout_s)]
        argv += ["--pin"] * pin + ["--favour-fault"] * favour_fault + ["--given"] * given
        argv += ["--scale", str(scale)]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env,
                              timeout=limit_s)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    return proc.returncode, (json.loads(lines[-1]) if lines else None), proc.stderr


def table() -> str:
    """Every cell of the audit as a markdown table."""
    from fault_backend import STAGED_COMPILE_MODES, STAGED_RUN_MODES

    rows = ["| fault | at | in | outcome |", "|---|---|---|---|"]
    for when, modes in (("compile", STAGED_COMPILE_MODES), ("run", STAGED_RUN_MODES)):
        for mode in modes:
            for where in ("measure", "final"):
                rc, out, err = run_cell(mode, when, where)
                if out is None:
                    what = f"**died** (status {rc}): {err.strip().splitlines()[-1:]}"
                elif out["outcome"] == "ok":
                    what = f"finished, outputs correct (max err {out['max_err']:.1e})"
                elif out["outcome"] == "refused":
                    what = f"refused: {out['error']}"
                else:
                    what = f"**wrong**: {out}"
                rows.append(f"| {mode} | {when} | {where} | {what} |")
                print(rows[-1], flush=True)
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cache", nargs="?")
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--favour-fault", action="store_true")
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--given", action="store_true")
    args = ap.parse_args()
    if args.table:
        table()
        return
    print(json.dumps(cell(args.cache, args.pin, args.favour_fault, args.timeout, args.scale,
                          args.given)), flush=True)


if __name__ == "__main__":
    main()
