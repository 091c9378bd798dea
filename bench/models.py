"""A zoo of models exported the way users export them, with random but well-scaled weights.

Each model is a `transformers` architecture built from its config (no weights can be
downloaded here) and written by `torch.onnx.export` (the TorchScript exporter, opset 17, no
simplifier): the files keep the run-time shape computations (Shape → Gather → Concat →
Reshape, attention masks from the sequence length) that users' exports contain.

Weights: the configs' default init makes deep CNN outputs ~1e-20 (denormals, which time
differently per backend and make output checks meaningless). So linear and convolution
weights are Kaiming-normal, biases zero, layer norms unit, and every batch norm's running
statistics are calibrated on random inputs (its output has unit variance at every depth, as
in a trained network). `python bench/models.py --list` prints each model's output magnitude.

    python bench/models.py [NAMES...] [--out DIR] [--dynamic-batch] [--list]

Torch and transformers are bench/test-only dependencies:
`pip install torch==2.13.0 transformers`.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class ZooModel:
    build: Callable[[], object]  # () -> torch.nn.Module returning one tensor
    inputs: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, "tokens:N" | "image")
    output: str


def _tokens(vocab: int, seq: int) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"input_ids": ((1, seq), f"tokens:{vocab}"), "attention_mask": ((1, seq), "mask")}


def _image(size: int) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"pixel_values": ((1, 3, size, size), "image")}


def _encoder(model_cls: str, config_cls: str, **config) -> Callable[[], object]:
    """A text model returning its last hidden state, called by keyword (transformers 5)."""
    def build():
        import torch
        import transformers

        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))

        class Encoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                out = self.model(input_ids=input_ids, attention_mask=attention_mask)
                return out.last_hidden_state

        return Encoder()
    return build


def _classifier(model_cls: str, config_cls: str, **config) -> Callable[[], object]:
    """An image classifier returning its logits."""
    def build():
        import torch
        import transformers

        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))

        class Classifier(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, pixel_values):
                return self.model(pixel_values=pixel_values).logits

        return Classifier()
    return build


ZOO: dict[str, ZooModel] = {
    "bert_base": ZooModel(_encoder("BertModel", "BertConfig"), _tokens(30522, 128),
                          "last_hidden_state"),
    "gpt2": ZooModel(_encoder("GPT2Model", "GPT2Config"), _tokens(50257, 128),
                     "last_hidden_state"),
    "vit_base": ZooModel(_classifier("ViTForImageClassification", "ViTConfig"), _image(224),
                         "logits"),
    "swin_tiny": ZooModel(_classifier("SwinForImageClassification", "SwinConfig"), _image(224),
                          "logits"),
    "convnext_tiny": ZooModel(_classifier("ConvNextForImageClassification", "ConvNextConfig",
                                          layer_scale_init_value=0.1), _image(224), "logits"),
    "mobilenet_v2": ZooModel(_classifier("MobileNetV2ForImageClassification",
                                         "MobileNetV2Config"), _image(224), "logits"),
    "efficientnet_b0": ZooModel(_classifier("EfficientNetForImageClassification",
                                            "EfficientNetConfig", width_coefficient=1.0,
                                            depth_coefficient=1.0, image_size=224,
                                            hidden_dim=1280),
                                _image(224), "logits"),
    "resnet50": ZooModel(_classifier("ResNetForImageClassification", "ResNetConfig"),
                         _image(224), "logits"),
    # small ones for tests (committed under test/data/exported)
    "tiny_bert": ZooModel(_encoder("BertModel", "BertConfig", num_hidden_layers=2,
                                   hidden_size=64, num_attention_heads=2,
                                   intermediate_size=128, vocab_size=1000,
                                   max_position_embeddings=64), _tokens(1000, 16),
                          "last_hidden_state"),
    "tiny_gpt2": ZooModel(_encoder("GPT2Model", "GPT2Config", n_layer=2, n_embd=64, n_head=2,
                                   vocab_size=1000, n_positions=64), _tokens(1000, 16),
                          "last_hidden_state"),
    "tiny_mobilenet_v2": ZooModel(_classifier("MobileNetV2ForImageClassification",
                                              "MobileNetV2Config", depth_multiplier=0.35,
                                              image_size=64, num_labels=10),
                                  _image(64), "logits"),
}


def names() -> list[str]:
    return list(ZOO)


def default_dir() -> Path:
    return Path(os.environ.get("COLLAGE_ZOO", "~/.cache/collage_mlir/zoo")).expanduser()


def inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs a user would feed: token ids in the vocabulary, a mask of ones,
    standard-normal images."""
    rng = np.random.default_rng(seed)
    out = {}
    for key, (shape, kind) in ZOO[name].inputs.items():
        if kind.startswith("tokens:"):
            out[key] = rng.integers(0, int(kind.split(":")[1]), shape).astype(np.int64)
        elif kind == "mask":
            out[key] = np.ones(shape, np.int64)
        else:
            out[key] = rng.standard_normal(shape).astype(np.float32)
    return out


