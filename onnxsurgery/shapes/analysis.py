"""What shape propagation knows about a graph: atoms, tensor infos, constraints, constant uses.

:class:`ShapeAnalysis` is the state :func:`onnxsurgery.shapes.propagation.propagate` fills in and
the per-op rules (:mod:`onnxsurgery.shapes.rules`) read and extend; the solver and symbolize's
planner only read it.
"""


from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import onnx
from onnx import numpy_helper

from onnxsurgery.model.dtypes import elem_type_of
from onnxsurgery.model.io import weightless
from onnxsurgery.model.signature import fixed_size
from onnxsurgery.model.tensors import on_disk
from onnxsurgery.model.walk import subgraphs
from onnxsurgery.model.weights_on_disk import tensor_array
from onnxsurgery.shapes.dims import Dim, as_dim

__all__ = [
    "Atom",
    "BroadcastSite",
    "TensorInfo",
    "Constraint",
    "ConstUse",
    "ShapeAnalysis",
    "MAX_VALUE_ELEMENTS",
    "INT_TYPES",
    "Constants",
    "constant_info",
    "read_constants",
    "static_shapes",
    "elem_type",
    "SENTINEL_SIZE",
    "UNSIZED",
    "UseKind",
]

AtomKind = Literal["sym", "var", "data", "derived", "opaque"]
#: How a rule reads a constant input: its elements as sizes, or its dims as data.
UseKind = Literal["size", "data"]
#: The note of an input dim declared without a size (traced at a stand-in 1).
UNSIZED = "input dim without size"
#: Stand-in traced size for a symbol whose input axis is already dynamic (matches no constant).
SENTINEL_SIZE = 1_000_003
#: Integer tensors with at most this many elements carry symbolic values (shape vectors).
MAX_VALUE_ELEMENTS = 64
INT_TYPES: set[int] = {
    onnx.TensorProto.INT64,
    onnx.TensorProto.INT32,
    onnx.TensorProto.INT16,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16,
    onnx.TensorProto.UINT32,
    onnx.TensorProto.UINT64,
}


@dataclass
class Atom:
    """One named quantity: an input-axis symbol or an unknown with its traced value.

    ``origin`` says where it comes from: for ``sym`` the list of ``(input, axis)`` it names; for
    ``var``/``data`` the :class:`ConstUse` and the element/dim index; for ``derived``/``opaque``
    the ``(tensor, axis)`` whose runtime dim it is (``None`` when no tensor holds it).
    """

    name: str
    kind: AtomKind
    traced: int
    origin: Any = None
    note: str = ""


@dataclass
class TensorInfo:
    """What propagation knows of one tensor: shape (None: unknown rank), values, element type."""

    shape: list[Dim] | None
    dtype: int = 0
    value: list[Dim] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)


#: one broadcast's output axis: (graph, node index, what it broadcasts, axis from the end)
BroadcastSite = tuple[str, int, str, int]


@dataclass
class Constraint:
    """``expr == 0`` required by ``node`` (hard) or suggested by it (soft), with the reason."""

    expr: Dim
    node: str
    op: str
    why: str
    soft: bool = False
    lhs: Dim | None = None
    rhs: Dim | None = None
    src: list[Dim] | None = None  # a Reshape alignment hint: input dims ...
    dst: list[Dim] | None = None  # ... and output dims, aligned by the solver
    when_free: bool = False  # a hint taken only if ``rhs`` resolves to symbols (no unknowns)
    broadcast: bool = False  # two dims broadcast against each other: a 1 on either side fits too


@dataclass
class ConstUse:
    """One constant read by one node input, with the unknowns created for that read.

    ``kind`` is ``"size"`` (its integer elements are unknowns: ``atoms[i]`` for element ``i``,
    ``None`` where the element is kept fixed) or ``"data"`` (its dims are unknowns).
    ``graph`` is the path of the (sub)graph holding the node (``""`` for the main graph).
    ``negated``: the elements read as minus their unknown (a Slice bound counted from the end,
    ``x[:, -8:]``: element ``-8`` is ``-atom``, the atom traced at 8).
    """

    node: str
    op: str
    node_index: int
    input_index: int
    tensor: str
    kind: UseKind
    array: np.ndarray
    atoms: list[str | None]
    graph: str = ""
    negated: frozenset[int] = frozenset()


