"""A zoo of models exported the way users export them, with random but well-scaled weights.

Each model is a `transformers` architecture built from its config (no weights can be
downloaded here), or one written out below as torch modules (DeepSpeech2's GRUs, CRNN's
LSTMs, fast neural style's instance norms), written by `torch.onnx.export` (the
TorchScript exporter, opset 17, no simplifier): the files keep the run-time shape
computations (Shape → Gather → Concat → Reshape, attention masks from the sequence length)
that users' exports contain.

Why re-initialise: the configs' default init makes deep CNN outputs ~1e-20 (denormals, which
time differently per backend and make output checks meaningless). So linear and convolution
weights are Kaiming-normal, biases zero, layer norms unit, embeddings standard-normal, and
every batch norm's running statistics are calibrated on random inputs (its output has unit
variance at every depth, as in a trained network). Everything is seeded: exports are
deterministic. `python bench/models.py` prints each model's output magnitude.

    python bench/models.py [NAMES...] [--out DIR] [--dynamic-batch] [--exporter dynamo]
                           [--force] [--list]
    python bench/models.py --fixtures test/data/exported   # the committed test models

Torch and transformers are bench-only dependencies (`pip install -e '.[bench]'`); importing
this module works without them, exporting does not.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FIXTURES = [("tiny_bert", "torchscript"), ("tiny_gpt2", "torchscript"),
            ("tiny_mobilenet_v2", "torchscript"), ("tiny_deepspeech2", "torchscript"),
            ("tiny_llama", "torchscript"), ("tiny_bert_token_types", "torchscript"),
            ("tiny_opt", "dynamo"), ("tiny_performer", "torchscript")]  # + tiny_bert with dynamic batch, by each exporter


@dataclass(frozen=True)
class ZooModel:
    build: Callable[[], object]  # () -> torch.nn.Module returning one tensor
    inputs: dict[str, tuple[tuple[int, ...], str]]  # name -> (shape, "tokens:N"|"mask"|"image")
    output: str


def _require():
    """(torch, transformers), or an ImportError saying how to get them."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise ImportError(f"bench/models.py needs torch and transformers ({e}): "
                          "pip install -e '.[bench]' (torch==2.13.0, transformers)") from e
    return torch, transformers


def _tokens(vocab: int, seq: int) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"input_ids": ((1, seq), f"tokens:{vocab}"), "attention_mask": ((1, seq), "mask")}


def _image(size: int) -> dict[str, tuple[tuple[int, ...], str]]:
    return {"pixel_values": ((1, 3, size, size), "image")}


def _encoder(model_cls: str, config_cls: str, inputs: tuple[str, ...] = ("input_ids",
             "attention_mask"), **config) -> Callable[[], object]:
    """A model returning its last hidden state, its `inputs` passed by keyword
    (transformers 5): text models by default, speech ones take `("input_values",)`."""
    def build():
        torch, transformers = _require()
        model = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**config))

        class Encoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, *args):
                return self.model(**dict(zip(inputs, args, strict=True))).last_hidden_state

        return Encoder()
    return build


def _classifier(model_cls: str, config_cls: str, num_labels: int = 1000,
                **config) -> Callable[[], object]:
    """An image classifier returning its logits (an ImageNet head unless told)."""
    def build():
        torch, transformers = _require()
        config_ = getattr(transformers, config_cls)(num_labels=num_labels, **config)
        model = getattr(transformers, model_cls)(config_)

        class Classifier(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, pixel_values):
                return self.model(pixel_values=pixel_values).logits

        return Classifier()
    return build


