"""Partition rules (RFC Phase 1-2): patterns, base rules, combinators and the defaults by kind.

A PartitionRule finds candidate sub-graphs of a DataflowGraph among the ops a backend
supports. Rules know nothing of backends: `collage_mlir.annotate` pairs them (PartitionSpec).
"""

from collage_mlir.rules.base import PartitionRule, RuleContext

__all__ = ["PartitionRule", "RuleContext"]
