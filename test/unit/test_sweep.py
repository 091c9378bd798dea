"""The cache sweep before each timed call is sized from the machine's last-level cache,
read from a sysfs tree (fake ones here: one per machine shape); the bench that compares
sweeps against a mix's chain feeds each region what the chain hands it."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import collage_mlir
from collage_mlir.cost.llc import (
    SWEEP_MAX,
    SWEEP_MIN,
    _parse_size,
    last_level_cache_bytes,
    sweep_bytes,
)
from collage_mlir.cost.protocol import MeasureSettings
from collage_mlir.passes.pipeline import run_pipeline
from collage_mlir.runtime import PartitionedModel

MIB = 1 << 20


def _cache(root: Path, cpu: int, index: int, level: int, kind: str, size: str,
           shared: str) -> None:
    d = root / f"cpu{cpu}" / "cache" / f"index{index}"
    d.mkdir(parents=True)
    for name, text in (("level", str(level)), ("type", kind), ("size", size),
                       ("shared_cpu_list", shared)):
        (d / name).write_text(text + "\n")


def _machine(root: Path, cpus: range, l3: str | None, l3_groups: list[range]) -> Path:
    """Per-core L1d/L1i/L2, and an L3 per group of cores (none if `l3` is None)."""
    for cpu in cpus:
        _cache(root, cpu, 0, 1, "Data", "32K", str(cpu))
        _cache(root, cpu, 1, 1, "Instruction", "64K", str(cpu))
        _cache(root, cpu, 2, 2, "Unified", "512K", str(cpu))
        if l3 is not None:
            group = next(g for g in l3_groups if cpu in g)
            _cache(root, cpu, 3, 3, "Unified", l3, f"{group.start}-{group.stop - 1}")
    return root


def test_a_small_l3_gets_a_sweep_of_twice_its_size(tmp_path):
    root = _machine(tmp_path, range(2), "8192K", [range(2)])
    assert last_level_cache_bytes(root, [0, 1]) == 8 * MIB
    assert sweep_bytes(root, [0, 1]) == 16 * MIB


def test_each_l3_the_cores_use_counts_once(tmp_path):
    root = _machine(tmp_path, range(8), "16M", [range(4), range(4, 8)])
    assert last_level_cache_bytes(root, range(8)) == 32 * MIB  # two complexes
    assert last_level_cache_bytes(root, [0, 1, 2]) == 16 * MIB  # one, seen by three cores
    assert sweep_bytes(root, [0, 1]) == 32 * MIB
    assert sweep_bytes(root, range(8)) == SWEEP_MAX


def test_the_sweep_stays_within_its_bounds(tmp_path):
    big = _machine(tmp_path / "big", range(2), "105M", [range(2)])
    small = _machine(tmp_path / "small", range(2), "2M", [range(2)])
    assert sweep_bytes(big, [0, 1]) == SWEEP_MAX
    assert sweep_bytes(small, [0, 1]) == SWEEP_MIN


def test_without_an_l3_the_highest_data_cache_counts(tmp_path):
    root = _machine(tmp_path, range(2), None, [])
    assert last_level_cache_bytes(root, [0, 1]) == 1 * MIB  # two private 512K L2s
    assert sweep_bytes(root, [0, 1]) == SWEEP_MIN


def test_an_unknown_or_partial_cache_gives_the_largest_sweep(tmp_path):
    assert last_level_cache_bytes(tmp_path, [0]) == 0
    assert sweep_bytes(tmp_path, [0]) == SWEEP_MAX
    _cache(tmp_path, 0, 0, 3, "Unified", "", "0")  # a size sysfs left empty
    assert sweep_bytes(tmp_path, [0]) == SWEEP_MAX


@pytest.mark.parametrize("text,value", [("8192K", 8 * MIB), ("32M", 32 * MIB),
                                        ("1G", 1 << 30), ("524288", 512 << 10)])
def test_sysfs_sizes_are_read_with_their_units(text, value):
    assert _parse_size(text + "\n") == value


def test_rows_timed_after_another_sweep_are_other_rows():
    """The sweep is part of the timing method, so a cache filled on a machine with another
    cache size is measured again rather than mixed."""
    assert (MeasureSettings(cold_bytes=16 * MIB).method
            != MeasureSettings(cold_bytes=64 * MIB).method)
    assert MeasureSettings().cold_bytes == sweep_bytes()


T = "!torch.vtensor<[2,4],f32>"
CHAIN = f"""
func.func @f(%arg0: {T}) -> {T} attributes {{collage.input_names = ["x"], collage.output_names = ["y"], torch.onnx_meta.opset_version = 17 : si64}} {{
  %a = torch.operator "onnx.Relu"(%arg0) {{collage.region = 0 : i64, collage.backend = "onnxruntime"}} : ({T}) -> {T}
  %b = torch.operator "onnx.Neg"(%a) {{collage.region = 1 : i64, collage.backend = "onnxruntime"}} : ({T}) -> {T}
  return %b : {T}
}}
"""


def test_bench_sweep_chain_times_each_region_on_what_the_chain_hands_it():
    """`bench/sweep_chain.py` times a region on its inputs in the chain: the second region
    gets the first one's output, kept as a copy that later runs do not overwrite."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from sweep_chain import step_inputs

    module = collage_mlir.parse_mlir(CHAIN)
    run_pipeline(module, "builtin.module(collage-outline)")
    model = PartitionedModel.from_module(module)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    args = step_inputs(model, [x])
    first, second = (args[step.callee] for step in model.plan.steps)
    np.testing.assert_array_equal(first[0], x)
    np.testing.assert_array_equal(second[0], np.maximum(x, 0))
    model.run([-x])
    np.testing.assert_array_equal(second[0], np.maximum(x, 0))
