"""Recording reference cases from torch: run a module in eager mode and store what it computed.

    record(net, {"x": x}, "refs", output_names=["logits"])          # one case, test_data_set_N
    record_model_cases(net, "model.onnx", "refs", sizes=[{"x": [2, 3, 32, 32]}])

:func:`load_module` imports the user's ``nn.Module`` from ``pkg.mod:Net`` or ``file.py:Net``
(what ``onnxsurgery reference record`` takes); :func:`import_file` imports a Python file by path.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from onnxsurgery.errors import ReferenceDataError
from onnxsurgery.model.io import as_model
from onnxsurgery.model.signature import model_inputs
from onnxsurgery.validation.feeds import random_array
from onnxsurgery.validation.references import Case, save_case

if TYPE_CHECKING:
    import torch

__all__ = ["record", "record_model_cases", "load_module", "import_file"]




def record(
    module: torch.nn.Module,
    inputs: Mapping[str, torch.Tensor | np.ndarray],
    out_dir: str | os.PathLike[str] | None,
    *,
    output_names: Sequence[str],
    index: int | None = None,
) -> Case:
    """Run ``module`` in torch eager on ``inputs`` and write the case under ``out_dir``.

    ``inputs`` are passed positionally in mapping order (graph input order) and keyed by graph
    input name. Runs under ``torch.no_grad()``; the module's train/eval mode is left as the
    caller set it (call ``module.eval()`` first for dropout and batch norm). Nested tuple/list
    outputs are flattened depth-first and named by ``output_names``. With ``out_dir=None``
    nothing is written. The returned case is named after the ``test_data_set_N`` written.
    """
    import torch

    tensors = [
        value if isinstance(value, torch.Tensor) else torch.from_numpy(np.asarray(value))
        for value in inputs.values()
    ]
    with torch.no_grad():
        result = module(*tensors)
    flat = _flatten_outputs(result)
    if len(flat) != len(output_names):
        raise ReferenceDataError(
            f"{type(module).__name__} returned {len(flat)} tensors but {len(output_names)} "
            f"output names were given ({list(output_names)})"
        )
    case = Case(
        name="recorded",
        inputs={name: _to_numpy(t) for name, t in zip(inputs, tensors, strict=True)},
        outputs={name: _to_numpy(t) for name, t in zip(output_names, flat, strict=True)},
    )
    if out_dir is not None:
        case.name = save_case(case, out_dir, index=index).name
    elif index is not None:
        case.name = f"test_data_set_{index}"
    return case


def _flatten_outputs(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _flatten_outputs(item)]
    raise ReferenceDataError(
        f"module output of type {type(value).__name__} is not a tensor or a tuple/list of tensors"
    )


def _to_numpy(tensor: Any) -> np.ndarray:
    return np.ascontiguousarray(tensor.detach().cpu().numpy())


def import_file(path: str | os.PathLike[str], name: str) -> Any:
    """Import the Python file at ``path`` as module ``name`` (once; later calls reuse it).

    The module is registered in ``sys.modules`` while it executes (dataclasses look their
    module up then) and removed again if executing it fails.
    """
    import importlib.util
    import sys

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import {path} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def load_module(spec: str) -> Any:
    """Import a torch module from ``"package.module:attr"`` or ``"path/to/file.py:attr"``.

    ``attr`` may be an ``nn.Module`` instance, an ``nn.Module`` subclass or a factory function;
    classes and factories are called with no arguments. The module is put in eval mode.
    """
    import importlib
    import importlib.util

    import torch

    source, sep, attr = spec.rpartition(":")
    if not sep or not source or not attr:
        raise ReferenceDataError(f"{spec!r}: expected MODULE:ATTR, like my_pkg.nets:make_model or nets.py:Net")
    try:
        if source.endswith(".py"):
            path = Path(source)
            if not path.is_file():
                raise ReferenceDataError(f"{spec!r}: no such file {path}")
            digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
            module = import_file(path, f"_onnxsurgery_user_{path.stem}_{digest}")
        else:
            module = importlib.import_module(source)
    except ReferenceDataError:
        raise
    except Exception as exc:
        raise ReferenceDataError(f"{spec!r}: importing {source} failed: {type(exc).__name__}: {exc}") from None
    if not hasattr(module, attr):
        raise ReferenceDataError(f"{spec!r}: {source} has no attribute {attr!r}")
    obj = getattr(module, attr)
    try:
        if isinstance(obj, torch.nn.Module):
            net = obj
        elif callable(obj):
            net = obj()
        else:
            raise TypeError(f"{attr} is a {type(obj).__name__}")
    except Exception as exc:
        raise ReferenceDataError(f"{spec!r}: cannot build the module: {type(exc).__name__}: {exc}") from None
    if not isinstance(net, torch.nn.Module):
        raise ReferenceDataError(f"{spec!r}: {attr} gave a {type(net).__name__}, not a torch.nn.Module")
    return net.eval()


def record_model_cases(
    module: Any,
    model: onnx.ModelProto | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    sizes: Sequence[Mapping[str, Sequence[int]]],
    seed: int = 0,
) -> list[Case]:
    """Record one torch eager case per entry of ``sizes`` for the exported ``model``.

    Input names and dtypes, and output names, come from the ONNX model; each entry of
    ``sizes`` gives the dims of some inputs (``{"x": [2, 3, 224, 224]}``), the others keep the
    model's declared fixed dims. Inputs are random (``numpy.random.default_rng(seed + k)``):
    floats standard normal, integers in a small non-negative range, bools.
    """
    proto = as_model(model)
    specs = [s for s in model_inputs(proto) if not s.optional]
    output_names = [o.name for o in proto.graph.output]
    cases = []
    for k, given in enumerate(sizes):
        unknown = sorted(set(given) - {s.name for s in specs})
        if unknown:
            raise ReferenceDataError(
                f"size given for {unknown}, which the model has no input named; inputs: {[s.name for s in specs]}"
            )
        rng = np.random.default_rng(seed + k)
        feeds: dict[str, np.ndarray] = {}
        for spec in specs:
            if spec.name in given:
                dims = [int(d) for d in given[spec.name]]
            elif spec.dims is not None and all(isinstance(d, int) for d in spec.dims):
                dims = list(spec.dims)
            else:
                raise ReferenceDataError(
                    f"input {spec.name!r} has dims {spec.dims}; give its size with --shape {spec.name}:DIMS"
                )
            if spec.dtype is None:
                raise ReferenceDataError(f"input {spec.name!r} is not a tensor of a known dtype")
            feeds[spec.name] = random_array(spec.dtype, dims, rng)
        cases.append(record(module, feeds, out_dir, output_names=output_names))
    return cases
