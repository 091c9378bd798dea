"""Textual pass pipelines that mix collage (Python) passes with upstream MLIR passes.

`builtin.module(collage-annotate{backends=iree},canonicalize,func.func(cse))` becomes one
PassManager: each collage pass is added as a Python-defined pass, everything else is handed
to MLIR's own parser. A CollageError raised inside a pass fails the pipeline and is re-raised
with the pass name, so the command line can print one clean line.
"""

from __future__ import annotations

from iree.compiler import ir, passmanager

from collage_mlir.errors import CollageError
from collage_mlir.passes.registry import CollagePass, get_pass_class


def split_top_level(text: str) -> list[str]:
    """Split on commas outside (), {} and quotes (an option value may hold '<' or ',')."""
    parts, depth, start, quote = [], 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return [p for p in parts if p]


def _strip_anchor(pipeline: str) -> str:
    """The passes inside the one `builtin.module(...)` anchor (or the text as it is, when
    it has none)."""
    text = pipeline.strip()
    anchors = split_top_level(text)
    if len(anchors) > 1 and any(a.startswith("builtin.module(") for a in anchors):
        raise CollageError(f"pass pipeline '{pipeline}': give one builtin.module(...) "
                           "holding every pass")
    if text.startswith("builtin.module(") and text.endswith(")"):
        return text[len("builtin.module("):-1]
    return text


def _refuse_nested_collage_passes(element: str) -> None:
    """Collage passes work on the whole module: one inside `func.func(...)` or a nested
    anchor reached MLIR's parser, which said it was no registered pass."""
    inner = element.split("(", 1)[1] if "(" in element else ""
    named = [parse_element(e)[0] for e in split_top_level(inner.rstrip(")"))]
    found = [n for n in named if get_pass_class(n.split("(")[-1].strip())]
    if found:
        raise CollageError(f"pass pipeline: {found[0]} inside '{element.split('(', 1)[0]}(...)'"
                           ": collage passes run on the module, directly inside "
                           "builtin.module(...)")


def parse_element(element: str) -> tuple[str, str]:
    """`name{options}` → (name, options)."""
    if "{" in element and element.endswith("}") and "(" not in element.split("{", 1)[0]:
        name, opts = element.split("{", 1)
        return name.strip(), opts[:-1]
    return element.strip(), ""


class Pipeline:
    """A parsed pipeline, runnable on many modules (each run gets fresh pass instances)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.elements: list[CollagePass | str] = []
        for element in split_top_level(_strip_anchor(text)):
            name, opts = parse_element(element)
            cls = get_pass_class(name)
            if cls is None:
                _refuse_nested_collage_passes(element)
            self.elements.append(cls.from_options(opts) if cls else element)

    def run(self, module: ir.Module) -> None:
        failure: list[BaseException] = []
        with module.context:
            pm = passmanager.PassManager("builtin.module")
            for element in self.elements:
                if isinstance(element, str):
                    try:
                        pm.add(element)
                    except ValueError as e:
                        raise CollageError(f"pass pipeline: cannot parse '{element}': "
                                           f"{str(e).strip().splitlines()[0]}") from None
                else:
                    pm.add(_as_callback(element, failure), name=element.name,
                           argument=element.name)
            try:
                pm.run(module.operation)
            except ir.MLIRError as e:
                if failure:
                    raise failure[0] from None
                diag = e.error_diagnostics[0].message if e.error_diagnostics else str(e)
                raise CollageError(f"pass pipeline failed: {diag}") from None
        if failure:
            raise failure[0]


def _as_callback(p: CollagePass, failure: list[BaseException]):
    def run(op: ir.Operation, pass_) -> None:
        try:
            p.run_on_module(op)
        except CollageError as e:
            failure.append(CollageError(f"{p.name}: {e}"))
            pass_.signal_pass_failure()
        except Exception as e:  # keep the traceback for bugs, but stop MLIR cleanly
            failure.append(e)
            pass_.signal_pass_failure()

    run.__name__ = p.name.replace("-", "_")
    return run


def run_pipeline(module: ir.Module, text: str) -> ir.Module:
    Pipeline(text).run(module)
    return module
