"""The symbolic shape engine: dim algebra, per-op propagation, unification, constant generators."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from onnxsurgery.passes.symbolize.generators import match_generator
from onnxsurgery.shapes.dims import Dim, dim_product
from onnxsurgery.shapes.propagation import propagate
from onnxsurgery.shapes.solver import solve

B, S = Dim.sym("batch"), Dim.sym("seq")


def parse(text: str, **inits: np.ndarray) -> onnx.ModelProto:
    """A model from ONNX text; ``inits`` become initializers (weights too big to spell out)."""
    model = onnx.parser.parse_model(text)
    for name, arr in inits.items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(arr, name))
    onnx.checker.check_model(model)
    return model


def shape_of(model: onnx.ModelProto, axes: dict, tensor: str) -> list[str]:
    analysis = propagate(model, axes)
    sol = solve(analysis)
    return [str(sol.resolve(d)) for d in analysis.tensors[tensor].shape]


# -- dim algebra ---------------------------------------------------------------------------------


def test_dim_arithmetic_and_text():
    assert str(B * 16 + S - 1) == "batch*16 + seq - 1"
    assert B * 2 == 2 * B
    assert Dim.const(3) == 3 and Dim.const(3) != 4
    assert (B + 1) * (S + 2) == B * S + B * 2 + S + 2
    assert str(-B + 3) == "-batch + 3"
    assert hash(B * S) == hash(S * B)
    assert (B * S * 48).evaluate({"batch": 4, "seq": 5}) == 960


def test_dim_exact_division():
    assert (B * S * 48).exact_div(B * 3) == S * 16
    assert (B * 6).exact_div(4) is None
    assert ((B + 1) * (S + 2)).exact_div(S + 2) == B + 1
    assert ((B + 1) * (S + 2)).exact_div(S + 3) is None
    assert (B * 64).exact_div(B) == 64


def test_dim_linear_and_substitution():
    a, r = (B * 3 + S * B + 2).linear_in("batch")
    assert a == S + 3 and r == 2
    assert (B * B).linear_in("batch") is None
    assert (B * S).subs({"seq": B + 1}) == B * B + B
    assert dim_product([B, S, 2]) == B * S * 2
    with pytest.raises(KeyError):
        (B + S).evaluate({"batch": 1})


def test_dim_solve_for_one_unknown():
    assert (S * 2 + 5).solve_for("seq", 11, {}) == 3
    assert (B * S + B).solve_for("seq", 12, {"batch": 3}) == 3
    assert (B * S).solve_for("seq", 7, {"batch": 0}) is None  # a zero coefficient tells nothing
    assert (S * S).solve_for("seq", 9, {}) is None
    assert (S - 4).solve_for("seq", 1, {}) == 5
    assert (S + 4).solve_for("seq", 1, {}) == -3
    with pytest.raises(ValueError, match="non-negative int seq"):
        (S + 4).solve_for("seq", 1, {}, nonnegative=True)
    with pytest.raises(ValueError, match="no int seq gives seq\\*2 = 7"):
        (S * 2).solve_for("seq", 7, {})


# -- propagation and solving ---------------------------------------------------------------------

CONV_VIEW_GEMM = """
<ir_version: 8, opset_import: ["" : 17]>
net (float[4, 3, 8, 8] x) => (float[4, 5] y) <int64[2] shape = {4, -1}> {
    c = Conv <kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]> (x, w)
    r = Reshape (c, shape)
    y = Gemm <transB = 1> (r, fc)
}
"""


def conv_view_gemm() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return parse(
        CONV_VIEW_GEMM,
        w=rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        fc=rng.standard_normal((5, 128)).astype(np.float32),
    )


def test_reshape_constant_becomes_batch_by_gemm_constraint():
    model = conv_view_gemm()
    analysis = propagate(model, {"x": {0: "batch"}})
    sol = solve(analysis)
    assert [str(sol.resolve(d)) for d in analysis.tensors["y"].shape] == ["batch", "5"]
    assert [str(sol.resolve(d)) for d in analysis.tensors["r"].shape] == ["batch", "128"]
    assert not sol.conflicts


def test_traced_batch_one_broadcast_stays_one():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 8] x) => (float[1, 8] y) <float[1, 8] bias = {1.0,1.0,1.0,1.0,1.0,1.0,1.0,1.0}> {
            y = Add (x, bias)
        }
        """
    )
    analysis = propagate(model, {"x": {0: "batch"}})
    sol = solve(analysis)
    assert [str(sol.resolve(d)) for d in analysis.tensors["y"].shape] == ["batch", "8"]
    (use,) = analysis.uses
    assert use.kind == "data" and sol.values[use.atoms[0]] == 1  # the bias's 1 only broadcasts


