"""tests/data/swin3d_shifted_b2.onnx: torchvision's Swin3D, shrunk (embed 8, two stages of two
blocks, one head), exported statically by dynamo at batch 2, its head scaled by 1000 so rows
mixed by a wrong plan show far past the check's tolerance; with torch eager's outputs at
batch 3 and 1 beside it. Needs torchvision (make sweep-torchvision's venv)."""

import sys
from pathlib import Path

import numpy as np
import torch
from torchvision.models.video.swin_transformer import SwinTransformer3d

out = Path(sys.argv[1])
torch.manual_seed(0)
m = SwinTransformer3d(
    patch_size=[2, 4, 4],
    embed_dim=8,
    depths=[2, 2],
    num_heads=[1, 1],
    window_size=[2, 7, 7],
    num_classes=5,
).eval()
with torch.no_grad():
    m.head.weight.mul_(1000.0)
torch.onnx.export(
    m,
    (torch.randn(2, 3, 4, 32, 32),),
    str(out / "swin3d_shifted_b2.onnx"),
    input_names=["x"],
    output_names=["y"],
    dynamo=True,
    opset_version=18,
    external_data=False,
)
cases = {}
with torch.no_grad():
    for b in (3, 1):
        x = torch.randn(b, 3, 4, 32, 32)
        cases[f"x{b}"], cases[f"y{b}"] = x.numpy(), m(x).numpy()
np.savez_compressed(out / "swin3d_shifted_torch.npz", **cases)
