"""Cost and the CostEstimator interface.

A cost is seconds as a float: +inf means invalid (the backend failed or gave wrong numbers),
NaN means unknown. The search asks for every candidate's cost in one batch (so a measuring
estimator can share compiles) and for the cost of handing a tensor between backends.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Self

from collage_mlir.candidate import CandidatePartition
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.tensors import Tolerance

INVALID = math.inf
UNKNOWN = math.nan

Progress = Callable[[int, int], None]
"""progress(done, total): called as candidates are costed."""


def is_invalid(cost: float) -> bool:
    return cost == math.inf


def is_unknown(cost: float) -> bool:
    return math.isnan(cost)


class CostEstimator(abc.ABC):
    """Gives each candidate a cost in seconds, and each backend hand-off a cost."""

    @abc.abstractmethod
    def estimate(self, candidates: Sequence[CandidatePartition],
                 progress: Progress | None = None) -> list[float]:
        """Cost of each candidate, in order. Never raises for one bad candidate: +inf."""

    def estimate_bounded(self, candidates: Sequence[CandidatePartition],
                         stop_above: Sequence[float | None],
                         progress: Progress | None = None) -> list[float]:
        """`estimate`, told per candidate the cost beyond which its exact value cannot
        matter (it loses to a cover already costed; None: no such cost). An estimator that
        spends effort per candidate may spend less beyond it (the measuring one times
        fewer calls); the cost it returns is still its estimate, not the bound."""
        return self.estimate(candidates, progress)

    @contextmanager
    def session(self) -> Iterator[None]:
        """A stretch of `estimate` calls (a run's measure phase makes a dozen) that may share
        what each would otherwise set up and tear down; released when it ends. Most
        estimators have nothing to share."""
        yield

    def reason(self, candidate: CandidatePartition) -> str:
        """Why `candidate` costs +inf or NaN ("" when unknown), for the error that names an
        op no backend can run. Valid after `estimate`."""
        return ""

    @abc.abstractmethod
    def transition_cost(self, src_backend: str, dst_backend: str, nbytes: int) -> float:
        """Seconds to hand `nbytes` from a region on `src_backend` to another region on
        `dst_backend`. The same backend on both sides is a real boundary too (two calls
        instead of one); estimators may price it, or return 0."""

    def remeasure(self, candidates: Sequence[CandidatePartition]) -> int:
        """Have the costs of `candidates` measured again by the next run that needs them
        (they keep their cost meanwhile); how many were marked. Nothing to do for an
        estimator that measures nothing."""
        return 0

    @property
    def reference_backend(self) -> str | None:
        """The backend, among this estimator's own, whose outputs the others' are checked
        against (None: none of them is): measured first, it leaves them its outputs."""
        return None

    def alternates(self, backend: str) -> bool:
        """Whether `backend`'s measurements should alternate with the other alternating
        backends' in small windows of the model (`search.prune.interleave`) rather than run
        in a phase of their own: a machine's pace drifts over a run, and two backends timed
        minutes apart carry that drift into their comparison. False for an estimator that
        times nothing, and for a backend that compiles its regions together."""
        return False

    @property
    def tolerance(self) -> Tolerance:
        """What outputs are checked to against the reference (`tensors.compare`), by this
        estimator's workers and by the phases after it (the final probe, refinement)."""
        return MeasureSettings()

    def close(self) -> None:  # noqa: B027 (a hook: most estimators hold nothing)
        """Release what the estimator holds (a cache connection, worker processes, scratch
        files). Idempotent; the estimator is not used afterwards."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
