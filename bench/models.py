"""Models the benchmarks run on, generated here and cached under ``build/bench/models`` (never committed).

- ``attention_stack(path, width, layers)``: a stack of self-attention + MLP blocks with random
  weights, built with ``onnx.helper`` as the TorchScript exporter writes a statically traced
  block (batch 2, seq 16; Reshape targets hold the traced sizes, so symbolize has work to do).
  Weights go to an external-data file when asked, written in chunks so that a > 2 GB model
  never sits whole in this process.
- ``bert_base(path)``: ``transformers`` BERT-base (random weights) exported by the TorchScript
  exporter at batch 2, seq 16, by a separate interpreter so the benchmark never imports torch.
- ``decoder(path, layers)``: a ``transformers`` GPT-2 style decoder (causal mask, position ids)
  exported the same way, for symbolize's planning time.

Usage from a benchmark: ``path = ensure("attn-50MB")`` returns the cached file, building it once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CACHE = Path(__file__).resolve().parent.parent / "build" / "bench" / "models"
BATCH, SEQ, HEADS = 2, 16, 8

#: name -> (builder, kwargs); the sizes are the weights' bytes (12 * width^2 * 4 per layer).
SPECS: dict[str, tuple[str, dict]] = {
    "attn-50MB": ("attention", {"width": 512, "layers": 4, "external": False}),
    "attn-500MB": ("attention", {"width": 1024, "layers": 10, "external": False}),
    "attn-2.2GB-ext": ("attention", {"width": 2048, "layers": 11, "external": True}),
    "bert-base": ("bert", {}),
    "decoder-24": ("decoder", {"layers": 24}),
}


def _block(i: int, x: str, width: int, weights: list[tuple[str, tuple[int, ...]]]) -> list:
    """One post-norm attention + MLP block on x[BATCH, SEQ, width], as traced at that size."""
    p = f"l{i}."
    nodes = []
    for w in ("q", "k", "v"):
        weights.append((f"{p}W{w}", (width, width)))
        nodes += [
            helper.make_node("MatMul", [x, f"{p}W{w}"], [f"{p}{w}"]),
            helper.make_node("Reshape", [f"{p}{w}", "split_heads"], [f"{p}{w}4"]),
        ]
    nodes += [
        helper.make_node("Transpose", [f"{p}q4"], [f"{p}qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", [f"{p}k4"], [f"{p}kt"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", [f"{p}v4"], [f"{p}vt"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", [f"{p}qt", f"{p}kt"], [f"{p}s"]),
        helper.make_node("Div", [f"{p}s", "sqrt_head"], [f"{p}ss"]),
        helper.make_node("Softmax", [f"{p}ss"], [f"{p}a"], axis=-1),
        helper.make_node("MatMul", [f"{p}a", f"{p}vt"], [f"{p}c"]),
        helper.make_node("Transpose", [f"{p}c"], [f"{p}ct"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", [f"{p}ct", "merge_heads"], [f"{p}cm"]),
        helper.make_node("MatMul", [f"{p}cm", f"{p}Wo"], [f"{p}o"]),
        helper.make_node("Add", [x, f"{p}o"], [f"{p}r1"]),
        helper.make_node(
            "LayerNormalization", [f"{p}r1", "ln_scale", "ln_bias"], [f"{p}n1"], axis=-1
        ),
        helper.make_node("MatMul", [f"{p}n1", f"{p}W1"], [f"{p}h"]),
        helper.make_node("Relu", [f"{p}h"], [f"{p}hr"]),
        helper.make_node("MatMul", [f"{p}hr", f"{p}W2"], [f"{p}m"]),
        helper.make_node("Add", [f"{p}n1", f"{p}m"], [f"{p}r2"]),
        helper.make_node(
            "LayerNormalization", [f"{p}r2", "ln_scale", "ln_bias"], [f"{p}out"], axis=-1
        ),
    ]
    weights += [(f"{p}Wo", (width, width)), (f"{p}W1", (width, 4 * width)), (f"{p}W2", (4 * width, width))]
    return nodes


def attention_stack(path: Path, *, width: int, layers: int, external: bool) -> Path:
    """Write the stack to ``path`` (weights beside it in ``<name>.data`` when ``external``)."""
    weights: list[tuple[str, tuple[int, ...]]] = []
    nodes, x = [], "x"
    for i in range(layers):
        nodes += _block(i, x, width, weights)
        x = f"l{i}.out"
    nodes.append(helper.make_node("Identity", [x], ["y"]))
    small = [
        numpy_helper.from_array(np.array([BATCH, SEQ, HEADS, width // HEADS], np.int64), "split_heads"),
        numpy_helper.from_array(np.array([BATCH, SEQ, width], np.int64), "merge_heads"),
        numpy_helper.from_array(np.array(np.sqrt(width // HEADS), np.float32), "sqrt_head"),
        numpy_helper.from_array(np.ones(width, np.float32), "ln_scale"),
        numpy_helper.from_array(np.zeros(width, np.float32), "ln_bias"),
    ]
    rng = np.random.default_rng(0)
    inits: list[TensorProto] = []
    data_name = path.name + ".data"
    offset = 0
    data = open(path.with_name(data_name), "wb") if external else None  # noqa: SIM115
    try:
        for name, shape in weights:
            scale = np.float32(1.0 / np.sqrt(shape[0]))
            if data is None:
                array = rng.standard_normal(shape, dtype=np.float32) * scale
                inits.append(numpy_helper.from_array(array, name))
                continue
            for start in range(0, shape[0], 512):
                rows = min(512, shape[0] - start)
                (rng.standard_normal((rows, shape[1]), dtype=np.float32) * scale).tofile(data)
            length = int(np.prod(shape)) * 4
            tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape))
            tensor.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", offset), ("length", length)):
                tensor.external_data.add(key=key, value=str(value))
            inits.append(tensor)
            offset += length
    finally:
        if data is not None:
            data.close()
    graph = helper.make_graph(
        nodes,
        "attention_stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, SEQ, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [BATCH, SEQ, width])],
        initializer=inits + small,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return path


# Exported by a separate interpreter: the benchmark process never imports torch.
_EXPORT = r"""
import sys, torch, transformers
kind, out, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
if kind == "bert":
    model = transformers.BertModel(transformers.BertConfig(attn_implementation="eager")).eval()
    names = ["input_ids", "attention_mask"]
