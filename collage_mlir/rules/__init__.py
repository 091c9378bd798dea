"""Partition rules (RFC Phase 1-2): patterns, base rules, combinators, specs and defaults.

A PartitionRule finds candidate sub-graphs of a DataflowGraph; a PartitionSpec pairs one
with a backend; `generate_candidates` runs every spec and returns the CandidatePartitions.
"""

from collage_mlir.rules.base import PartitionRule, RuleContext
from collage_mlir.rules.spec import PartitionSpec, generate_candidates

__all__ = ["PartitionRule", "PartitionSpec", "RuleContext", "generate_candidates"]
