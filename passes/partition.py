"""collage-partition: the whole partitioner as one pass — annotate, search, outline.

Options are the union of the three passes' options; each is handed to the passes that
declare it (e.g. `backends`, `max-depth` to annotate; `cost`, `cache` to search).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.passes.registry import CollagePass, get_pass_class, register

STAGES = ("collage-annotate", "collage-search", "collage-outline")


@register
@dataclass(frozen=True)
class PartitionPass(CollagePass):
    name = "collage-partition"
    summary = "annotate → search → outline in one pass"

    backends: tuple[str, ...] = ()
    max_depth: int | None = None
    max_exits: int | None = None
    cost: str | None = None
    cache: str | None = None
    placement: str | None = None

    def stages(self) -> list[CollagePass]:
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                 if getattr(self, f.name) not in (None, ())}
        out = []
        for stage in STAGES:
            cls = get_pass_class(stage)
            names = {f.name for f in dataclasses.fields(cls)}
            out.append(cls(**{k: v for k, v in given.items() if k in names}))
        return out

    def run_on_module(self, module: ir.Operation) -> None:
        for stage in self.stages():
            stage.run_on_module(module)
