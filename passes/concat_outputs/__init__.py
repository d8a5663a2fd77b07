"""Concatenate a model's outputs into one output, in the graph, recording how to undo it."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import onnx
from onnxsurgery.passes.concat_outputs.graph import add_merged_output

from onnxsurgery.errors import UsageError
from onnxsurgery.merged_outputs import (
    METADATA_KEY,
    Layout,
    PartDim,
    PartLayout,
    concat_references,
    has_unknown,
    render_dim,
    show_symbol,
)
from onnxsurgery.model.dtypes import dtype_name, is_lossless_cast, np_dtype, parse_dtype
from onnxsurgery.model.io import infer_shapes
from onnxsurgery.model.walk import all_names, default_opset
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult
from onnxsurgery.shapes.dims import Dim

__all__ = ["ConcatOutputs"]

_GENERATED = re.compile(r"unk__\d+")


class ConcatOutputs(Pass):
    """Merge the model's outputs into one tensor (Concat in the graph); split_outputs undoes it.

    Rules:
    - ``outputs=[a, b]`` picks the outputs (default: all, in graph order); fewer than two is
      nothing to do. The merged output takes the place of the first one; the merged ones leave
      the outputs unless ``keep=true``. ``name`` (default ``merged``) must be a new tensor name.
    - Every part is cast to ``dtype=`` when given (outputs of different dtypes need it; a cast
      that loses information, such as int64 to float32 or float to int, also needs
      ``lossy=true``), reshaped to rank N+1 keeping its first N axes with ``flatten=N``, and
      unsqueezed at the end up to the largest rank. ``axis`` (default: the last; negative counts
      from the end) is the concat axis in that rank.
    - The other dims must agree: ``batch`` with ``batch``, 5 with 5; ``batch`` vs ``seq`` or 5 vs
      4 is an error naming both outputs, the axis and both dims, unless ``pad=VALUE`` pads every
      part at the end up to the largest (amounts computed in the graph when dims are symbolic).
      An unknown dim is allowed; ONNX Runtime's Concat checks it when the model runs.
    - The layout (parts, dtypes, dims, start/stop on the axis) goes to metadata_props
      ``onnxsurgery.concat-outputs``; ``onnxsurgery.split_outputs`` gives the outputs back.
      When the merged shape alone cannot tell the parts' sizes, an int64 output
      ``<name>_shapes`` holding them is added. A model merged already is left as it is when
      nothing else is asked, and is an error when more outputs would be merged.

        logits [B,5] ─┐                   logits ─────────────────────┐
        score  [B]   ─┼─ (3 outputs)  =>  score ── Unsqueeze ─────────┼─ Concat(axis=1) ─ merged [B,7]
        pred   [B] i64┘                   pred ─── Cast ── Unsqueeze ─┘
    """

    name = "concat-outputs"

    def __init__(
        self,
        *,
        outputs: list[str] | None = None,
        axis: int | None = None,
        name: str = "merged",
        keep: bool = False,
        flatten: int | None = None,
        dtype: str | None = None,
        pad: float | None = None,
        lossy: bool = False,
    ) -> None:
        super().__init__(
            outputs=outputs, axis=axis, name=name, keep=keep, flatten=flatten, dtype=dtype,
            pad=pad, lossy=lossy,
        )  # fmt: skip
        if isinstance(outputs, (str, int)) and not isinstance(outputs, bool):
            outputs = [outputs]
        if outputs is not None:
            if not isinstance(outputs, (list, tuple)):
                raise TypeError(f"outputs must be a list of output names, got {outputs!r}")
            if not outputs:
                raise ValueError("outputs=[] names no output; leave it out to merge all outputs")
            bad = [o for o in outputs if isinstance(o, bool) or not isinstance(o, (str, int))]
            if bad or any(str(o) == "" for o in outputs):
                raise TypeError(f"outputs must be output names, got {list(outputs)!r}")
            outputs = [str(o) for o in outputs]  # a numeric name such as 19 parses as an int
        if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
            raise TypeError(f"axis must be an integer, got {axis!r}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty tensor name, got {name!r}")
        for flag, value in (("keep", keep), ("lossy", lossy)):
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be true or false, got {value!r}")
        if flatten is not None and (isinstance(flatten, bool) or not isinstance(flatten, int)):
            raise TypeError(f"flatten must be a non-negative integer, got {flatten!r}")
        if flatten is not None and flatten < 0:
            raise ValueError(f"flatten must be >= 0 (the number of leading axes kept), got {flatten}")
        self.elem_type = None if dtype is None else parse_dtype(dtype)
        if self.elem_type == onnx.TensorProto.STRING:
            raise ValueError("dtype=string: strings cannot be concatenated with numbers")
        if pad is not None and (isinstance(pad, bool) or not isinstance(pad, (int, float))):
            raise TypeError(f"pad must be a number (the padding value), got {pad!r}")
        self.outputs = outputs
        self.axis = axis
        self.merged_name = name
        self.keep = keep
        self.flatten = flatten
        self.pad = pad
        self.lossy = lossy

    # ------------------------------------------------------------------------------------------
    def run(self, model: onnx.ModelProto, ctx: PassContext) -> PassResult:
        diagnostics: list[Diagnostic] = []
        try:
            typed = infer_shapes(model, data_prop=True)
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
            first = str(exc).strip().splitlines()[0]
            diagnostics.append(Diagnostic.warning(f"shape inference failed ({first}); using the declared output types"))
            typed = model
        declared = [o.name for o in model.graph.output]
        types = {o.name: o for o in typed.graph.output}

        existing = next((p.value for p in model.metadata_props if p.key == METADATA_KEY), None)
        if existing is not None:
            try:
                previous = Layout.from_json(existing)
            except UsageError as exc:
                self.fail(f"the model's {METADATA_KEY!r} metadata cannot be read ({exc}); remove it")
            return self._merged_already(model, previous, declared)

        chosen = self.outputs if self.outputs is not None else declared
        unknown = [n for n in chosen if n not in types]
        if unknown:
            self.fail(
                f"no output named {', '.join(map(repr, unknown))}; the model's outputs are "
                f"{', '.join(map(repr, declared)) or 'none'}"
            )
        if len(chosen) < 2:
            what = f"one output ({chosen[0]!r})" if chosen else "no outputs"
            diagnostics.append(Diagnostic.warning(f"{what} selected: nothing to merge, model unchanged"))
            return PassResult(model, modified=False, diagnostics=diagnostics)
        twice = sorted({n for n in chosen if chosen.count(n) > 1})
        if twice:
            diagnostics.append(Diagnostic.warning(
                f"{', '.join(map(repr, twice))} listed more than once: each copy is a part of "
                f"{self.merged_name!r}; split_outputs gives it back once"
            ))  # fmt: skip

        layout, notes = self._plan(model, [types[n] for n in chosen])
        diagnostics.extend(notes)
        taken = all_names(model.graph)
        for new in filter(None, (layout.name, layout.shapes)):
            if new in taken:
                self.fail(
                    f"name={new!r}: the model already has a tensor or node named {new!r}; "
                    "choose another name="
                )
        out = onnx.ModelProto()
        out.CopyFrom(model)
        add_merged_output(out, layout, taken, {o.name: o for o in model.graph.output})
        out.metadata_props.add(key=METADATA_KEY, value=layout.to_json())
        diagnostics.insert(0, Diagnostic.info(_summary(layout)))
        return PassResult(
            out,
            modified=True,
            diagnostics=diagnostics,
            output_map=functools.partial(concat_references, layout),
        )

    def _merged_already(self, model: onnx.ModelProto, layout: Layout, declared: list[str]) -> PassResult:
        """A second run: nothing to do when only the merged (or kept) outputs are asked for."""
        ours = {layout.name, layout.shapes} | (set(layout.part_names) if layout.keep else set())
        asked = self.outputs if self.outputs is not None else declared
        extra = [n for n in asked if n not in ours]
        if extra:
            self.fail(
                f"the model was merged by concat-outputs already (output {layout.name!r}, metadata "
                f"{METADATA_KEY!r}); merging {', '.join(map(repr, extra))} as well would need a "
                "second layout: merge all outputs in one concat-outputs pass instead"
            )
        note = f"outputs already merged into {layout.name!r} by concat-outputs: model unchanged"
        return PassResult(model, modified=False, diagnostics=[Diagnostic.info(note)])

    # -- planning: every check happens here, before the graph is touched ----------------------------
    def _plan(
        self, model: onnx.ModelProto, infos: Sequence[onnx.ValueInfoProto]
    ) -> tuple[Layout, list[Diagnostic]]:
        notes: list[Diagnostic] = []
        names = [i.name for i in infos]
        types, dims = [], []
        ours = _dim_params(model.graph)
        for info in infos:
            elem, shape = _tensor_type(info, self.fail)
            types.append(elem)
            # ONNX shape inference names dims it cannot tell unk__N: they are unknown to us
            dims.append([None if isinstance(d, str) and _GENERATED.fullmatch(d) and d not in ours else d
                         for d in shape])  # fmt: skip
        if default_opset(model) < 11:
            self.fail(f"the model imports opset {default_opset(model)}; concat-outputs needs opset >= 11")
        target = self.elem_type
        if target is None:
            first = next((i for i, t in enumerate(types) if t != types[0]), None)
            if first is not None:
                self.fail(
                    f"outputs {names[0]!r} ({dtype_name(types[0])}) and {names[first]!r} "
                    f"({dtype_name(types[first])}) have different dtypes; pass dtype= (e.g. "
                    f"dtype={dtype_name(types[0])}) to cast every part to one type"
                )
            target = types[0]
        lossy = False
        for n, t in zip(names, types, strict=True):
            if t != target and onnx.TensorProto.STRING in (t, target):
                self.fail(f"output {n!r} is {dtype_name(t)}: strings and numbers cannot be cast to one type")
            if is_lossless_cast(t, target):
                continue
            if not self.lossy:
                self.fail(
                    f"casting output {n!r} from {dtype_name(t)} to {dtype_name(target)} loses "
                    f"information; pass lossy=true to allow it, or a dtype that holds {dtype_name(t)}"
                )
            lossy = True
            notes.append(Diagnostic.warning(
                f"cast {n!r} {dtype_name(t)} -> {dtype_name(target)} loses information "
                "(lossy=true): split_outputs is exact only for values the merged type holds"
            ))  # fmt: skip
        if self.flatten is not None:
            for n, d in zip(names, dims, strict=True):
                if len(d) < self.flatten:
                    self.fail(
                        f"flatten={self.flatten} keeps {self.flatten} leading axes, but output "
                        f"{n!r} has rank {len(d)} (dims {_show(d)})"
                    )
            rank = self.flatten + 1
        else:
            rank = max(1, *(len(d) for d in dims))
        axis = rank - 1 if self.axis is None else self.axis
        if not -rank <= axis < rank:
            self.fail(
                f"axis={self.axis} is out of range for outputs of rank {rank} after alignment "
                f"(valid: {-rank}..{rank - 1})"
            )
        axis %= rank
        parts = tuple(
            PartLayout(n, dtype_name(t), tuple(d), cast=t != target)
            for n, t, d in zip(names, types, dims, strict=True)
        )
        draft = Layout(self.merged_name, axis, rank, dtype_name(target), parts, flatten=self.flatten)
        padded = []
        for j in range(rank):
            if j == axis:
                continue
            column = [draft.aligned(i)[j] for i in range(len(parts))]
            known = list(dict.fromkeys(c for c in column if not has_unknown(c)))
            if len(known) > 1:
                if self.pad is None:
                    i1, i2 = column.index(known[0]), column.index(known[1])
                    self.fail(
                        f"outputs {names[i1]!r} and {names[i2]!r} differ in dim {j} "
                        f"({render_dim(known[0])} vs {render_dim(known[1])}; shapes after alignment "
                        f"{_show(draft.aligned(i1))} and {_show(draft.aligned(i2))}), so they "
                        f"cannot be concatenated on axis {axis}; pass pad=VALUE to pad to the "
                        "largest, flatten=N, another axis=, or fewer outputs="
                    )
                padded.append(j)
            elif len(known) < len(set(column)):
                if self.pad is not None:
                    padded.append(j)
                else:
                    notes.append(Diagnostic.warning(
                        f"dim {j} is unknown for some outputs ({_show(column)}): ONNX Runtime's "
                        "Concat checks at run time that it agrees"
                    ))  # fmt: skip
        if padded:
            self._check_pad_value(target)
            if not all(draft.aligned(i)[j].is_const() for i in range(len(parts)) for j in padded):
                if default_opset(model) < 12:
                    self.fail("pad= with symbolic dims needs opset >= 12 (Max on int64)")
        bounds = draft.bounds()
        parts = tuple(
            replace(p, start=render_dim(b[0]), stop=render_dim(b[1]))
            for p, b in zip(parts, bounds, strict=True)
        )
        layout = Layout(
            self.merged_name, axis, rank, dtype_name(target), parts, keep=self.keep,
            flatten=self.flatten, pad=self.pad, padded_axes=tuple(padded), lossy=lossy,
        )  # fmt: skip
        unresolved = layout.unresolved()
        if unresolved:
            layout = replace(layout, shapes=f"{self.merged_name}_shapes")
            notes.append(Diagnostic.info(
                f"added output {layout.shapes!r} (int64, the parts' shapes): the merged shape "
                f"alone does not tell {', '.join(sorted(show_symbol(s) for s in unresolved))}"
            ))  # fmt: skip
        layout.check()
        return layout, notes

    def _check_pad_value(self, target: int) -> None:
        value, dt = self.pad, np_dtype(target)
        assert value is not None
        if target == onnx.TensorProto.STRING:
            self.fail(f"pad={value!r}: string outputs cannot be padded")
        if dt.kind in "iub":
            ok = float(value).is_integer() and (
                value in (0, 1) if dt.kind == "b" else np.iinfo(dt).min <= value <= np.iinfo(dt).max
            )
        else:
            with np.errstate(all="ignore"):
                back = float(np.asarray(value, dtype=np.float64).astype(dt).astype(np.float64))
            ok = math.isnan(value) or back == value
        if not ok:
            self.fail(f"pad={value!r} cannot be held exactly by the merged dtype {dtype_name(target)}")


# -- reading types --------------------------------------------------------------------------------
def _tensor_type(info: onnx.ValueInfoProto, fail) -> tuple[int, list[PartDim]]:
    if not info.type.HasField("tensor_type"):
        kind = info.type.WhichOneof("value") or "untyped"
        fail(f"output {info.name!r} is a {kind.replace('_type', '')}, not a tensor; only tensors can be merged")
    tt = info.type.tensor_type
    if tt.elem_type == onnx.TensorProto.UNDEFINED:
        fail(f"output {info.name!r} has no known element type; run infer-shapes first")
    if not tt.HasField("shape"):
        fail(
            f"output {info.name!r} has unknown rank even after shape inference; concat-outputs "
            "needs every output's rank"
        )
    dims: list[PartDim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tt.elem_type, dims


def _show(dims: Sequence[PartDim | Dim]) -> str:
    shown = [render_dim(d) if isinstance(d, Dim) else ("?" if d is None else d) for d in dims]
    return "[" + ", ".join(map(str, shown)) + "]"


def _dim_params(graph: onnx.GraphProto) -> set[str]:
    """The dim_params the model itself declares (inputs, outputs, value_info)."""
    values = [*graph.input, *graph.output, *graph.value_info]
    return {
        d.dim_param
        for v in values
        if v.type.HasField("tensor_type")
        for d in v.type.tensor_type.shape.dim
        if d.HasField("dim_param")
    }


def _summary(layout: Layout) -> str:
    where = ", ".join(f"{p.name} {_show(list(p.dims))} at {p.start}..{p.stop}" for p in layout.parts)
    shape = _show(layout.merged_dims())
    return f"merged {len(layout.parts)} outputs into {layout.name!r} {shape} on axis {layout.axis}: {where}"
