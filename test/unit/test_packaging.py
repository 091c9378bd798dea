"""The installed package is what the source tree holds: every package directory is listed.

An editable install finds sub-packages on disk whether or not pyproject.toml names them; a
wheel (`pip install .`) ships only the listed ones, so a missing entry breaks users only.
"""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_directory_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for package, folder in config["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join((package, *rel.parts)))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
