"""Make a model loadable by the installed ONNX Runtime: lower its IR version, convert its opset.

Rules:
- ORT's limits are asked of onnxruntime itself (one probe per process): the newest IR version
  and ai.onnx opset it loads;
- an IR version above ORT's is lowered to ORT's when nothing in the model needs the newer one
  (element types such as FLOAT6E2M3 or INT4, optional/sparse types, local functions, metadata on
  nodes, ...); otherwise the pass fails naming each thing that needs it;
- an opset above ORT's is converted down to ORT's with ``onnx.version_converter``;
- while ORT has no kernel for an op at the model's opset (``BatchNormalization(6)``,
  ``Gemm(6)``, ``AveragePool(1)``: ORT dropped opsets below 7), the model is converted with
  ``onnx.version_converter`` to the lowest opset that gives that op a newer version, until ORT
  loads it; ``opset=N`` converts to N instead;
- every change is listed. With no ``--ref``, the result is run on ORT and compared with the
  original run on ``onnx.reference`` on random inputs (symbolic dims at 1; ``check=false`` skips
  this); with ``--ref``, the run's validation after the last pass is the check.

    IR 14, opset 28 (onnx 1.23's make_model)        =>  IR 13, opset 26
    IR 3, opset 6 BatchNormalization(6) Gemm(6)     =>  IR 3, opset 7
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
from onnx import version_converter
from onnx.reference import ReferenceEvaluator

from onnxsurgery.model.io import iter_tensors
from onnxsurgery.model.signature import model_inputs
from onnxsurgery.model.walk import default_opset, graphs_by_path
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult
from onnxsurgery.validation.arrays import compare_arrays
from onnxsurgery.validation.feeds import random_inputs
from onnxsurgery.validation.runtime import (
    OrtLimits,
    ort_limits,
    quiet_stderr,
    run_model,
    session_error,
)

__all__ = ["Compat", "ir_requirements"]

#: The IR version that introduced each element type (onnx.proto's IR_VERSION comments).
_DTYPE_IR: dict[int, int] = {
    getattr(onnx.TensorProto, name): ir
    for name, ir in (
        ("BFLOAT16", 4),
        ("FLOAT8E4M3FN", 9),
        ("FLOAT8E4M3FNUZ", 9),
        ("FLOAT8E5M2", 9),
        ("FLOAT8E5M2FNUZ", 9),
        ("UINT4", 10),
        ("INT4", 10),
        ("FLOAT4E2M1", 11),
        ("FLOAT8E8M0", 12),
        ("UINT2", 13),
        ("INT2", 13),
        ("FLOAT6E2M3", 14),
        ("FLOAT6E3M2", 14),
    )
    if hasattr(onnx.TensorProto, name)
}
#: Integer attributes that name an element type (Cast's ``to``, RandomNormal's ``dtype``, ...).
_DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype"})
_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\)")
#: Opset conversions tried before giving up (each one moves at least one op to a newer version).
_MAX_CONVERSIONS = 16


def _type_requirements(tp: onnx.TypeProto, where: str) -> list[tuple[int, str]]:
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(tp, kind).elem_type
        found = [(_DTYPE_IR[elem], f"{where} is {onnx.TensorProto.DataType.Name(elem)}")] if elem in _DTYPE_IR else []
        if kind == "sparse_tensor_type":
            found.append((8, f"{where} is a sparse tensor type"))
        return found
    if kind == "sequence_type":
        return _type_requirements(tp.sequence_type.elem_type, where)
    if kind == "optional_type":
        return [(8, f"{where} is an optional type"), *_type_requirements(tp.optional_type.elem_type, where)]
    if kind == "map_type":
        return _type_requirements(tp.map_type.value_type, where)
    return []


def ir_requirements(model: onnx.ModelProto) -> list[tuple[int, str]]:
    """``(IR version, what needs it)`` for every feature of ``model`` newer than IR 3 that this
    pass knows of: element types, optional and sparse types, sparse initializers, training info,
    local functions (and their attributes and overloads), metadata on graphs and nodes, and
    multi-device configuration."""
    needs: list[tuple[int, str]] = []
    for tensor in iter_tensors(model.graph):
        if tensor.data_type in _DTYPE_IR:
            type_name = onnx.TensorProto.DataType.Name(tensor.data_type)
            needs.append((_DTYPE_IR[tensor.data_type], f"tensor {tensor.name!r} is {type_name}"))
    for path, graph in graphs_by_path(model.graph).items():
        label = f"graph {path!r}" if path else "the main graph"
        for vi in (*graph.input, *graph.output, *graph.value_info):
            needs.extend(_type_requirements(vi.type, f"{vi.name!r}"))
        if graph.sparse_initializer:
            needs.append((6, f"{label} has sparse initializers"))
        if len(graph.metadata_props):
            needs.append((10, f"{label} has metadata_props"))
        for node in graph.node:
            who = f"node {node.name or node.output[0]!r} ({node.op_type})"
            if len(node.metadata_props):
                needs.append((10, f"{who} has metadata_props"))
            for attr in node.attribute:
                if attr.name in _DTYPE_ATTRS and attr.type == onnx.AttributeProto.INT:
                    if attr.i in _DTYPE_IR:
                        type_name = onnx.TensorProto.DataType.Name(attr.i)
                        needs.append((_DTYPE_IR[attr.i], f"{who} makes {type_name}"))
    if model.training_info:
        needs.append((7, "the model has training_info"))
    for function in model.functions:
        needs.append((8, f"the model defines local function {function.name!r}"))
        if function.attribute_proto:
            needs.append((9, f"local function {function.name!r} has attribute defaults"))
        if function.overload:
            needs.append((10, f"local function {function.name!r} has an overload"))
    if len(getattr(model, "configuration", ())):
        needs.append((11, "the model has a multi-device configuration"))
    return needs


def _next_opset(op: str, since: int, current: int, limit: int) -> int | None:
    """The lowest opset above ``current`` (up to ``limit``) where ``op`` is newer than ``since``."""
    for target in range(current + 1, limit + 1):
        try:
            schema = onnx.defs.get_schema(op, target, "")
        except onnx.defs.SchemaError:
            return None
        if schema.since_version > since:
            return target
    return None


def _channel_slopes(model: onnx.ModelProto) -> onnx.ModelProto:
    """PRelu(6) applies a slope of C values along axis 1; PRelu(7) broadcasts numpy-style from
    the last axis, and onnx.version_converter leaves the slope as it is. Reshape each such slope
    initializer to ``[C, 1, ..., 1]`` so PRelu(7) computes what PRelu(6) did."""
    inferred = onnx.shape_inference.infer_shapes(model)
    ranks = {
        vi.name: len(vi.type.tensor_type.shape.dim)
        for vi in (*inferred.graph.input, *inferred.graph.value_info)
        if vi.type.tensor_type.HasField("shape")
    }
    inits = {t.name: t for t in model.graph.initializer}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out_inits = {t.name: t for t in out.graph.initializer}
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    for node in model.graph.node:
        if node.op_type != "PRelu" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            continue
        slope = inits.get(node.input[1])
        rank = ranks.get(node.input[0])
        if slope is None or rank is None or rank < 3 or len(slope.dims) != 1 or slope.dims[0] == 1:
            continue
        if readers.get(slope.name, 0) != 1:
            continue  # shared with another node: leave it rather than change that node too
        target = out_inits[slope.name]
        del target.dims[:]
        target.dims.extend([slope.dims[0]] + [1] * (rank - 2))
        for vi in out.graph.input:  # IR < 4 lists the slope as an input too
            if vi.name == slope.name and vi.type.tensor_type.HasField("shape"):
                shape = vi.type.tensor_type.shape
                del shape.dim[:]
                for d in target.dims:
                    shape.dim.add().dim_value = d
    return out


class Compat(Pass):
    """Make the model load on the installed ONNX Runtime: lower its IR version, convert its opset.

    An IR version newer than ONNX Runtime takes is lowered when nothing in the model needs it
    (else the pass names what does); the opset is converted with ``onnx.version_converter`` when
    it is newer than ONNX Runtime's or ONNX Runtime has no kernel for an op at it. Every change
    is listed and the result is checked against the original.

    Options:
        opset (int, default: the lowest that loads): Convert the ai.onnx opset to this version.
        check (bool): Without --ref, compare the result on ONNX Runtime with the original on
            ``onnx.reference`` on random inputs.

    Example:
        compat(opset=17)
    """

    name = "compat"

    def __init__(self, *, opset: int | None = None, check: bool = True) -> None:
        super().__init__(opset=opset, check=check)
        if opset is not None and (isinstance(opset, bool) or not isinstance(opset, int) or opset < 1):
            raise ValueError(f"opset must be a whole number >= 1, got {opset!r}")
        if not isinstance(check, bool):
            raise ValueError(f"check must be true or false, got {check!r}")
        self.opset = opset
        self.check = check

    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        limits = ort_limits()
        runtime = f"onnxruntime {ort.__version__}"
        current = onnx.ModelProto()
        current.CopyFrom(model)
        diagnostics: list[Diagnostic] = []
        self._lower_ir(current, limits, runtime, diagnostics)
        current = self._convert_opset(current, limits, runtime, diagnostics)
        current = self._until_loadable(current, limits, runtime, diagnostics)
        if not diagnostics:
            return PassResult(
                model,
                modified=False,
                diagnostics=[Diagnostic.info(f"nothing to change: {runtime} loads the model")],
            )
        if ctx.references is not None:
            diagnostics.append(Diagnostic.info("checked against --ref after the last pass"))
        elif self.check:
            diagnostics.append(self._compare(model, current))
        return PassResult(current, modified=True, diagnostics=diagnostics)

    def _lower_ir(
        self, current: onnx.ModelProto, limits: OrtLimits, runtime: str, diagnostics: list[Diagnostic]
    ) -> None:
        """Lower an IR version newer than ONNX Runtime loads, in place, unless the model needs it."""
        if current.ir_version <= limits.ir_version:
            return
        blockers = [what for ir, what in ir_requirements(current) if ir > limits.ir_version]
        if blockers:
            self.fail(
                f"IR version {current.ir_version} cannot be lowered to {limits.ir_version} "
                f"({runtime}'s newest): {'; '.join(blockers[:8])}"
                + (f" (and {len(blockers) - 8} more)" if len(blockers) > 8 else "")
            )
        diagnostics.append(
            Diagnostic.info(
                f"IR version {current.ir_version} -> {limits.ir_version}: {runtime} loads IR "
                f"<= {limits.ir_version} and nothing in the model needs a newer one"
            )
        )
        current.ir_version = limits.ir_version

    def _convert_opset(
        self, current: onnx.ModelProto, limits: OrtLimits, runtime: str, diagnostics: list[Diagnostic]
    ) -> onnx.ModelProto:
        """Convert to the asked opset=, else down to ONNX Runtime's newest when the model's is newer."""
        opset = default_opset(current)
        if self.opset is not None and self.opset != opset:
            current = self._convert(current, self.opset, limits.ir_version)
            diagnostics.append(Diagnostic.info(f"opset {opset} -> {self.opset}: asked for"))
        elif opset > limits.opset:
            current = self._convert(current, limits.opset, limits.ir_version)
            diagnostics.append(
                Diagnostic.info(
                    f"opset {opset} -> {limits.opset}: {runtime} supports ai.onnx up to "
                    f"opset {limits.opset}"
                )
            )
        return current

    def _until_loadable(
        self, current: onnx.ModelProto, limits: OrtLimits, runtime: str, diagnostics: list[Diagnostic]
    ) -> onnx.ModelProto:
        """Raise the opset while ONNX Runtime has no kernel for an op, up to _MAX_CONVERSIONS times."""
        for attempt in range(_MAX_CONVERSIONS + 1):
            error = session_error(current)
            if error is None:
                break
            if attempt == _MAX_CONVERSIONS:
                self.fail(
                    f"{runtime} still cannot load the model after {_MAX_CONVERSIONS} "
                    f"conversions: {error}"
                )
            m = _NO_KERNEL.search(error)
            if m is None:
                self.fail(f"{runtime} still cannot load the model: {error}")
            op, since = m.group(1), int(m.group(2))
            opset = default_opset(current)
            target = _next_opset(op, since, opset, limits.opset)
            if target is None:
                self.fail(
                    f"{runtime} has no kernel for {op}({since}) and no ai.onnx opset up to "
                    f"{limits.opset} defines a newer {op}"
                )
            current = self._convert(current, target, limits.ir_version)
            diagnostics.append(
                Diagnostic.info(
                    f"opset {opset} -> {target}: {runtime} has no kernel for {op}({since})",
                    op=op,
                )
            )
        return current

    def _convert(self, model: onnx.ModelProto, target: int, max_ir: int) -> onnx.ModelProto:
        ir_version = model.ir_version
        if default_opset(model) < 7 <= target:
            model = _channel_slopes(model)
        try:
            with quiet_stderr():
                converted = version_converter.convert_version(model, target)
        except Exception as exc:  # the converter's refusals are the model's, not a bug here
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.fail(
                f"onnx.version_converter cannot convert opset {default_opset(model)} to "
                f"{target}: {first}"
            )
        # the converter may stamp its own IR version; keep the one chosen above
        converted.ir_version = min(ir_version, max_ir) if ir_version else converted.ir_version
        return converted

    def _compare(self, original: onnx.ModelProto, result: onnx.ModelProto) -> Diagnostic:
        """Compare the result on ORT with the original on onnx.reference, on random inputs."""
        specs = [s for s in model_inputs(result) if not s.optional]
        shapes = {
            s.name: [d if isinstance(d, int) else 1 for d in s.dims]
            for s in specs
            if s.dims is not None
        }
        try:
            feeds = random_inputs(specs, shapes, np.random.default_rng(0))
            with quiet_stderr():
                expected = ReferenceEvaluator(original).run(None, feeds)
        except Exception as exc:  # onnx.reference lacks an op, or inputs cannot be made up
            return Diagnostic.warning(
                f"not compared with the original: onnx.reference cannot run it on random inputs "
                f"({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}); "
                "give --ref to validate the result"
            )
        names = [o.name for o in result.graph.output]
        actual = run_model(result, feeds, "cpu", names)
        worst = []
        for name, want in zip(names, expected, strict=True):
            comparison = compare_arrays(actual[name], np.asarray(want), name=name)
            if not comparison.passed:
                worst.append(comparison.describe())
        if worst:
            self.fail(
                "the converted model differs from the original (onnx.reference) on random "
                f"inputs: {'; '.join(worst)}"
            )
        return Diagnostic.info(
            f"outputs equal the original's (onnx.reference) on random inputs, "
            f"{len(names)} output(s)"
        )
