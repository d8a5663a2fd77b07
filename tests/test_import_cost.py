"""What a run that never executes a model imports: not ONNX Runtime, not pydantic.

``onnxruntime`` (~0.1 s) is imported on first use (``validation/runtime.py``), and typer before
0.29 parses options without pydantic (~85 ms): together a third of a ``run --passes cleanup``
on a 50 MB model beyond ``onnx.load`` + ``onnx.save`` (bench/bench_pipeline.py, chains).
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from onnxsurgery.cli import main
sys.argv = ["onnxsurgery", "run", sys.argv[1], "-o", sys.argv[2], "-q", "--passes", "cleanup"]
try:
    main()
except SystemExit as exc:
    assert exc.code == 0, exc.code
ort = sys.modules.get("onnxruntime")
print("onnxruntime", "absent" if ort is None else type(ort).__name__)
print("pydantic", "pydantic" in sys.modules)
"""


def test_cleanup_run_imports_neither_onnxruntime_nor_pydantic(tmp_path, tiny_model) -> None:
    import onnx

    src = tmp_path / "m.onnx"
    onnx.save(tiny_model, src)
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(src), str(tmp_path / "out.onnx")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == ["onnxruntime _LazyModule", "pydantic False"], out
    assert (tmp_path / "out.onnx").is_file()


def test_onnxruntime_loads_on_first_use() -> None:
    from onnxsurgery.validation.runtime import ort

    assert ort.InferenceSession.__name__ == "InferenceSession"
    assert type(sys.modules["onnxruntime"]).__name__ == "module"
