"""RFC phase 3: the least-cost exact cover of a function by candidate partitions."""

from collage_mlir.search.partitioning import (
    HOST,
    Choice,
    Partitioning,
    check_cover,
    evaluate,
    execution_order,
    value_nbytes,
)
from collage_mlir.search.search import search

__all__ = ["HOST", "Choice", "Partitioning", "check_cover", "evaluate", "execution_order",
           "search", "value_nbytes"]