def _segmenter(model_cls: str, config_cls: str, num_labels: int, **config
               ) -> Callable[[], object]:
    """A semantic segmenter returning class probabilities at the image's size: its logits
    upsampled (bilinear) and a softmax over the classes, as a pipeline post-processes them."""
    def build():
        torch, transformers = _require()
        model = getattr(transformers, model_cls)(
            getattr(transformers, config_cls)(num_labels=num_labels, **config))

        class Segmenter(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model

            def forward(self, pixel_values):
                logits = self.model(pixel_values=pixel_values).logits
                up = torch.nn.functional.interpolate(logits, size=pixel_values.shape[-2:],
                                                     mode="bilinear", align_corners=False)
                return up.softmax(dim=1)

        return Segmenter()
    return build


def _deepspeech2(hidden: int = 512, layers: int = 3, features: int = 161
                 ) -> Callable[[], object]:
    """DeepSpeech2's acoustic model (Amodei et al. 2016; the layout of deepspeech.pytorch):
    two strided 2-D convolutions over a spectrogram, bidirectional GRUs over its frames, a
    per-frame character classifier. Its parts favour different backends on CPU
    (convolutions and recurrences), which the image and text models of the zoo do not."""
    def build():
        torch, _ = _require()

        class DeepSpeech2(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                nn = torch.nn
                self.conv = nn.Sequential(
                    nn.Conv2d(1, 32, (41, 11), (2, 2), (20, 5)), nn.BatchNorm2d(32),
                    nn.Hardtanh(0, 20),
                    nn.Conv2d(32, 32, (21, 11), (2, 1), (10, 5)), nn.BatchNorm2d(32),
                    nn.Hardtanh(0, 20))
                rows = ((features + 1) // 2 + 1) // 2
                self.rnn = nn.GRU(32 * rows, hidden, num_layers=layers, bidirectional=True)
                self.fc = nn.Linear(2 * hidden, 29)  # 26 letters, space, apostrophe, blank

            def forward(self, spectrogram):
                x = self.conv(spectrogram)  # batch, channels, rows, frames
                x = x.flatten(1, 2).permute(2, 0, 1)  # frames, batch, features
                x, _ = self.rnn(x)
                return self.fc(x).log_softmax(-1)

        return DeepSpeech2()
    return build


def _crnn(hidden: int = 256, classes: int = 37) -> Callable[[], object]:
    """CRNN, the classic text-line recogniser (Shi, Bai and Yao 2016; the layout of
    crnn.pytorch, which OCR pipelines such as PaddleOCR's recognisers follow): a VGG-style
    stack of seven convolutions over a 32-pixel-high grey line image, its columns as a
    sequence into two bidirectional LSTMs, a per-column character classifier (CTC). A
    convolution stack and recurrences of similar weight: parts that favour different
    backends on CPU."""
    def build():
        torch, _ = _require()
        nn = torch.nn

        def conv(i: int, o: int, k: int = 3, pad: int = 1, norm: bool = False) -> list:
            return [nn.Conv2d(i, o, k, 1, pad), *([nn.BatchNorm2d(o)] if norm else []),
                    nn.ReLU()]

        class BiLSTM(nn.Module):
            def __init__(self, inp: int, out: int) -> None:
                super().__init__()
                self.rnn = nn.LSTM(inp, hidden, bidirectional=True)
                self.fc = nn.Linear(2 * hidden, out)

            def forward(self, x):
                x, _ = self.rnn(x)
                return self.fc(x)

        class CRNN(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.cnn = nn.Sequential(
                    *conv(1, 64), nn.MaxPool2d(2, 2), *conv(64, 128), nn.MaxPool2d(2, 2),
                    *conv(128, 256, norm=True), *conv(256, 256),
                    nn.MaxPool2d((2, 2), (2, 1), (0, 1)),
                    *conv(256, 512, norm=True), *conv(512, 512),
                    nn.MaxPool2d((2, 2), (2, 1), (0, 1)), *conv(512, 512, 2, 0, norm=True))
                self.rnn = nn.Sequential(BiLSTM(512, hidden), BiLSTM(hidden, classes))

            def forward(self, image):
                x = self.cnn(image).squeeze(2).permute(2, 0, 1)  # columns, batch, channels
                return self.rnn(x).log_softmax(-1)

        return CRNN()
    return build


def _fast_neural_style() -> Callable[[], object]:
    """Fast neural style transfer (Johnson et al. 2016; the layout of pytorch/examples'
    TransformerNet, which the ONNX model zoo's style-transfer models were exported from):
    reflection-padded convolutions with instance norms, five residual blocks at a quarter of
    the resolution, nearest-neighbour upsampling back. Instance norms, reflection pads and
    resizes over large maps: ops the classifiers of the zoo do not have."""
    def build():
        torch, _ = _require()
        nn = torch.nn

        def conv(i: int, o: int, k: int, stride: int = 1) -> nn.Module:
            return nn.Sequential(nn.ReflectionPad2d(k // 2), nn.Conv2d(i, o, k, stride))

        def block(i: int, o: int, k: int, stride: int = 1, up: bool = False) -> list:
            return [*([nn.Upsample(scale_factor=2, mode="nearest")] if up else []),
                    conv(i, o, k, stride), nn.InstanceNorm2d(o, affine=True), nn.ReLU()]

        class Residual(nn.Module):
            def __init__(self, c: int) -> None:
                super().__init__()
                self.body = nn.Sequential(*block(c, c, 3)[:-1], nn.ReLU(), conv(c, c, 3),
                                          nn.InstanceNorm2d(c, affine=True))

            def forward(self, x):
                return x + self.body(x)

        class TransformerNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.net = nn.Sequential(
                    *block(3, 32, 9), *block(32, 64, 3, 2), *block(64, 128, 3, 2),
                    *(Residual(128) for _ in range(5)),
                    *block(128, 64, 3, up=True), *block(64, 32, 3, up=True), conv(32, 3, 9))

            def forward(self, image):
                return self.net(image)

        return TransformerNet()
    return build


def _performer(depth: int, dim: int, heads: int, seq: int, vocab: int = 20000
               ) -> Callable[[], object]:
    """A causal Performer language model (Choromanski et al. 2021) as `performer-pytorch`
    builds it, returning its encodings. Without that package's CUDA kernel (never on a CPU)
    causal attention is its `causal_linear_attention_noncuda`: the sequence cut into 128
    chunks, each an outer product, cumulative sums and einsums, then one Concat of 128, so
    a layer is ~2,000 ONNX ops. Needs `pip install performer-pytorch` besides the bench
    extra."""
    def build():
        torch, _ = _require()
        try:
            from performer_pytorch import PerformerLM
        except ImportError as e:
            raise ImportError(f"the performer model needs performer-pytorch ({e}): "
                              "pip install performer-pytorch") from e

        lm = PerformerLM(num_tokens=vocab, max_seq_len=seq, dim=dim, depth=depth,
                         heads=heads, causal=True, feature_redraw_interval=None)

        class Encodings(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lm = lm

            def forward(self, input_ids):
                return self.lm(input_ids, return_encodings=True)

        return Encodings()
    return build


def _bamba(hidden: int, heads: tuple[int, int], scan_heads: tuple[int, int], state: int,
           ffn: int, vocab: int, tokens: int = 128) -> ZooModel:
    """Bamba's layout (IBM's hybrid): four layers, the third grouped-query attention
    (`heads`: query and key-value heads), the others Mamba2 mixers (`scan_heads`: heads and
    their width; chunks of 256, so each scan's cumulative sums span [.., 256, 256]), over
    `tokens` token ids, returning the last hidden state."""
    return ZooModel(_encoder("BambaModel", "BambaConfig", ("input_ids",), hidden_size=hidden,
                             num_hidden_layers=4, attn_layer_indices=[2],
                             num_attention_heads=heads[0], num_key_value_heads=heads[1],
                             intermediate_size=ffn, mamba_n_heads=scan_heads[0],
                             mamba_d_head=scan_heads[1], mamba_n_groups=1, mamba_d_state=state,
                             mamba_expand=2, mamba_chunk_size=256, vocab_size=vocab,
                             use_cache=False),
                    {"input_ids": ((1, tokens), f"tokens:{vocab}")}, "last_hidden_state")


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
    "wav2vec2_base": ZooModel(_encoder("Wav2Vec2Model", "Wav2Vec2Config", ("input_values",)),
                              {"input_values": ((1, 16000), "image")}, "last_hidden_state"),
    "deepspeech2": ZooModel(_deepspeech2(), {"spectrogram": ((1, 1, 161, 200), "image")},
                            "log_probs"),
    "crnn": ZooModel(_crnn(), {"image": ((1, 1, 32, 320), "image")}, "log_probs"),
    "fast_neural_style": ZooModel(_fast_neural_style(), {"image": ((1, 3, 224, 224), "image")},
                                  "stylized"),
    # a state-space language model (mamba2-130m's shape; its chunked scan is einsums over
    # cumulative sums). Use the dynamo exporter: TorchScript writes a Transpose with a
    # negative perm, which onnxruntime refuses (collage's import counts it from the start)
    "mamba2": ZooModel(_encoder("Mamba2Model", "Mamba2Config", ("input_ids",),
                                hidden_size=768, num_hidden_layers=24, state_size=128,
                                num_heads=24, head_dim=64, expand=2, n_groups=1,
                                chunk_size=256, vocab_size=50288, use_cache=False),
                       {"input_ids": ((1, 128), "tokens:50288")}, "last_hidden_state"),
    "mamba2_4l": ZooModel(_encoder("Mamba2Model", "Mamba2Config", ("input_ids",),
                                   hidden_size=768, num_hidden_layers=4, state_size=128,
                                   num_heads=24, head_dim=64, expand=2, n_groups=1,
                                   chunk_size=256, vocab_size=50288, use_cache=False),
                          {"input_ids": ((1, 128), "tokens:50288")}, "last_hidden_state"),
    # a hybrid of Mamba2 layers and attention (Bamba-9B's layout at mamba2_4l's width: the
    # third of four layers is grouped-query attention); dynamo only, as mamba2
    "bamba_4l": _bamba(768, heads=(12, 4), scan_heads=(24, 64), state=128, ffn=2048,
                       vocab=32000),
    # the same layout at width 128 (0.9 M parameters): the bundled demo model
    # (examples/bamba_tiny.onnx, its weights inlined)
    "bamba_tiny": _bamba(128, heads=(4, 2), scan_heads=(8, 32), state=64, ffn=256, vocab=1000),
    # SegFormer-b0 at 512x512 with 21 classes (PASCAL VOC's): onnxruntime runs some MatMuls
    # faster, OpenVINO the softmax over classes (bench/ceiling.py: 1.07, at its noise)
    "segformer_b0": ZooModel(_segmenter("SegformerForSemanticSegmentation", "SegformerConfig",
                                        21), _image(512), "probabilities"),
    # MobileViT-small with its DeepLabV3 head, the same way: OpenVINO's whole model is
    # faster, onnxruntime its attention softmaxes (ceiling 1.30; carved by hand they do not
    # pay: docs/results.md)
    "mobilevit_seg": ZooModel(_segmenter("MobileViTForSemanticSegmentation", "MobileViTConfig",
                                         21), _image(512), "probabilities"),
    # a causal Performer (linear attention, performer-pytorch's CPU path; 1 layer of 256 at
    # 256 tokens is ~2,000 ops): OpenVINO cannot compile it whole (its Einsum decomposition
    # throws on the outer product); IREE runs it ~4x faster than onnxruntime
    "performer_lm": ZooModel(_performer(depth=1, dim=256, heads=8, seq=256),
                             {"input_ids": ((1, 256), "tokens:20000")}, "last_hidden_state"),
    # small ones for tests (committed under test/data/exported, each well under 1 MB)
    "tiny_bert": ZooModel(_encoder("BertModel", "BertConfig", num_hidden_layers=2,
                                   hidden_size=64, num_attention_heads=2,
                                   intermediate_size=128, vocab_size=1000,
                                   max_position_embeddings=64), _tokens(1000, 16),
                          "last_hidden_state"),
    "tiny_gpt2": ZooModel(_encoder("GPT2Model", "GPT2Config", n_layer=2, n_embd=64, n_head=2,
                                   vocab_size=1000, n_positions=64, bos_token_id=0,
                                   eos_token_id=0), _tokens(1000, 16),
                          "last_hidden_state"),
    "tiny_mobilenet_v2": ZooModel(_classifier("MobileNetV2ForImageClassification",
                                              "MobileNetV2Config", depth_multiplier=0.25,
                                              finegrained_output=False, image_size=64,
                                              num_labels=10),
                                  _image(64), "logits"),
    "tiny_deepspeech2": ZooModel(_deepspeech2(hidden=16, layers=2, features=33),
                                 {"spectrogram": ((1, 1, 33, 24), "image")}, "log_probs"),
    "tiny_bert_token_types": ZooModel(
        _encoder("BertModel", "BertConfig", ("input_ids", "attention_mask", "token_type_ids"),
                 num_hidden_layers=2, hidden_size=64, num_attention_heads=2,
                 intermediate_size=128, vocab_size=1000, max_position_embeddings=64),
        {**_tokens(1000, 16), "token_type_ids": ((1, 16), "tokens:2")}, "last_hidden_state"),
    "tiny_opt": ZooModel(_encoder("OPTModel", "OPTConfig", num_hidden_layers=2, hidden_size=64,
                                  ffn_dim=128, num_attention_heads=2, word_embed_proj_dim=64,
                                  vocab_size=1000, max_position_embeddings=64),
                         _tokens(1000, 16), "last_hidden_state"),
    "tiny_performer": ZooModel(_performer(depth=1, dim=16, heads=2, seq=256, vocab=1000),
                               {"input_ids": ((1, 256), "tokens:1000")}, "last_hidden_state"),
    "tiny_llama": ZooModel(_encoder("LlamaModel", "LlamaConfig", num_hidden_layers=2,
                                    hidden_size=64, intermediate_size=128,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    vocab_size=1000, max_position_embeddings=64,
                                    use_cache=False), _tokens(1000, 16),
                           "last_hidden_state"),
}


def names() -> list[str]:
    return list(ZOO)


def default_dir() -> Path:
    return Path(os.environ.get("COLLAGE_ZOO", "~/.cache/collage_mlir/zoo")).expanduser()


def _spec_of_file(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """Input specs read from an .onnx file: a symbolic dim is 1, an integer input is a mask
    if its name says so, else token ids below the rows of the table it (reshaped) indexes."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    rows = {init.name: init.dims[0] for init in model.graph.initializer if init.dims}
    source, vocab = {}, {}  # value -> the input it reshapes; input -> rows it indexes
    for n in model.graph.node:
        if n.op_type in {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Cast"}:
            source[n.output[0]] = source.get(n.input[0], n.input[0])
        elif n.op_type == "Gather" and n.input[0] in rows:
            vocab[source.get(n.input[1], n.input[1])] = rows[n.input[0]]
    spec = {}
    for value in model.graph.input:
        if value.name in rows:  # an initializer listed as an input (old exports)
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value or 1 for d in tensor.shape.dim)
        if tensor.elem_type != onnx.TensorProto.INT64:
            spec[value.name] = (shape, "image")
        elif "mask" in value.name:
            spec[value.name] = (shape, "mask")
        else:
            spec[value.name] = (shape, f"tokens:{vocab.get(value.name, 100)}")
    return spec


def inputs(name_or_path: str | os.PathLike, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs a user would feed a zoo model (by name, or an exported file of one; any
    other .onnx file by its inputs): token ids in the vocabulary, a mask of ones,
    standard-normal images; a dynamic batch is 1."""
    key = str(name_or_path)
    stem = zoo_name(Path(key))
    spec = (ZOO[key].inputs if key in ZOO else ZOO[stem].inputs if stem in ZOO
            else _spec_of_file(Path(key)))
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, kind) in spec.items():
        if kind.startswith("tokens:"):
            out[name] = rng.integers(0, int(kind.split(":")[1]), shape).astype(np.int64)
        elif kind == "mask":
            out[name] = np.ones(shape, np.int64)
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _initialise(model, sample: dict[str, np.ndarray]) -> None:
    """Kaiming-normal weights, unit norms, and batch-norm statistics calibrated on
    random inputs (see the module docstring)."""
    torch, _ = _require()
    torch.manual_seed(0)
    norms = []
    for m in model.modules():
        if (isinstance(m, torch.nn.Conv1d | torch.nn.Conv2d | torch.nn.Linear)
                and not torch.nn.utils.parametrize.is_parametrized(m)):  # weight norm: keep
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
    torch, _ = _require()
    torch.manual_seed(0)
    model = ZOO[name].build()
    model.eval()
    _initialise(model, inputs(name))
    return model


EXPORTERS = ("torchscript", "dynamo")
"""torch.onnx.export's two exporters: `dynamo=False` (TorchScript tracing, opset 17) and
`dynamo=True` (torch.export + onnxscript, the default in torch 2.13; its own opset)."""


def _path(name: str, out_dir: str | os.PathLike | None, dynamic_batch: bool,
          exporter: str = "torchscript") -> Path:
    out = Path(out_dir).expanduser() if out_dir is not None else default_dir()
    suffix = ("_dynbatch" if dynamic_batch else "") + ("_dynamo" if exporter == "dynamo" else "")
    return out / f"{name}{suffix}.onnx"


def zoo_name(path: Path) -> str:
    """The zoo model an exported file is of (`_path`'s name without its suffixes)."""
    return path.stem.removesuffix("_dynamo").removesuffix("_dynbatch")


def _write(model, name: str, path: Path, dynamic_batch: bool,
           exporter: str = "torchscript") -> None:
    """torch.onnx.export as a user calls it (external data, if any, lands beside `path`)."""
    torch, _ = _require()
    spec = ZOO[name]
    feeds = tuple(torch.from_numpy(v) for v in inputs(name).values())
    axes = {k: {0: "batch"} for k in [*spec.inputs, spec.output]} if dynamic_batch else None
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        if exporter == "dynamo":
            shapes = None
            if dynamic_batch:  # torch.export fixes a dim whose example is 1: give it 2
                feeds = tuple(torch.cat([v, v]) for v in feeds)
                shapes = _batch_shapes(model, len(feeds), torch.export.Dim("batch"))
            torch.onnx.export(model, feeds, str(path), input_names=list(spec.inputs),
                              output_names=[spec.output], dynamic_shapes=shapes, dynamo=True)
        else:
            torch.onnx.export(model, feeds, str(path), opset_version=17,
                              input_names=list(spec.inputs), output_names=[spec.output],
                              dynamic_axes=axes, do_constant_folding=True, dynamo=False)


def _batch_shapes(model, count: int, batch) -> tuple:
    """`dynamic_shapes` making dim 0 of each of `count` inputs `batch`, shaped as
    `model.forward` takes them (a `*args` parameter is one tuple)."""
    import inspect

    params = inspect.signature(model.forward).parameters.values()
    each = tuple({0: batch} for _ in range(count))
    return (each,) if any(p.kind is p.VAR_POSITIONAL for p in params) else each


def export(name: str, out_dir: str | os.PathLike | None = None, *, dynamic_batch: bool = False,
           force: bool = False, exporter: str = "torchscript") -> Path:
    """Export zoo model `name` (once; cached as OUT_DIR/NAME[_dynbatch][_dynamo].onnx)."""
    path = _path(name, out_dir, dynamic_batch, exporter)
    if force or not path.exists():
        _write(build(name), name, path, dynamic_batch, exporter)
    return path


def reference(name: str, model=None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(inputs, torch's output for them)."""
    torch, _ = _require()
    feeds = inputs(name)
    with torch.no_grad():
        # positionally, in the spec's order, as `_write` exports it (encoders take *args)
        out = (model or build(name))(*[torch.from_numpy(v) for v in feeds.values()])
    return feeds, out.numpy()


def fixtures(out_dir: str | os.PathLike) -> list[Path]:
    """The test models: FIXTURES (static) and tiny_bert with a dynamic batch (by each
    exporter), each with
    NAME.npz holding its inputs and torch's output for them (`expected`)."""
    paths = []
    for name, exporter in FIXTURES:
        model = build(name)
        paths.append(_path(name, out_dir, False, exporter))
        _write(model, name, paths[-1], False, exporter)
        feeds, want = reference(name, model)
        np.savez(paths[-1].with_suffix(".npz"), **feeds, expected=want)
    paths += [export("tiny_bert", out_dir, dynamic_batch=True, force=True, exporter=e)
              for e in EXPORTERS]
    return paths


def unknown_dims(path: Path) -> int:
    """Values (intermediates and outputs) that onnx shape inference with data propagation
    leaves without a shape or with a dim it cannot give a number."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)), data_prop=True)
    values = [*model.graph.value_info, *model.graph.output]
    return sum(not v.type.tensor_type.HasField("shape")
               or any(not d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
               for v in values)


def stats(x: np.ndarray) -> str:
    """Output magnitude: a well-scaled model gives max |x| of 0.1..100, nothing below 1e-30."""
    finite = bool(np.all(np.isfinite(x)))
    return (f"max|x| {float(np.max(np.abs(x))):.3g} std {float(np.std(x)):.3g} "
            f"|x|<1e-30 {float(np.mean(np.abs(x) < 1e-30)):.0%}"
            f"{'' if finite else ' NaN/Inf!'}")


def describe(name: str, path: Path, model, took: str) -> str:
    """One line: file, graph and output facts, and how onnxruntime matches torch."""
    import onnx
    import onnxruntime as ort

    graph = onnx.load(str(path), load_external_data=False).graph
    shape_ops = sum(n.op_type == "Shape" for n in graph.node)
    params = sum(p.numel() for p in model.parameters())
    feeds, want = reference(name, model)
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # an exporter's spelling onnxruntime refuses; collage may not
        match = f"onnxruntime refuses the file ({str(e).splitlines()[0][-160:]})"
    else:
        (got,) = session.run(None, feeds)
        err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) or 1))
        match = f"onnxruntime vs torch {err:.1e}"
    return (f"{path.name}: {path.stat().st_size / 2**20:.2f} MiB, {params / 1e6:.2f} M params, "
            f"{took}, {len(graph.node)} nodes, {shape_ops} Shape, {unknown_dims(path)} "
            f"unknown-dim values; torch {stats(want)}; {match}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="models (default: all but tiny_*): "
                   + ", ".join(ZOO))
    p.add_argument("--out", default=None, help=f"directory (default {default_dir()})")
    p.add_argument("--dynamic-batch", action="store_true", help="export with a batch dim_param")
    p.add_argument("--force", action="store_true", help="export again even if the file exists")
    p.add_argument("--exporter", choices=EXPORTERS, default="torchscript",
                   help="torch.onnx.export's exporter (default torchscript, dynamo=False)")
    p.add_argument("--list", action="store_true", help="print the zoo and exit")
    p.add_argument("--fixtures", metavar="DIR", help="write the test models to DIR and exit")
    args = p.parse_args()
    if args.list:
        print("\n".join(ZOO))
        return
    if args.fixtures:
        for path in fixtures(args.fixtures):
            name = zoo_name(path)
            print(describe(name, path, build(name), "written"), flush=True)
        return
    for name in args.names or [n for n in ZOO if not n.startswith("tiny_")]:
        path = _path(name, args.out, args.dynamic_batch, args.exporter)
        model = build(name)
        took = "cached"
        if args.force or not path.exists():
            t0 = time.perf_counter()
            _write(model, name, path, args.dynamic_batch, args.exporter)
            took = f"export {time.perf_counter() - t0:.1f} s"
        print(describe(name, path, model, took), flush=True)


if __name__ == "__main__":
    main()
