"""symbolize on real architectures whose weights stay on disk (tests/corpus/).

Each static export of the corpus, as exported (weights inline) and saved with its weights in an
external data file, goes through ``run`` twice: from the file (the pipeline leaves the large
weights in the file; ORT reads them from there, the save copies them) and as a model loaded
whole by ``onnx.load``. The oracle is the
second, the path every release so far has taken: the written files must be byte-identical, or
both runs must refuse with the same message. ``make test`` runs the smoke architectures at their
first traced batch; ``-m corpus`` runs every architecture and batch.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

pytest.importorskip("transformers")

from corpus.architectures import ARCHITECTURES  # noqa: E402
from corpus.harness import EXPORTERS, export_model  # noqa: E402

from onnxsurgery.errors import OnnxSurgeryError  # noqa: E402
from onnxsurgery.model.io import save_model  # noqa: E402
from onnxsurgery.passes.symbolize import Symbolize  # noqa: E402
from onnxsurgery.pipeline import Pipeline  # noqa: E402

pytestmark = pytest.mark.corpus

#: As in test_corpus.py: the architectures every ``make test`` runs.
SMOKE = {"roberta", "llama", "whisper_encoder", "vit"}


def _cases() -> list:
    params = []
    for name, arch in ARCHITECTURES.items():
        for exporter in EXPORTERS:
            for k, traced in enumerate(arch.traced):
                marks = [pytest.mark.smoke] if name in SMOKE and k == 0 else []
                params.append(
                    pytest.param(name, exporter, traced, marks=marks, id=f"{name}-{exporter}-{traced['batch']}")
                )
    return params


@pytest.mark.parametrize("stored", ["external", "inline"])
@pytest.mark.parametrize(("name", "exporter", "traced"), _cases())
def test_symbolize_with_weights_on_disk_writes_what_it_writes_with_them_in_memory(
    name, exporter, traced, stored, tmp_path
):
    arch = ARCHITECTURES[name]
    exported = export_model(arch, exporter, traced)
    if not exported.ok:
        pytest.skip(f"{exporter} cannot export {name}: {exported.error}")
    source = tmp_path / "in" / "model.onnx"
    source.parent.mkdir()
    external = stored == "external"
    if external:
        onnx.save(
            onnx.load(str(exported.path)),
            str(source),
            save_as_external_data=True,
            location="model.onnx.data",
            size_threshold=1024,
        )
    else:  # as the exporter wrote it
        shutil.copyfile(exported.path, source)
    pipeline = Pipeline([Symbolize(dynamic_axes=arch.dynamic_axes_for("all"))])
    memory, disk = tmp_path / "memory" / "m.onnx", tmp_path / "disk" / "m.onnx"
    memory.parent.mkdir()
    disk.parent.mkdir()
    try:
        report = pipeline.run(onnx.load(str(source)))
        save_model(report.model, memory, external_data=external)
        said_memory = "ok"
    except OnnxSurgeryError as exc:
        said_memory = f"{type(exc).__name__}: {exc}".replace("model:", f"{source}:")
    try:
        pipeline.run(source, disk)
        said_disk = "ok"
    except OnnxSurgeryError as exc:
        said_disk = f"{type(exc).__name__}: {exc}"
    assert said_disk == said_memory
    if said_disk == "ok":
        assert disk.read_bytes() == memory.read_bytes()
        assert Path(f"{disk}.data").exists() == external
        if external:
            assert Path(f"{disk}.data").read_bytes() == Path(f"{memory}.data").read_bytes()
    else:
        assert not disk.exists()
