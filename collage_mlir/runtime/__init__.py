"""Running a partitioned module: compile each region on its backend, call them in order."""

from collage_mlir.runtime.model import PartitionedModel, load

__all__ = ["PartitionedModel", "load"]