def test_batch_equal_to_channels_keeps_channels():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[3, 3, 4, 4] x) => (float[3, 3, 4, 4] y) <int64[3] s1 = {3, 3, 16}, int64[4] s2 = {3, 3, 4, 4}> {
            f = Reshape (x, s1)
            m = ReduceMean <axes = [-1], keepdims = 1> (f)
            d = Sub (f, m)
            y = Reshape (d, s2)
        }
        """
    )
    assert shape_of(model, {"x": {0: "batch"}}, "f") == ["batch", "3", "16"]
    assert shape_of(model, {"x": {0: "batch"}}, "y") == ["batch", "3", "4", "4"]


def test_shape_gather_concat_values_are_symbolic():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 5, 6] x) => (float[2, 30] y) <int64[1] i0 = {0}, int64[1] minus = {-1}> {
            s = Shape (x)
            b = Gather <axis = 0> (s, i0)
            shape = Concat <axis = 0> (b, minus)
            y = Reshape (x, shape)
        }
        """
    )
    analysis = propagate(model, {"x": {0: "batch", 1: "seq"}})
    assert [str(v) for v in analysis.tensors["shape"].value] == ["batch", "-1"]
    assert [str(d) for d in analysis.tensors["y"].shape] == ["batch", "seq*6"]


def test_strided_conv_over_symbolic_length_is_opaque_and_nonzero_is_data_dependent():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 2, 9] x) => (int64[3, 18] nz, float[1, 4, 5] c) {
            c = Conv <kernel_shape = [3], pads = [1, 1], strides = [2]> (x, w)
            g = Greater (x, x)
            nz0 = NonZero (g)
            nz = Identity (nz0)
        }
        """,
        w=np.zeros((4, 2, 3), np.float32),
    )
    analysis = propagate(model, {"x": {0: "batch", 2: "length"}})
    c = analysis.tensors["c"].shape
    assert str(c[0]) == "batch" and c[1] == 4
    assert analysis.atoms[next(iter(c[2].atoms()))].kind == "opaque"
    nz = analysis.tensors["nz"].shape
    assert nz[0] == 3 and analysis.atoms[next(iter(nz[1].atoms()))].kind == "opaque"


def test_conflict_when_a_symbol_reaches_a_weight():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 4, 3] x) => (float[2, 5] y) <int64[2] shape = {2, 12}> {
            r = Reshape (x, shape)
            y = Gemm <transB = 1> (r, w)
        }
        """,
        w=np.zeros((5, 12), np.float32),
    )
    analysis = propagate(model, {"x": {0: "batch", 1: "seq"}})
    sol = solve(analysis)
    assert sol.conflicts
    assert any("seq" in str(c.residual) for c in sol.conflicts)


