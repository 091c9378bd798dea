"""Random DAG functions in the ONNX-in-MLIR form, for property tests (hypothesis).

`random_dag(draw)` returns (mlir_text, edges): node k (k = 0..n-1) is an op reading from
earlier ops or from the function argument; ops without consumers are returned.
"""

from __future__ import annotations

from hypothesis import strategies as st

T = "!torch.vtensor<[4],f32>"


@st.composite
def random_dag(draw, min_nodes: int = 1, max_nodes: int = 9) -> tuple[str, list[list[int]]]:
    n = draw(st.integers(min_nodes, max_nodes))
    preds: list[list[int]] = []
    for k in range(n):
        choices = list(range(k))
        picked = draw(st.lists(st.sampled_from(choices), max_size=2, unique=True)) if k else []
        preds.append(sorted(picked))
    return dag_text(preds), preds


def dag_text(preds: list[list[int]]) -> str:
    """A function with one argument; op k adds its predecessors (or negates the argument)."""
    used = {p for ps in preds for p in ps}
    lines = []
    for k, ps in enumerate(preds):
        args = [f"%v{p}" for p in ps] or ["%arg0"]
        op = {1: "onnx.Neg", 2: "onnx.Add"}[len(args)]
        lines.append(f'  %v{k} = torch.operator "{op}"({", ".join(args)}) : '
                     f'({", ".join([T] * len(args))}) -> {T}')
    outs = [f"%v{k}" for k in range(len(preds)) if k not in used]
    return (f"func.func @dag(%arg0: {T}) -> ({', '.join([T] * len(outs))}) "
            "attributes {torch.onnx_meta.opset_version = 17 : si64} {\n"
            + "\n".join(lines)
            + f"\n  return {', '.join(outs)} : {', '.join([T] * len(outs))}\n}}\n")