def _initialise(model, sample: dict[str, np.ndarray]) -> None:
    """Kaiming-normal weights, unit norms, and batch-norm statistics calibrated on
    random inputs (see the module docstring)."""
    import torch

    torch.manual_seed(0)
    norms = []
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d | torch.nn.Linear):
            torch.nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.Embedding):
            torch.nn.init.normal_(m.weight, 0.0, 1.0)
        elif isinstance(m, torch.nn.LayerNorm | torch.nn.GroupNorm):
            torch.nn.init.ones_(m.weight)
            torch.nn.init.zeros_(m.bias)
        elif isinstance(m, torch.nn.BatchNorm2d):
            torch.nn.init.ones_(m.weight)
            torch.nn.init.zeros_(m.bias)
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration batches
            norms.append(m)
    if norms:
        for m in norms:
            m.train()
        with torch.no_grad():
            for seed in range(4):
                batch = {k: torch.from_numpy(np.repeat(v, 8, axis=0) if v.dtype == np.float32
                                             else v) for k, v in sample.items()}
                if seed:
                    batch = {k: torch.randn_like(v) if v.dtype == torch.float32 else v
                             for k, v in batch.items()}
                model(**batch)
    model.eval()


def build(name: str):
    """The torch module of a zoo model, initialised (deterministic)."""
    import torch

    torch.manual_seed(0)
    model = ZOO[name].build()
    model.eval()
    _initialise(model, inputs(name))
    return model


def export(name: str, out_dir: str | os.PathLike | None = None, *, dynamic_batch: bool = False,
           force: bool = False) -> Path:
    """Export zoo model `name` (once; cached as OUT_DIR/NAME[_dynbatch].onnx)."""
    import torch

    out = Path(out_dir) if out_dir is not None else default_dir()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}{'_dynbatch' if dynamic_batch else ''}.onnx"
    if path.exists() and not force:
        return path
    spec = ZOO[name]
    model = build(name)
    feeds = {k: torch.from_numpy(v) for k, v in inputs(name).items()}
    axes = ({k: {0: "batch"} for k in [*spec.inputs, spec.output]} if dynamic_batch else None)
    with torch.no_grad():
        torch.onnx.export(model, tuple(feeds.values()), str(path), opset_version=17,
                          input_names=list(spec.inputs), output_names=[spec.output],
                          dynamic_axes=axes, do_constant_folding=True, dynamo=False)
    return path


def reference(name: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(inputs, torch's output for them)."""
    import torch

    feeds = inputs(name)
    with torch.no_grad():
        out = build(name)(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return feeds, out.numpy()


def _describe(name: str, path: Path, seconds: float) -> str:
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path), load_external_data=False)
    shape_ops = sum(n.op_type == "Shape" for n in model.graph.node)
    feeds, want = reference(name)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {k: v for k, v in feeds.items()
                                if k in {i.name for i in session.get_inputs()}})
    err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) or 1))
    tiny = float(np.mean(np.abs(want) < 1e-30))
    return (f"{name}: {path.stat().st_size / 2**20:.1f} MiB, {len(model.graph.node)} nodes, "
            f"{shape_ops} Shape ops, export {seconds:.1f} s; output max |x| "
            f"{float(np.max(np.abs(want))):.3g}, std {float(np.std(want)):.3g}, "
            f"denormal-or-zero {tiny:.0%}; onnxruntime vs torch {err:.1e} (relative)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help=f"models (default: all): {', '.join(ZOO)}")
    p.add_argument("--out", default=None, help=f"directory (default {default_dir()})")
    p.add_argument("--dynamic-batch", action="store_true", help="export with a batch dim_param")
    p.add_argument("--force", action="store_true", help="export again even if the file exists")
    p.add_argument("--list", action="store_true", help="print the zoo and exit")
    args = p.parse_args()
    if args.list:
        print("\n".join(ZOO))
        return
    for name in args.names or [n for n in ZOO if not n.startswith("tiny_")]:
        t0 = time.perf_counter()
        path = export(name, args.out, dynamic_batch=args.dynamic_batch, force=args.force)
        print(_describe(name, path, time.perf_counter() - t0), flush=True)


if __name__ == "__main__":
    main()
