"""Ray for the tests that measure on it: imported, else installed with pip (it comes with
the `test` extra; a venv made without it gets it here), else the importing test module is
skipped with the reason."""

from __future__ import annotations

import subprocess
import sys

import pytest

RAY_REQUIREMENT = "ray[client]>=2.10"


def _import_ray():
    try:
        import ray
    except ImportError:
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", RAY_REQUIREMENT],
                             capture_output=True, text=True, timeout=600)
        if pip.returncode != 0:
            tail = (pip.stderr.strip().splitlines() or ["?"])[-1]
            pytest.skip(f"ray is not installed and pip could not install it: {tail}",
                        allow_module_level=True)
        import ray
    import ray.cluster_utils

    return ray


ray = _import_ray()
Cluster = ray.cluster_utils.Cluster
