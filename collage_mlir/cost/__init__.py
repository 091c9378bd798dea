"""Costs of candidates: measured on real backends (with a persistent cache) or from a table."""

from collage_mlir.cost.base import INVALID, UNKNOWN, CostEstimator, is_invalid, is_unknown

__all__ = ["INVALID", "UNKNOWN", "CostEstimator", "is_invalid", "is_unknown"]