@dataclass
class ShapeAnalysis:
    """The result of :func:`propagate`: per-tensor info, atoms, constraints, constant uses."""

    model: onnx.ModelProto
    symbols: dict[str, list[tuple[str, int]]]
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    atoms: dict[str, Atom] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    uses: list[ConstUse] = field(default_factory=list)
    notes: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, text)
    consts: MutableMapping[str, np.ndarray] = field(default_factory=dict)
    static: dict[str, list[int | None]] = field(default_factory=dict)
    producers: dict[str, tuple[int, onnx.NodeProto]] = field(default_factory=dict)
    #: the main graph's nodes that read each tensor: (node index, input index, node)
    consumers: dict[str, list[tuple[int, int, onnx.NodeProto]]] = field(default_factory=dict)
    opset: int = 17
    dynamic: set[str] = field(default_factory=set)  # symbols on axes that were already dynamic
    floors: dict[tuple[str, str, int], Dim] = field(default_factory=dict)  # shared opaque divisions
    #: every opaque or pending division by its atom: atom -> (num, den, plus), the atom being
    #: ``num // den + plus`` (a strided op's output size; what the check's sizes must respect)
    floor_parts: dict[str, tuple[Dim, Dim, int]] = field(default_factory=dict)
    #: (atom, num, den, plus): atom = num // den + plus, num or den holding unknowns
    pending_floors: list[tuple[str, Dim, Dim, int]] = field(default_factory=list)
    #: run-time integer divisions of size values (torchscript's chunk size ``(dim + 2) // 3``):
    #: opaque atom -> (num, den); judged by value once the solver has decided both
    value_divs: dict[str, tuple[Dim, Dim]] = field(default_factory=dict)
    #: run-time remainders of a size value by a positive constant (torch's pad to a block,
    #: ``(-seq) % 128``, left to run time by TorchScript): opaque atom -> (num, den), one atom
    #: per expression (two Mods of one size by one block are one value)
    value_mods: dict[str, tuple[Dim, int]] = field(default_factory=dict)
    #: run-time integer divisions of size values exact at the traced size, holding unknowns
    #: (TorchScript's block count ``padded / 128``): derived atom -> (num, den)
    exact_divs: dict[str, tuple[Dim, Dim]] = field(default_factory=dict)
    #: run-time (opaque) values a caller reads as an expression under an assumption the graph
    #: does not make (a remainder by a block within a bound on the size): the solver takes each
    #: as decided, atom -> (value, why)
    read_as: dict[str, tuple[Dim, str]] = field(default_factory=dict)
    #: data-constant dims of 1 that met a symbolic dim traced at 1 in a broadcast: one point,
    #: which cannot tell a row repeated from a table of that length (dim atom -> the dim it met)
    one_point: dict[str, Dim] = field(default_factory=dict)
    #: unknown dims a broadcast dropped, every operand traced at 1, for the unknown dim it kept
    #: (dropped atom -> kept dim): where the kept one is the constant 1, the dropped one is 1
    #: too, or the output the analysis wrote would be wrong (attention heads, 1 at the trace)
    dropped_ones: dict[str, Dim] = field(default_factory=dict)
    #: where each of those was dropped: dropped atom -> (the broadcast, the dropped operand's
    #: place in it); a broadcast is (graph, node index, what it broadcasts, output axis from the
    #: end), as :attr:`follow` names it
    dropped_at: dict[str, tuple[BroadcastSite, int]] = field(default_factory=dict)
    #: broadcasts (every operand traced at 1) whose output follows the operand at this place,
    #: not the first unknown: one a solve found the constant 1 while this one varies
    #: (:func:`~onnxsurgery.shapes.solver.misfollowed`); given to :func:`propagate`
    follow: dict[BroadcastSite, int] = field(default_factory=dict)
    #: broadcast axes whose every operand is 1 at the traced size, one at least an unknown:
    #: (node, the operands' dims, the dim the output follows); there the graph writes no
    #: equality (a 1 fits either side), yet two dims the solution makes vary must be one
    #: (:func:`~onnxsurgery.shapes.solver.unmatched_ones`)
    ones_met: list[tuple[str, list[Dim], Dim]] = field(default_factory=list)
    #: MatMuls (node index, main graph) read as B folding A's leading batch dims (traced at 1)
    #: into its first dim: index -> (how many dims A has more than B, the folded reading's
    #: constraint, the broadcast's kept aside); ``unfolded``: those read so (index -> how many)
    foldable: dict[int, tuple[int, Constraint, Constraint]] = field(default_factory=dict)
    unfolded: dict[int, int] = field(default_factory=dict)
    #: tensors some Pad's pads are computed from (:func:`~.rules.core.pads_sources`), found once
    pads_sources: frozenset[str] | None = None
    _counter: int = 0
    _use_cache: dict[tuple[int, int, str], TensorInfo] = field(default_factory=dict)

    # -- atoms -------------------------------------------------------------------------------
    def traced_values(self) -> dict[str, int]:
        return {name: a.traced for name, a in self.atoms.items()}

    def traced(self, d: Dim | int) -> int:
        d = as_dim(d)
        v = d.value
        if v is not None:
            return v
        return d.evaluate({a: self.atoms[a].traced for a in d.atoms()})

    def new_atom(self, kind: AtomKind, traced: int, origin: Any = None, note: str = "") -> Dim:
        self._counter += 1
        prefix = {"var": "$v", "data": "$d", "derived": "$q", "opaque": "$o"}[kind]
        name = f"{prefix}{self._counter}"
        self.atoms[name] = Atom(name, kind, int(traced), origin, note)
        return Dim.sym(name)

    def unknowns(self, d: Dim) -> set[str]:
        return {a for a in d.atoms() if self.atoms[a].kind in ("var", "data", "derived")}

    # -- constraints -------------------------------------------------------------------------
    def equal(
        self, a: Dim | int, b: Dim | int, node: onnx.NodeProto, why: str, broadcast: bool = False
    ) -> None:
        """Record that the structure requires ``a == b`` (``broadcast``: or that one is 1)."""
        before = len(self.constraints)
        self._constrain(a, b, node, why, soft=False)
        if broadcast and len(self.constraints) > before:
            self.constraints[-1].broadcast = True

    def suggest(
        self, a: Dim | int, b: Dim | int, node: onnx.NodeProto, why: str, when_free: bool = False
    ) -> None:
        """Record a soft equality (applied only where hard constraints leave freedom; with
        ``when_free``, only if ``b`` turns out to be made of symbols)."""
        self._constrain(a, b, node, why, soft=True)
        if when_free and self.constraints and self.constraints[-1].soft:
            self.constraints[-1].when_free = True

    def align(self, src: list[Dim], dst: list[Dim], node: onnx.NodeProto) -> None:
        """Record that a Reshape's output dims probably keep its input's leading/trailing dims."""
        self.constraints.append(
            Constraint(Dim(), node.name, node.op_type, "Reshape keeps dims", True, src=src, dst=dst)
        )

    def _constrain(self, a, b, node: onnx.NodeProto, why: str, *, soft: bool) -> None:
        expr = as_dim(a) - as_dim(b)
        if expr.value == 0:
            return
        self.constraints.append(
            Constraint(expr, node.name, node.op_type, why, soft, as_dim(a), as_dim(b))
        )

    def note(self, node: onnx.NodeProto, text: str) -> None:
        self.notes.append((node.name, node.op_type, text))

    # -- reading inputs ----------------------------------------------------------------------
    def info(self, name: str) -> TensorInfo | None:
        if not name:
            return None
        return self.tensors.get(name)

    def const(self, name: str) -> np.ndarray | None:
        return self.consts.get(name) if name else None

    def use(
        self, node_index: int, node: onnx.NodeProto, i: int, kind: UseKind, graph: str = ""
    ) -> TensorInfo | None:
        """The info of input ``i`` of ``node``, with per-use unknowns if it is a constant.

        ``kind="size"`` turns the integer elements of a small constant into ``var`` atoms
        (negative and zero elements stay fixed: they are flags, never sizes; except a Slice
        start or end of -2 or less, counted from the end of its axis: ``x[:, -seq:]`` traced at
        seq 8 holds -8, read as minus an atom traced at 8); ``kind="data"`` turns the dims of a
        constant tensor into ``data`` atoms.
        """
        name = node.input[i] if i < len(node.input) else ""
        base = self.info(name)
        arr = self.const(name)
        if arr is None or base is None:
            return base
        key = (node_index, i, graph + "|" + kind)
        if key in self._use_cache:
            return self._use_cache[key]
        if kind == "size":
            if base.value is None:
                return base
            atoms: list[str | None] = []
            values: list[Dim] = []
            negated: set[int] = set()
            from_end = node.op_type == "Slice" and i in (1, 2)
            for k, v in enumerate(arr.reshape(-1).tolist()):
                v = int(v)
                if from_end and -(2**31) < v <= -2:
                    d = self.new_atom("var", -v)
                    atoms.append(next(iter(d.atoms())))
                    values.append(-d)
                    negated.add(k)
                elif v <= 0 or v >= 2**31 - 1:
                    atoms.append(None)
                    values.append(Dim.const(v))
                else:
                    d = self.new_atom("var", v)
                    atoms.append(next(iter(d.atoms())))
                    values.append(d)
            if not any(atoms):
                return base
            info = TensorInfo(list(base.shape or []), base.dtype, values)
        else:
            atoms = []
            dims: list[Dim] = []
            for n in arr.shape:
                d = self.new_atom("data", int(n))
                atoms.append(next(iter(d.atoms())))
                dims.append(d)
            if not atoms:
                return base
            info = TensorInfo(dims, base.dtype, base.value)
        use = ConstUse(node.name, node.op_type, node_index, i, name, kind, arr, atoms, graph)
        if kind == "size":
            use.negated = frozenset(negated)
        for k, a in enumerate(atoms):
            if a is not None:
                self.atoms[a].origin = (use, k)
        self.uses.append(use)
        self._use_cache[key] = info
        return info


