"""Concatenate a model's outputs into one output, in the graph, recording how to undo it.

    plan.py   read each output's type and check everything: the Layout, before the graph is touched
    graph.py  emit the nodes that pack each output into the merged one

The layout record itself (metadata, ``split_outputs``) is in the engine,
:mod:`onnxsurgery.merged_outputs`, so users undo a merge without importing the pass.

Rules:
- ``outputs=[a, b]`` picks the outputs (default: all, in graph order); fewer than two is nothing
  to do. The merged output takes the place of the first one; the merged ones leave the outputs
  unless ``keep=true``. ``name`` (default ``merged``) must be a new tensor name.
- Every part is cast to ``dtype=`` when given (outputs of different dtypes need it; a cast that
  loses information, such as int64 to float32 or float to int, also needs ``lossy=true``),
  reshaped to rank N+1 keeping its first N axes with ``flatten=N``, and unsqueezed at the end up
  to the largest rank. ``axis`` (default: the last; negative counts from the end) is the concat
  axis in that rank.
- The other dims must agree: ``batch`` with ``batch``, 5 with 5; ``batch`` vs ``seq`` or 5 vs 4
  is an error naming both outputs, the axis and both dims, unless ``pad=VALUE`` pads every part
  at the end up to the largest (amounts computed in the graph when dims are symbolic). An
  unknown dim is allowed; ONNX Runtime's Concat checks it when the model runs.
- The layout (parts, dtypes, dims, start/stop on the axis) goes to metadata_props
  ``onnxsurgery.concat-outputs``; ``onnxsurgery.split_outputs`` gives the outputs back. When the
  merged shape alone cannot tell the parts' sizes, an int64 output ``<name>_shapes`` holding them
  is added. A model merged already is left as it is when nothing else is asked, and is an error
  when more outputs would be merged.

    logits [B,5] ─┐                   logits ─────────────────────┐
    score  [B]   ─┼─ (3 outputs)  =>  score ── Unsqueeze ─────────┼─ Concat(axis=1) ─ merged [B,7]
    pred   [B] i64┘                   pred ─── Cast ── Unsqueeze ─┘
"""

from __future__ import annotations

import functools

import onnx

from onnxsurgery.errors import UsageError
from onnxsurgery.merged_outputs import METADATA_KEY, Layout, concat_references
from onnxsurgery.model.dtypes import parse_dtype
from onnxsurgery.model.io import infer_shapes
from onnxsurgery.model.walk import all_names
from onnxsurgery.passes.concat_outputs.graph import add_merged_output
from onnxsurgery.passes.concat_outputs.plan import LayoutOptions, plan_layout, show_dims
from onnxsurgery.pipeline.contract import Diagnostic, Pass, PassContext, PassResult

__all__ = ["ConcatOutputs"]



class ConcatOutputs(Pass):
    """Merge the model's outputs into one tensor (Concat in the graph); split_outputs undoes it.

    Each part is cast, flattened and unsqueezed as asked to a common rank and concatenated along
    one axis, in the graph; the other dims must agree unless ``pad`` is given. The layout goes to
    the model's metadata_props (``onnxsurgery.concat-outputs``), and reference outputs are mapped
    the same way, so validation after the pass compares like with like.

    Options:
        outputs (list of names, default: all, in graph order): The outputs to merge.
        axis (int, default: the last): The concat axis, in the rank of the largest part.
        name (str): Name of the merged output; must be a new tensor name.
        keep (bool): Keep the merged outputs as outputs too.
        flatten (int, default: no flattening): Reshape each part to its first N axes plus one.
        dtype (str, default: no cast): Cast every part to this type (float32, int64, ...).
        pad (float, default: no padding): Pad parts at the end up to the largest with this value.
        lossy (bool): Allow a cast that loses information (int64 to float32, float to int).

    Example:
        concat-outputs(axis=1)
        concat-outputs(outputs=[logits, score], dtype=float32, keep=true)
    """

    name = "concat-outputs"
    weights_on_disk = True

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
        types = _typed_outputs(model, diagnostics)
        declared = [o.name for o in model.graph.output]

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

        options = LayoutOptions(
            name=self.merged_name, axis=self.axis, flatten=self.flatten, elem_type=self.elem_type,
            lossy=self.lossy, pad=self.pad, keep=self.keep,
        )  # fmt: skip
        layout, notes = plan_layout(model, [types[n] for n in chosen], options, self.fail)
        diagnostics.extend(notes)
        taken = all_names(model.graph)
        self._check_new_names(layout, taken)
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

    def _check_new_names(self, layout: Layout, taken: set[str]) -> None:
        """Refuse a merged (or shapes) output name the model uses already."""
        for new in filter(None, (layout.name, layout.shapes)):
            if new in taken:
                self.fail(
                    f"name={new!r}: the model already has a tensor or node named {new!r}; "
                    "choose another name="
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


def _typed_outputs(model: onnx.ModelProto, diagnostics: list[Diagnostic]) -> dict[str, onnx.ValueInfoProto]:
    """The outputs' types after shape inference; the declared ones (and a warning) when it fails."""
    try:
        typed = infer_shapes(model, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        first = str(exc).strip().splitlines()[0]
        diagnostics.append(Diagnostic.warning(f"shape inference failed ({first}); using the declared output types"))
        typed = model
    return {o.name: o for o in typed.graph.output}


def _summary(layout: Layout) -> str:
    where = ", ".join(f"{p.name} {show_dims(list(p.dims))} at {p.start}..{p.stop}" for p in layout.parts)
    shape = show_dims(layout.merged_dims())
    return f"merged {len(layout.parts)} outputs into {layout.name!r} {shape} on axis {layout.axis}: {where}"