def test_unflattening_reshape_splits_symbols_in_axis_order():
    # [B*S, 32] -> [B, S, 32] at traced batch 1: batch*seq and seq have the same traced size.
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[1, 8, 32] x) => (float[1, 8, 32] y) <int64[2] s1 = {-1, 32}, int64[3] s2 = {1, 8, 32}> {
            f = Reshape (x, s1)
            r = Relu (f)
            y = Reshape (r, s2)
        }
        """
    )
    assert shape_of(model, {"x": {0: "batch", 1: "seq"}}, "y") == ["batch", "seq", "32"]


def test_unknown_op_falls_back_to_onnx_inference_with_a_note():
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 3, 3] x) => (float[2] y) {
            y = Det (x)
        }
        """
    )
    analysis = propagate(model, {"x": {0: "batch"}})
    assert [str(d) for d in analysis.tensors["y"].shape] == ["batch"]
    assert any("Det" in op for _, op, _ in analysis.notes)


def test_propagation_is_fast_on_thousands_of_nodes():
    import time

    lines = []
    prev = "x"
    for i in range(1500):
        lines.append(f"r{i} = Reshape ({prev}, shape)")
        lines.append(f"a{i} = Relu (r{i})")
        prev = f"a{i}"
    text = (
        '<ir_version: 8, opset_import: ["" : 17]>\n'
        "net (float[4, 6] x) => (float[4, 6] y) <int64[2] shape = {4, 6}> {\n"
        + "\n".join(lines)
        + f"\n y = Identity ({prev})\n}}"
    )
    model = parse(text)
    t0 = time.perf_counter()
    analysis = propagate(model, {"x": {0: "batch"}})
    sol = solve(analysis)
    elapsed = time.perf_counter() - t0
    assert [str(sol.resolve(d)) for d in analysis.tensors["y"].shape] == ["batch", "6"]
    assert elapsed < 10, elapsed


def test_unknown_input_and_mismatched_sizes_are_errors():
    model = conv_view_gemm()
    with pytest.raises(ValueError, match="no graph input 'nope'"):
        propagate(model, {"nope": {0: "batch"}})
    two = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[2, 3] a, float[4, 3] b) => (float[2, 3] y) { y = Identity (a) }
        """
    )
    with pytest.raises(ValueError, match="same size"):
        propagate(two, {"a": {0: "batch"}, "b": {0: "batch"}})


def test_input_shapes_symbols_sizes_and_dims_without_a_size():
    """What propagate gives graph inputs: a symbol on an axis that is dynamic already (a
    sentinel size, marked dynamic), a negative axis counted from the end, fixed sizes as
    constants, an opaque atom for a dim without a size, no shape for an input without one."""
    from onnxsurgery.shapes.analysis import SENTINEL_SIZE

    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        net (float[N, 3] a, float[2, 5] b, float c) => (float[N, 3] y) { y = Identity (a) }
        """
    )
    model.graph.input[2].type.tensor_type.ClearField("shape")
    model.graph.input[1].type.tensor_type.shape.dim[0].Clear()
    analysis = propagate(model, {"a": {0: "batch"}, "b": {-1: "seq"}})
    assert analysis.dynamic == {"batch"} and analysis.atoms["batch"].traced == SENTINEL_SIZE
    assert analysis.atoms["seq"].traced == 5 and analysis.symbols["seq"] == [("b", 1)]
    assert [str(d) for d in analysis.tensors["a"].shape] == ["batch", "3"]
    first, second = analysis.tensors["b"].shape
    assert str(second) == "seq"
    (atom,) = first.atoms()
    assert analysis.atoms[atom].kind == "opaque" and analysis.atoms[atom].note == "input dim without size"
    assert analysis.tensors["c"].shape is None


# -- constant generators -------------------------------------------------------------------------


def test_generator_affine_grid_with_per_component_steps():
    b, s = np.meshgrid(np.arange(2), np.arange(8), indexing="ij")
    grid = np.stack([b, s], axis=-1).reshape(2, 1, 1, 8, 2).astype(np.int64)
    gen = match_generator(grid, [0, 3])
    assert gen is not None and gen.kind == "affine"
    assert gen.steps[0].reshape(-1).tolist() == [1, 0]
    assert gen.steps[3].reshape(-1).tolist() == [0, 1]


