"""collage-partition: the whole partitioner as one pass — annotate, search, outline.

Options are the union of the three passes' options, declared with the stage's own default
and help; each is handed to the passes that declare it (e.g. `backends`, `max-depth` to
annotate; `cost`, `cache` to search).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from iree.compiler import ir

from collage_mlir.passes.annotate import AnnotatePass
from collage_mlir.passes.registry import CollagePass, get_pass_class, register
from collage_mlir.passes.search import SearchPass

STAGES = ("collage-annotate", "collage-search", "collage-outline")


def _stage_option(stage: type[CollagePass], name: str) -> Any:
    """A field with the same default and help as `stage`'s option `name`."""
    (f,) = [f for f in dataclasses.fields(stage) if f.name == name]
    return dataclasses.field(default=f.default, metadata=f.metadata)


@register
@dataclass(frozen=True)
class PartitionPass(CollagePass):
    name = "collage-partition"
    summary = "annotate → search → outline in one pass"

    backends: tuple[str, ...] = _stage_option(AnnotatePass, "backends")
    max_depth: int | None = _stage_option(AnnotatePass, "max_depth")
    max_exits: int = _stage_option(AnnotatePass, "max_exits")
    cost: str = _stage_option(SearchPass, "cost")
    cache: str = _stage_option(SearchPass, "cache")
    placement: str = _stage_option(SearchPass, "placement")

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
