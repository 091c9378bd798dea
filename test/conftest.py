"""Settings every test session shares: compiled artifacts go to a store of this session's
own (`backends/artifacts.py`), so no test reads what another session or the user compiled,
and the user's store is never written."""

from __future__ import annotations

import os
import shutil
import tempfile

_STORE = tempfile.mkdtemp(prefix="collage-test-artifacts-")
os.environ["COLLAGE_ARTIFACTS"] = _STORE


def pytest_unconfigure(config) -> None:
    shutil.rmtree(_STORE, ignore_errors=True)
