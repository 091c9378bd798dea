"""collage-partition: the whole partitioner as one pass — annotate, search, outline.

Options are the union of the three passes' options, declared with the stage's own default
and help; each is handed to the passes that declare it (e.g. `backends`, `max-depth` to
annotate; `cost`, `cache` to search).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from iree.compiler import ir

from collage_mlir.passes.annotate import AnnotatePass
from collage_mlir.passes.registry import CollagePass, get_pass_class, register, stage_option
from collage_mlir.passes.search import SearchPass

STAGES = ("collage-annotate", "collage-search", "collage-outline")


@register
@dataclass(frozen=True)
class PartitionPass(CollagePass):
    name = "collage-partition"
    summary = "annotate → search → outline in one pass"

    backends: tuple[str, ...] = stage_option(AnnotatePass, "backends")
    max_depth: int | None = stage_option(AnnotatePass, "max_depth")
    max_exits: int = stage_option(AnnotatePass, "max_exits")
    cost: str = stage_option(SearchPass, "cost")
    cache: str = stage_option(SearchPass, "cache")
    placement: str = stage_option(SearchPass, "placement")
    rtol: float | None = stage_option(SearchPass, "rtol")
    atol_scale: float | None = stage_option(SearchPass, "atol_scale")

    def stages(self) -> list[CollagePass]:
        """The three passes, each given the options it declares."""
        given = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out = []
        for stage in STAGES:
            cls = get_pass_class(stage)
            names = {f.name for f in dataclasses.fields(cls)}
            out.append(cls(**{k: v for k, v in given.items() if k in names}))
        return out

    def run_on_module(self, module: ir.Operation) -> None:
        for stage in self.stages():
            stage.run_on_module(module)
