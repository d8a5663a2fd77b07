"""Torch eager as the oracle of a symbolize test: a module exported statically with one input
``x`` and one output ``y``, and the symbolized model checked against the module at sizes the
export never saw."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx
import torch

from onnxsurgery.validation.runtime import run_model


def export_static(
    module: torch.nn.Module, x: torch.Tensor, path: Path, *, dynamo: bool = False, opset: int = 17
) -> onnx.ModelProto:
    """``module`` exported at ``x``'s sizes by TorchScript (or ``dynamo``), loaded back."""
    torch.onnx.export(
        module, (x,), str(path), input_names=["x"], output_names=["y"], dynamo=dynamo,
        opset_version=opset,
    )  # fmt: skip
    return onnx.load(path)


def matches_eager(
    model: onnx.ModelProto,
    module: torch.nn.Module,
    shapes: Iterable[tuple[int, ...]],
    *,
    seed_axis: int = 1,
) -> None:
    """``model`` gives ``module``'s output on ONNX Runtime (CPU) at each of ``shapes``, with
    inputs drawn under the seed of the shape's axis ``seed_axis``."""
    for shape in shapes:
        rng = np.random.default_rng(shape[seed_axis])
        feed = rng.standard_normal(shape).astype(np.float32)
        got = run_model(model, {"x": feed}, "cpu")["y"]
        with torch.no_grad():
            want = module(torch.from_numpy(feed)).numpy()
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