# -- model reading -------------------------------------------------------------------------------


def _tensor_value(arr: np.ndarray, dtype: int) -> list[Dim] | None:
    if dtype in INT_TYPES or arr.dtype.kind in "iub":
        if arr.size <= MAX_VALUE_ELEMENTS:
            return [Dim.const(int(v)) for v in arr.reshape(-1).tolist()]
    return None


def constant_info(arr: np.ndarray, dtype: int) -> TensorInfo:
    """A TensorInfo for a known constant array."""
    return TensorInfo([Dim.const(int(n)) for n in arr.shape], dtype, _tensor_value(arr, dtype))


def static_shapes(
    model: onnx.ModelProto, bare: onnx.ModelProto | None = None
) -> dict[str, list[int | None]]:
    """Traced (concrete) shapes of every tensor ONNX shape inference can give, from the input
    model (``bare``: its weightless copy, if made already)."""
    out: dict[str, list[int | None]] = {}
    try:
        # A weightless copy: inference needs each weight's type and shape, not its data.
        inferred = onnx.shape_inference.infer_shapes(
            weightless(model) if bare is None else bare, data_prop=True
        )
    except Exception:  # inference is a help here, not a requirement
        inferred = model

    def walk(graph: onnx.GraphProto) -> None:
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            t = vi.type.tensor_type
            if t.HasField("shape"):
                out[vi.name] = [fixed_size(d) for d in t.shape.dim]
        for node in graph.node:
            for sub in subgraphs(node):
                walk(sub)

    walk(inferred.graph)
    return out