def test_generator_rotary_tables_and_causal_mask():
    inv_freq = 1.0 / (10000 ** (np.arange(0, 8, 2) / 8))
    freqs = np.arange(6)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)[None, None].astype(np.float32)
    assert match_generator(np.cos(emb), [2]).kind == "cos"
    assert match_generator(np.sin(emb), [2]).kind == "sin"
    assert match_generator(emb, [2]).kind == "affine"
    causal = np.tril(np.ones((5, 5), dtype=bool))[None, None]
    gen = match_generator(causal, [2, 3])
    assert gen is not None and gen.kind == "band" and gen.band[2:4] == (None, 0)
    additive = np.where(causal, 0.0, -1e9).astype(np.float32)
    assert match_generator(additive, [2, 3]).kind == "band"


def test_generator_rejects_a_learned_table():
    rng = np.random.default_rng(0)
    assert match_generator(rng.standard_normal((1, 8, 4)).astype(np.float32), [1]) is None


def test_generator_sliding_window_mask_keeps_its_window():
    i, j = np.arange(8)[:, None], np.arange(8)[None, :]
    window = (j <= i) & (j > i - 3)
    gen = match_generator(window[None, None], [2, 3])
    assert gen is not None and gen.kind == "band" and gen.band[2:4] == (-2, 0)


def test_generator_tiled_per_head_block():
    per_head = np.random.default_rng(0).standard_normal((4, 5, 5)).astype(np.float32)
    tiled = np.tile(per_head, (2, 1, 1))  # [batch*heads, 5, 5] at batch 2
    gen = match_generator(tiled, [0], {0: 4})
    assert gen is not None and gen.kind == "tile" and gen.base.shape == (4, 5, 5)
    assert match_generator(tiled, [0]) is None  # without knowing the block: a table


def test_a_loop_scan_count_is_an_opaque_dim_of_the_scan_output():
    # A Loop ended by its condition: the scan output's leading dim is only known at run time. Its
    # atom must name axis 0 of the scan output (the note was once passed as the value index, so
    # the origin read ('value', 'ys', 'Loop iteration count')).
    model = parse(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[4, 3] x, bool c) => (float[4, 3] y, float[5, 4, 3] ys) {
          y, ys = Loop("", c, x) <body = body (int64 i, bool cin, float[4, 3] xin)
                                          => (bool cout, float[4, 3] xout, float[4, 3] scan) {
            cout = Identity(cin)
            xout = Identity(xin)
            scan = Identity(xin)
          }>
        }
        """
    )
    analysis = propagate(model, {"x": {0: "batch"}})
    (atom,) = analysis.tensors["ys"].shape[0].atoms()
    assert analysis.atoms[atom].kind == "opaque"
    assert analysis.atoms[atom].origin == ("dim", "ys", 0)
    assert analysis.atoms[atom].note == "Loop iteration count"


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_a_conv_whose_kernel_size_is_symbolic_goes_to_onnx_inference_without_a_crash(op):
    # The weight is a graph input whose spatial axes are named: the kernel size is no int. The
    # rule read int(None) and failed with a TypeError, whose text became a note.
    out = "float[2, 3, 6, 6]" if op == "Conv" else "float[2, 3, 10, 10]"
    model = parse(
        f"""
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[2, 3, 8, 8] x, float[3, 3, 3, 3] w) => ({out} y) {{
          y = {op} (x, w)
        }}
        """
    )
    analysis = propagate(model, {"x": {0: "batch"}, "w": {2: "k", 3: "k"}})
    notes = [text for _, _, text in analysis.notes]
    assert not [t for t in notes if "failed" in t], notes
    assert notes == [
        "its symbolic rule could not read its inputs (a shape or size left unknown upstream); "
        "used ONNX shape inference"
    ]
