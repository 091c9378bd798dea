"""What the measuring parent and its worker processes agree on: settings and backend specs.

A backend spec is `{"target": "onnxruntime" | "package.module:Class", "options": {...}}`.
Modules named by path are found on `sys.path` plus `$COLLAGE_WORKER_SYS_PATH` (os.pathsep
separated), which the parent sets (test doubles live in test/, never in the package).
"""

from __future__ import annotations

import importlib
import signal
from dataclasses import asdict, dataclass, field
from typing import Any

from collage_mlir.cost.llc import sweep_bytes

SYS_PATH_ENV = "COLLAGE_WORKER_SYS_PATH"
NO_REFERENCE = "no reference backend"
"""Why an ok row is unchecked when its run named no reference: a run that checks numbers
measures such a row again (`MeasuringEstimator._is_hit`)."""


@dataclass(frozen=True)
class MeasureSettings:
    """How long and how carefully one kernel is timed and checked.

    Timing: `warmup` calls, then calls until `min_runs` are done and the running median moved
    less than `settle` (relative) over the last `settle_window` calls, or `budget_s` is spent
    (at least `min_runs_on_budget` calls), or `max_runs`. Big kernels live on that floor: at
    3 calls one slow call in a busy moment moved IREE's whole-alexnet median by 10% and the
    search split a model that runs faster whole; 5 calls outvote two outliers.
    Check: the same dtype and shape as the reference, NaN where it has NaN, and every output
    element within `atol_scale * max|ref| + rtol * |ref|` of the reference — relative to the
    output's own magnitude, so an all-zero or doubled output of a small-valued reference fails
    (a floor of 1 on max|ref| let zeros pass for a reference of 1e-3). fp32 backends differ
    more than reordering alone suggests: OpenVINO's whole squeezenet (26 convolutions, some
    Winograd) is 1e-3 off onnxruntime on a softmax output of magnitude 1, which the first,
    tighter bounds (1e-4, 1e-3) wrongly called invalid. A wrong kernel is off by far more.
    """

    cold_bytes: int = field(default_factory=sweep_bytes)
    """Before each timed call, stream through a buffer this large (untimed). In a
    partitioned model a region's call follows other regions' work: its data was evicted
    and its backend's threads went idle. Timed hot, call after call, the regions of a mixed
    alexnet summed to 6.2 ms against 8.6 ms measured in the chain; timed after a 64 MiB
    sweep, to 8.2-8.5 ms. By default twice the last-level cache of the machine that runs
    the search, 16 to 64 MiB (`llc.sweep_bytes`; its workers, on Ray nodes too, sweep the
    size it sends): past the cache, a longer sweep moves no region closer to its cost
    inside a chain, and it is paid before every timed call. 0 times hot."""
    warmup: int = 2
    big_warmup_s: float = 0.2
    """A kernel whose `warmup` calls took `timing.BIG_CALL_S` or more each is called on,
    untimed, until this many seconds are spent (`timing.MAX_WARMUP` calls at most): a big
    kernel's first calls after its compile can run slow for longer than two calls.
    onnxruntime's whole alexnet (~25 ms a call), timed after 2 warm-up calls, read
    23.4-48.2 ms over 6 fresh compiles (relative stdev 31%), after 10 calls 24.1-29.3 (7%);
    OpenVINO's gained less (19.4-27.8 against 16.3-25.6 ms over 14). Small kernels, most of
    a cold run's rows, get `warmup` calls only. 0: `warmup` calls only."""
    min_runs: int = 10
    max_runs: int = 200
    budget_s: float = 1.0
    min_runs_on_budget: int = 5
    settle: float = 0.02
    settle_window: int = 5
    rtol: float = 1e-2
    atol_scale: float = 3e-3

    @property
    def method(self) -> str:
        """How kernels are timed and checked, for the cache key (hot and cold numbers must
        not mix, nor numbers from before the runtime's borrowed hand-offs, "-b", nor rows
        checked under another tolerance: "-tolRTOL/ATOL" when it is not the default)."""
        timing = f"cold{self.cold_bytes}-b" if self.cold_bytes else "hot-b"
        if (self.rtol, self.atol_scale) == (MeasureSettings.rtol, MeasureSettings.atol_scale):
            return timing
        return f"{timing}-tol{self.rtol:g}/{self.atol_scale:g}"


def load_backend(spec: dict[str, Any]):
    """Instantiate a backend from a spec: a registry name or a `module:Class` path."""
    target, options = spec["target"], spec.get("options") or {}
    if ":" in target:
        module_name, _, cls_name = target.partition(":")
        cls = getattr(importlib.import_module(module_name), cls_name)
        reason = cls.unavailable_reason()
        if reason:
            raise RuntimeError(f"backend '{target}' is not usable here: {reason}")
        return cls(**options)
    from collage_mlir.backends.registry import get_backend

    return get_backend(target, **options)


def shares_compiles(backend: Any) -> bool:
    """True when the backend overrides `compile_many` (it compiles a batch in one go)."""
    from collage_mlir.backends.base import Backend

    return type(backend).compile_many is not Backend.compile_many


def settings_dict(settings: MeasureSettings) -> dict[str, Any]:
    return asdict(settings)


def how_it_ended(returncode: int | None) -> str:
    """A child process's end in words: "killed by SIGSEGV", "exited with status 3"."""
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"