#: Floating-point initializers whose arrays :class:`Constants` makes only when a rule reads them:
#: their TensorInfo needs their dims and type alone (a float carries no symbolic value).
_LAZY_TYPES = frozenset((onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16))


class Constants(MutableMapping[str, np.ndarray]):
    """A graph's constants by name, as arrays; a floating-point initializer (a weight) becomes
    its array only when read, then stays one.

    Planning reads the values of shape vectors, indices and small tables, hardly ever of a
    weight: turning every initializer into an array up front copied all the weights once more.
    :meth:`infos` gives every
    constant's TensorInfo without making an array of a weight.
    """

    def __init__(self) -> None:
        self._entries: dict[str, np.ndarray | onnx.TensorProto] = {}

    def add_tensor(self, tensor: onnx.TensorProto) -> None:
        """Hold ``tensor`` (an initializer): an array now, or, for a weight, when first read."""
        lazy = on_disk(tensor) or (tensor.data_type in _LAZY_TYPES and not tensor.external_data)
        self._entries[tensor.name] = tensor if lazy else numpy_helper.to_array(tensor)

    def __getitem__(self, name: str) -> np.ndarray:
        value = self._entries[name]
        if isinstance(value, onnx.TensorProto):  # a weight's array, read from its file if on disk
            value = self._entries[name] = tensor_array(value)
        return value

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self._entries[name] = value

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def infos(self) -> Iterator[tuple[str, TensorInfo]]:
        """(name, TensorInfo) of every constant, in order; a weight not yet read stays a tensor."""
        for name, value in self._entries.items():
            if isinstance(value, onnx.TensorProto):
                yield name, TensorInfo([Dim.const(int(n)) for n in value.dims], value.data_type, None)
            else:
                yield name, constant_info(value, elem_type_of(value))


def read_constants(graph: onnx.GraphProto) -> Constants:
    """Initializers and Constant-node outputs of one graph, as arrays (a weight's when read)."""
    consts = Constants()
    for init in graph.initializer:
        consts.add_tensor(init)
    for node in graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            arr = _constant_node_value(node)
            if arr is not None:
                consts[node.output[0]] = arr
    return consts


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
        if attr.name == "value_int":
            return np.array(attr.i, dtype=np.int64)
        if attr.name == "value_ints":
            return np.array(list(attr.ints), dtype=np.int64)
        if attr.name == "value_float":
            return np.array(attr.f, dtype=np.float32)
        if attr.name == "value_floats":
            return np.array(list(attr.floats), dtype=np.float32)
    return None


def elem_type(vi: onnx.ValueInfoProto) -> int:
    return vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
