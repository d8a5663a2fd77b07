"""Reading, checking and writing models: external data, atomic and byte-identical saves.

``load_model`` reads a model with its external data and turns every way a file can be wrong (not
there, a directory, empty, not protobuf, truncated, failing the checker, external data missing or
pointing outside the model's folder) into one :class:`~onnxsurgery.errors.ModelLoadError` line.
``save_model`` writes to a temporary file beside the target and renames it into place, so a
failed or interrupted run never leaves a file that ``make`` would take as up to date. The same
model always serializes to the same bytes.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import ExternalDataInfo, load_external_data_for_model

from onnxsurgery.errors import ModelLoadError, ModelSaveError
from onnxsurgery.model.dtypes import np_dtype
from onnxsurgery.model.walk import graphs_by_path, subgraphs

__all__ = [
    "IR_INITIALIZERS_AS_INPUTS",
    "sync_initializer_inputs",
    "ModelFile",
    "load_model",
    "read_model_file",
    "save_model",
    "check_model",
    "infer_shapes",
    "as_model",
    "tensor_bytes",
    "tensor_nbytes",
    "iter_tensors",
    "is_large",
    "LARGE_MODEL_BYTES",
    "PROTOBUF_LIMIT",
]

#: Protobuf cannot serialize a message of 2 GiB or more; such models keep weights outside.
PROTOBUF_LIMIT = 2**31 - 1
#: Tensors at least this large go to the external data file when a model is saved with one.
EXTERNAL_THRESHOLD = 1024


@dataclass
class ModelFile:
    """A model read from disk, with what the pipeline needs to write it back alike."""

    model: onnx.ModelProto
    path: Path
    external_data: bool


def iter_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Every tensor a graph holds: initializers, tensor attributes, subgraphs' tensors."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
        for sub in subgraphs(node):
            yield from iter_tensors(sub)


def _external_tensors(model: onnx.ModelProto) -> list[onnx.TensorProto]:
    return [
        t
        for t in iter_tensors(model.graph)
        if t.HasField("data_location") and t.data_location == onnx.TensorProto.EXTERNAL
    ]


def _check_external_data(model: onnx.ModelProto, path: Path) -> None:
    base = path.parent.resolve()
    for tensor in _external_tensors(model):
        info = ExternalDataInfo(tensor)
        location = info.location
        where = f"{path}: initializer {tensor.name!r} keeps its data in {location!r}"
        if not location:
            raise ModelLoadError(f"{where}, which is empty")
        if os.path.isabs(location):
            raise ModelLoadError(
                f"{where}, an absolute path; external data must sit in the model's folder {base}"
            )
        target = (base / location).resolve()
        if base not in target.parents and target != base:
            raise ModelLoadError(
                f"{where}, which points outside the model's folder {base}; "
                "move the data file beside the model"
            )
        if not target.is_file():
            raise ModelLoadError(f"{where}, which does not exist (looked for {target})")
        size = target.stat().st_size
        end = (info.offset or 0) + (info.length or 0)
        if info.length is not None and end > size:
            raise ModelLoadError(
                f"{where} at bytes {info.offset or 0}..{end}, but that file has only {size} bytes"
            )


def read_model_file(path: str | os.PathLike, *, check: bool = True) -> ModelFile:
    """Read ``path`` with its external data; every way it can be wrong is a ModelLoadError."""
    p = Path(path)
    if not p.exists():
        raise ModelLoadError(f"{p}: no such file")
    if p.is_dir():
        raise ModelLoadError(f"{p}: is a directory, expected an .onnx file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if not data:
        raise ModelLoadError(f"{p}: is empty (0 bytes), not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise ModelLoadError(
            f"{p}: not an ONNX model: protobuf parse failed ({exc}); the file is truncated, "
            "corrupted or of another format"
        ) from None
    if not model.HasField("graph") or not model.opset_import or model.ir_version <= 0:
        missing = [
            what
            for what, present in (
                ("graph", model.HasField("graph")),
                ("opset_import", bool(model.opset_import)),
                ("ir_version", model.ir_version > 0),
            )
            if not present
        ]
        raise ModelLoadError(
            f"{p}: not an ONNX model: no {', '.join(missing)} "
            f"({len(data)} bytes parsed as protobuf, but not as a model; truncated or another format)"
        )
    external = bool(_external_tensors(model))
    if external:
        _check_external_data(model, p)
        try:
            load_external_data_for_model(model, str(p.parent))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{p}: cannot load external data: {exc}") from None
    if check:
        check_model(model, where=f"{p}:", error=ModelLoadError)
    return ModelFile(model=model, path=p, external_data=external)


def load_model(path: str | os.PathLike, *, check: bool = True) -> onnx.ModelProto:
    """Load a model with its external data, checked. Raises ModelLoadError naming the problem."""
    return read_model_file(path, check=check).model


def as_model(model: onnx.ModelProto | str | os.PathLike) -> onnx.ModelProto:
    """Accept a ModelProto or a path, as the Python API does everywhere."""
    if isinstance(model, onnx.ModelProto):
        return model
    return load_model(model)


_SUB_BYTE_BITS = {
    getattr(onnx.TensorProto, name): bits
    for name, bits in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
    if hasattr(onnx.TensorProto, name)
}


def tensor_nbytes(tensor: onnx.TensorProto) -> int:
    """Bytes of a tensor's data, from its dims and type: reading ``raw_data`` would copy it."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        for entry in tensor.external_data:
            if entry.key == "length":
                return int(entry.value)
        return 0
    if tensor.data_type == onnx.TensorProto.STRING:
        return sum(len(v) for v in tensor.string_data)
    count = math.prod(tensor.dims)
    if tensor.data_type in _SUB_BYTE_BITS:
        return (count * _SUB_BYTE_BITS[tensor.data_type] + 7) // 8
    try:
        itemsize = np_dtype(tensor.data_type).itemsize
    except (KeyError, TypeError, ValueError):
        itemsize = 1
    return count * itemsize


