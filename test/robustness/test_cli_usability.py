"""What the commands tell a user without being asked twice (failure-paths issue, items 15
and 16): every option's default in `--help`, the cost-table format in `--help`, the pass
options in `collage-opt --list-passes`, one default for `--backends`, and what `demo` says
while it works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from collage_mlir.passes.registry import get_pass_class, pass_names

BIN = Path(sys.executable).parent


def tool(*argv: str, name: str = "collage-mlir") -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / name), *argv], capture_output=True, text=True,
                          timeout=600)


# -- collage-opt --list-passes (item 15) -----------------------------------------------------


def test_every_pass_option_has_a_meaning() -> None:
    for name in pass_names():
        for o in get_pass_class(name).options():
            assert o.help and o.type and o.default, (name, o)


def test_list_passes_shows_each_option_with_type_default_and_meaning() -> None:
    r = tool("--list-passes", name="collage-opt")
    assert r.returncode == 0, r.stderr
    sections = {}
    for line in r.stdout.splitlines():
        if not line.startswith(" "):
            current = sections.setdefault(line.split()[0], [])
        else:
            current.append(line.strip())
    assert sorted(sections) == pass_names()
    for name, lines in sections.items():
        options = get_pass_class(name).options()
        assert len(lines) == len(options), (name, lines)
        for line, o in zip(lines, options, strict=True):
            assert line.startswith(f"{o.name}=<{o.type}>"), line
            assert o.help in line and line.endswith(f"(default: {o.default})"), line
    assert any(ln.startswith("max-depth=<int|none>") and ln.endswith("(default: 3)")
               for ln in sections["collage-annotate"])


def test_partition_pass_options_are_its_stages_options() -> None:
    stage_options: dict = {}  # an option both stages take is described by the first
    for stage in ("collage-annotate", "collage-search"):
        for o in get_pass_class(stage).options():
            stage_options.setdefault(o.name, o)
    for o in get_pass_class("collage-partition").options():
        assert o == stage_options[o.name]
