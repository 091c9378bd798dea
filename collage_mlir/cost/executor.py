"""Where candidates are measured: here (the default) or on a Ray cluster.

`--measure-on` / `compile(..., executor=...)` name it: None or "local" keeps the local path
(`MeasuringEstimator` runs its workers on this machine, one backend at a time); "ray" (this
machine's Ray cluster, or a local one started for the run), "ray://HOST:PORT" (Ray Client)
or "ray:HOST:PORT" (a head's GCS address) measure on Ray (`cost.ray_executor`); a
`RemoteExecutor` object is used as given.
"""

from __future__ import annotations

from collage_mlir.cost.remote import RemoteExecutor
from collage_mlir.errors import CollageError

LOCAL = "local"

ExecutorArg = str | RemoteExecutor | None


def check_executor(where: ExecutorArg) -> None:
    """Raise a CollageError unless `where` names a place to measure (nothing is started)."""
    if where is None or isinstance(where, RemoteExecutor):
        return
    if where == LOCAL or where == "ray" or where.startswith(("ray://", "ray:")):
        return
    raise CollageError(f"measure on '{where}': expected 'local', 'ray', 'ray://HOST:PORT' "
                       "or 'ray:HOST:PORT'")


def make_executor(where: ExecutorArg) -> RemoteExecutor | None:
    """The executor `where` names (None: the local path). A string starts or connects to
    what it names; the caller closes what is returned."""
    check_executor(where)
    if where is None or isinstance(where, RemoteExecutor):
        return where
    if where == LOCAL:
        return None
    from collage_mlir.cost.ray_executor import RayExecutor

    if where == "ray":
        return RayExecutor(None)
    if where.startswith("ray://"):
        return RayExecutor(where)
    return RayExecutor(where[len("ray:"):])