def tensor_bytes(model: onnx.ModelProto) -> int:
    """Bytes held by the model's tensors (initializers, Constant attributes, subgraphs), counted
    from dims and types, so that no tensor's data is copied to count it."""
    return sum(tensor_nbytes(t) for t in iter_tensors(model.graph))


#: Models whose tensors reach this go by path with external data (protobuf stops at 2 GiB).
LARGE_MODEL_BYTES = PROTOBUF_LIMIT - 64 * 2**20


def is_large(model: onnx.ModelProto) -> bool:
    """Too big to pass through protobuf in one message (goes by path with external data)."""
    return tensor_bytes(model) >= LARGE_MODEL_BYTES


#: Below this IR version every initializer must also be listed as a graph input.
IR_INITIALIZERS_AS_INPUTS = 4


def sync_initializer_inputs(model: onnx.ModelProto) -> list[str]:
    """For IR < 4, list every initializer (main graph and subgraphs) as a graph input again.

    Tools that treat initializers as constants (onnx-graphsurgeon, onnxsim) drop them from the
    inputs, which IR 3's checker refuses. The input takes the initializer's dtype and dims.
    Returns the names added; does nothing for IR >= 4.
    """
    if model.ir_version >= IR_INITIALIZERS_AS_INPUTS:
        return []
    added = []
    for graph in graphs_by_path(model.graph).values():
        listed = {i.name for i in graph.input}
        for init in graph.initializer:
            if init.name not in listed:
                graph.input.append(
                    onnx.helper.make_tensor_value_info(init.name, init.data_type, init.dims)
                )
                listed.add(init.name)
                added.append(init.name)
    return added


def check_model(
    model: onnx.ModelProto, *, where: str = "model", error: type[Exception] = ModelLoadError
) -> None:
    """Run ``onnx.checker`` (by path for models over 2 GB); failures raise ``error``."""
    try:
        if is_large(model):
            with tempfile.TemporaryDirectory(prefix="onnxsurgery-check-") as tmp:
                tmp_path = Path(tmp) / "model.onnx"
                _write(model, tmp_path, external_data=True)
                onnx.checker.check_model(str(tmp_path))
        else:
            onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        text = " ".join(line.strip() for line in str(exc).strip().splitlines() if line.strip())
        first = (text[:300] + " ...") if len(text) > 300 else (text or type(exc).__name__)
        raise error(f"{where} fails the ONNX checker: {first}") from None


def infer_shapes(model: onnx.ModelProto, *, data_prop: bool = True) -> onnx.ModelProto:
    """ONNX shape inference (strict), by path for models over 2 GB. Returns a new model."""
    if not is_large(model):
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=data_prop)
    with tempfile.TemporaryDirectory(prefix="onnxsurgery-infer-") as tmp:
        src, dst = Path(tmp) / "in.onnx", Path(tmp) / "out.onnx"
        _write(model, src, external_data=True)
        onnx.shape_inference.infer_shapes_path(str(src), str(dst), strict_mode=True, data_prop=data_prop)
        inferred = onnx.load(str(dst), load_external_data=False)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    del result.graph.value_info[:]
    result.graph.value_info.extend(inferred.graph.value_info)
    del result.graph.output[:]
    result.graph.output.extend(inferred.graph.output)
    return result


def _serialize(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def _write(model: onnx.ModelProto, path: Path, *, external_data: bool) -> None:
    """Write model (and its data file) at ``path`` directly; callers make it atomic."""
    if not external_data:
        path.write_bytes(_serialize(model))
        return
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    # Externalised tensors are written in graph order to one file named after the model.
    onnx.external_data_helper.convert_model_to_external_data(
        copy,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=EXTERNAL_THRESHOLD,
        convert_attribute=False,
    )
    data_path = path.parent / (path.name + ".data")
    if data_path.exists():
        data_path.unlink()
    onnx.external_data_helper.write_external_data_tensors(copy, str(path.parent))
    path.write_bytes(_serialize(copy))


def save_model(
    model: onnx.ModelProto,
    path: str | os.PathLike,
    *,
    external_data: bool | None = None,
) -> Path:
    """Write ``model`` to ``path`` atomically; returns the path.

    ``external_data``: ``True`` writes weights to ``<name>.data`` beside the model, ``False``
    keeps them inside, ``None`` (default) does so only when the model is over 2 GB. The file
    appears at ``path`` only once it is complete; nothing is left behind when writing fails.
    """
    target = Path(path)
    if target.is_dir():
        raise ModelSaveError(f"{target}: is a directory; give a file name for the output model")
    if not target.parent.exists():
        raise ModelSaveError(f"{target}: folder {target.parent} does not exist")
    use_external = is_large(model) if external_data is None else external_data
    if is_large(model) and not use_external:
        raise ModelSaveError(f"{target}: model is over 2 GB and must be saved with external data")
    tmp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        staged = tmp_dir / target.name
        _write(model, staged, external_data=use_external)
        if use_external:
            os.replace(tmp_dir / (target.name + ".data"), target.parent / (target.name + ".data"))
        with open(staged, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(staged, target)
    except OSError as exc:
        raise ModelSaveError(f"{target}: cannot write: {exc.strerror or exc}") from None
    finally:
        for leftover in tmp_dir.glob("*"):
            leftover.unlink(missing_ok=True)
        tmp_dir.rmdir()
    return target
