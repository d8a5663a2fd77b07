"""A mask filled in a canvas of constants whose size equals the traced batch (issue 30:
torchvision's Swin3D by dynamo at batch 2, refused after its check found rows mixed, where
re-export passes). Shifted-window attention labels each window's tokens in zeros of
``[frames, h, w]`` (2 frames at batch 2), views the labels as one row per window and adds the
mask to the scores viewed ``[batch, windows, n, n]``. Read as the batch, the canvas's 2 frames
turned the windows into ``batch * 2`` and the scores' view into ``[2, batch * 2, n, n]``:
consistent shapes, mixed rows. A canvas made from constants holds no rows of a batch, so its
size is no batch by the rows of the graph; the original model run row by row decides it. The
oracle is torch eager at batches never traced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from test_symbolize import parse

import onnxsurgery
from onnxsurgery.passes.symbolize import Symbolize
from onnxsurgery.validation.runtime import run_model

CPU = onnxsurgery.PassContext(provider="cpu")


DATA = Path(__file__).parent / "data"


def test_swin3d_shifted_windows_follow_the_batch_by_rows():
    """torchvision's Swin3D, shrunk, exported by dynamo at batch 2 (``data/make_swin3d.py``):
    refused before (its check: "batch rows are not independent" at batch 3); now it matches
    torch eager at batch 3 and 1, the canvas kept at its 2 frames."""
    model = onnx.load(DATA / "swin3d_shifted_b2.onnx")
    result = Symbolize(**{"x:0": "batch"})(model, CPU)
    torch_cases = np.load(DATA / "swin3d_shifted_torch.npz")
    for b in (3, 1):
        got = run_model(result.model, {"x": torch_cases[f"x{b}"]}, "cpu")["y"]
        np.testing.assert_allclose(got, torch_cases[f"y{b}"], rtol=1e-4, atol=1e-4)


def test_a_zero_state_as_long_as_the_batch_still_follows_it():
    """The rows rule this leaves alone: zeros made for each row and added to the input's rows
    (an RNN's initial state folded at the traced batch) follow the batch."""
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 3] x) => (float[2, 3] y) {
            size = Constant <value = int64[2] {2, 3}> ()
            state = ConstantOfShape (size)
            y = Add (x, state)
        }
        """
    )
    result = Symbolize(**{"x:0": "batch"})(model, CPU)
    x = np.ones((5, 3), np.float32)
    np.testing.assert_array_equal(run_model(result.model, {"x": x}, "cpu")["y"], x)
