"""LLM exports as torch writes them, for the ``--llm`` bench group (never committed, built in
a scratch folder).

    python bench/llm_models.py export OUT --layers 22 --dtype float32   # TinyLlama-1.1B shape
    python bench/llm_models.py export OUT --layers 22 --dtype float16

``export``: a ``LlamaForCausalLM`` of the TinyLlama-1.1B shape (vocabulary 32000, hidden
2048, intermediate 5632, 32 heads, 4 KV heads; random weights, seed 0) exported statically by
TorchScript at batch 1, seq 16: over 2 GB, torch writes one external file per tensor beside
``model.onnx``. Reference cases at (2, 7) and (1, 23) are recorded from torch in the same
dtype under ``OUT/refs``.
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="the TinyLlama-shaped decoder, exported by torch")
    exp.add_argument("out", type=Path)
    exp.add_argument("--layers", type=int, default=22)
    exp.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    args = parser.parse_args(argv)
    if args.command == "export":
        export(args.out, args.layers, args.dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
