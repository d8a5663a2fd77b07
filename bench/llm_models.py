"""LLM exports as torch writes them, for the ``--llm`` bench group (never committed, built in
a scratch folder).

    python bench/llm_models.py export OUT --layers 22 --dtype float32   # TinyLlama-1.1B shape
    python bench/llm_models.py export OUT --layers 22 --dtype float16

``export``: a ``LlamaForCausalLM`` of the TinyLlama-1.1B shape (vocabulary 32000, hidden
2048, intermediate 5632, 32 heads, 4 KV heads; random weights, seed 0) exported statically by
TorchScript at batch 1, seq 16: over 2 GB, torch writes one external file per tensor beside
``model.onnx``. Reference cases at (2, 7) and (1, 23) are recorded from torch in the same
dtype under ``OUT/refs``.

    python bench/llm_models.py grow SEED OUT --gib 14   # SEED: a 2-layer export

``grow``: the decoder exported at 2 layers, grown to as many layers as make ``--gib`` GiB by
cloning its second layer's nodes (tensors renamed) with weights of their own, random at the
spread of the layer's, written one tensor at a time into one file per tensor as torch writes
them: the model is never in memory (torch could not hold it twice either), and has no
reference cases.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SHAPE = {
    "vocab_size": 32000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
}
#: (batch, seq) of the recorded reference cases; the export is traced at (1, 16).
CASES = ((2, 7), (1, 23))


def decoder(layers: int, dtype: str, shape: dict | None = None):
    """The random-weight decoder, in eval mode, of ``dtype``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**(shape or SHAPE), num_hidden_layers=layers, use_cache=False)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(getattr(torch, dtype)).eval()


def export(out: Path, layers: int, dtype: str) -> None:
    import torch

    from onnxsurgery.validation.recording import record

    net = decoder(layers, dtype)
    out.mkdir(parents=True, exist_ok=True)
    ids = torch.randint(0, SHAPE["vocab_size"], (1, 16))

    class Logits(torch.nn.Module):  # what the graph computes: the logits alone
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask):
            return self.net(input_ids=input_ids, attention_mask=attention_mask).logits

    module = Logits().eval()
    with torch.no_grad():
        torch.onnx.export(
            module,
            (ids, torch.ones_like(ids)),
            str(out / "model.onnx"),
            dynamo=False,
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            opset_version=17,
        )
    gen = torch.Generator().manual_seed(1)
    for index, (batch, seq) in enumerate(CASES):
        case_ids = torch.randint(0, SHAPE["vocab_size"], (batch, seq), generator=gen)
        feeds = {"input_ids": case_ids, "attention_mask": torch.ones_like(case_ids)}
        record(module, feeds, out / "refs", output_names=["logits"], index=index)


def grow(seed: Path, out: Path, gib: float) -> int:
    """``seed``'s 2-layer decoder grown to ``gib`` GiB of weights (see the module docstring);
    returns its number of layers."""
    import re

    import numpy as np
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(seed / "model.onnx"))
    graph = model.graph
    nodes = list(graph.node)
    layer = [k for k, n in enumerate(nodes) if n.name.startswith("/net/model/layers.1/")]
    inner = {o for k in layer for o in nodes[k].output}
    end = "/net/model/layers.1/Add_1_output_0"  # the residual stream after the layer
    start = end.replace("layers.1", "layers.0")
    inits = {t.name: t for t in graph.initializer}
    used = {i for k in layer for i in nodes[k].input}
    weights = [n for n in inits if n in used and len(inits[n].raw_data) >= 1024]
    per_layer = sum(len(inits[n].raw_data) for n in weights)
    fixed = sum(len(t.raw_data) for t in graph.initializer)
    count = 2 + max(0, round((gib * 2**30 - fixed) / per_layer))
    rng = np.random.default_rng(0)
    out.mkdir(parents=True, exist_ok=True)

    def place(tensor: onnx.TensorProto, data: bytes) -> None:
        name = re.sub(r"[^\w.-]", "_", tensor.name)
        (out / name).write_bytes(data)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        del tensor.external_data[:]
        tensor.external_data.add(key="location", value=name)

    clones, previous = [], end
    for index in range(2, count):
        tag = f"layers.{index}"
        rename = {t: t.replace("layers.1", tag) if "layers.1" in t else f"{t}.{tag}" for t in inner}
        rename |= {w: f"{w}.{tag}" for w in weights} | {start: previous}
        for k in layer:
            node = onnx.NodeProto()
            node.CopyFrom(nodes[k])
            node.name = node.name.replace("layers.1", tag)
            node.input[:] = [rename.get(i, i) for i in node.input]
            node.output[:] = [rename[o] for o in node.output]
            clones.append(node)
        for w in weights:
            source = numpy_helper.to_array(inits[w])
            values = rng.standard_normal(source.shape, dtype=np.float32) * float(source.std())
            tensor = numpy_helper.from_array(values.astype(source.dtype), rename[w])
            place(tensor, tensor.raw_data)
            graph.initializer.append(tensor)
            del values, source
        previous = rename[end]
    for node in nodes[layer[-1] + 1 :]:
        node.input[:] = [previous if i == end else i for i in node.input]
    del graph.node[:]
    graph.node.extend(nodes[: layer[-1] + 1] + clones + nodes[layer[-1] + 1 :])
    for tensor in graph.initializer:
        if tensor.HasField("raw_data") and len(tensor.raw_data) >= 1024:
            place(tensor, tensor.raw_data)
    onnx.save(model, str(out / "model.onnx"))
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="the TinyLlama-shaped decoder, exported by torch")
    exp.add_argument("out", type=Path)
    exp.add_argument("--layers", type=int, default=22)
    exp.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    big = sub.add_parser("grow", help="a 2-layer export grown to --gib GiB, tensor by tensor")
    big.add_argument("seed", type=Path)
    big.add_argument("out", type=Path)
    big.add_argument("--gib", type=float, default=14.0)
    args = parser.parse_args(argv)
    if args.command == "export":
        export(args.out, args.layers, args.dtype)
    else:
        print(f"{grow(args.seed, args.out, args.gib)} layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