else:
    config = transformers.GPT2Config(n_layer=layers, n_embd=256, n_head=4, vocab_size=1000,
                                     n_positions=128, use_cache=False,
                                     attn_implementation="eager")
    model = transformers.GPT2Model(config).eval()
    names = ["input_ids", "attention_mask"]
class Wrapped(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
    def forward(self, *args):
        return self.inner(**dict(zip(names, args)), return_dict=False)[0]
ids = torch.randint(0, 1000, (2, 16))
args = (ids, torch.ones(2, 16, dtype=torch.long))
with torch.no_grad():
    torch.onnx.export(Wrapped(model), args, out, dynamo=False, opset_version=17,
                      input_names=names, output_names=["last_hidden_state"])
"""


def _export(kind: str, path: Path, layers: int = 0) -> Path:
    proc = subprocess.run(
        [sys.executable, "-c", _EXPORT, kind, str(path), str(layers)], capture_output=True, text=True
    )
    if proc.returncode or not path.exists():
        tail = proc.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"exporting {kind} failed: {' | '.join(tail)}")
    return path


def ensure(name: str) -> Path:
    """The cached model ``name`` (one of SPECS), built on first use."""
    builder, kwargs = SPECS[name]
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{name}.onnx"
    if path.exists():
        return path
    tmp = CACHE / f".{name}.partial.onnx"
    if builder == "attention":
        attention_stack(tmp, **kwargs)
        if kwargs["external"]:
            # The data file keeps the name the model refers to.
            model = onnx.load(str(tmp), load_external_data=False)
            for t in model.graph.initializer:
                for entry in t.external_data:
                    if entry.key == "location":
                        entry.value = path.name + ".data"
            tmp.with_name(tmp.name + ".data").rename(path.with_name(path.name + ".data"))
            tmp.write_bytes(model.SerializeToString())
    elif builder == "bert":
        _export("bert", tmp)
    else:
        _export("decoder", tmp, kwargs["layers"])
    tmp.rename(path)
    return path


def model_bytes(path: Path) -> int:
    """The model file plus its external data file, if any."""
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


if __name__ == "__main__":
    for model_name in sys.argv[1:] or [n for n in SPECS if "ext" not in n]:
        built = ensure(model_name)
        print(f"{model_name}: {built} ({model_bytes(built) / 2**20:.0f} MiB)")
