"""bench/sweep.py: rows from the registries, one generic shrink, the status of a symbolize run,
the table; and the quick subset ``make test`` runs (two tiny architectures, TorchScript, traced
at batch 2, through the same worker as the full sweep: no crash, no wrong)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import sweep  # noqa: E402
import sweep_rows  # noqa: E402


def test_rows_are_every_base_model_and_every_causal_lm_of_the_registry():
    from transformers.models.auto import modeling_auto as m

    rows, _ = sweep_rows.enumerate_rows()
    names = {r.name for r in rows if r.source == "transformers"}
    lms = set(m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) & set(m.MODEL_MAPPING_NAMES)
    assert len(names) == len(m.MODEL_MAPPING_NAMES) + 2 * len(lms)
    assert {"bert.base", "gpt2.causal-lm", "gpt2.causal-lm-kv", "llama.causal-lm-kv"} <= names
    kind = {r.name: r.kind for r in rows}
    assert kind["bert.base"] == "encoder" and kind["llama.base"] == "decoder"
    assert kind["t5.base"] == "encoder-decoder" and kind["whisper.base"] == "audio"
    assert kind["vit.base"] == "vision" and kind["segformer.base"] == "segmentation"
    assert kind["videomae.base"] == "video" and kind["gpt2.causal-lm-kv"] == "decoder-kv"


def test_shrink_makes_any_config_tiny_sub_configs_and_per_layer_lists_too():
    from transformers import AutoConfig

    bert = sweep_rows.shrink(AutoConfig.for_model("bert").to_dict())
    assert (bert["hidden_size"], bert["num_hidden_layers"]) == (32, 2)
    assert bert["num_attention_heads"] == 4
    assert (bert["intermediate_size"], bert["vocab_size"]) == (64, 128)
    clip = sweep_rows.shrink(AutoConfig.for_model("clip").to_dict())
    assert clip["vision_config"]["hidden_size"] == clip["text_config"]["hidden_size"] == 32
    assert clip["vision_config"]["image_size"] == 32 and clip["vision_config"]["patch_size"] == 8
    gemma = sweep_rows.shrink(AutoConfig.for_model("gemma3_text").to_dict())
    assert gemma["num_hidden_layers"] == len(gemma["layer_types"]) == 2
    assert gemma["num_key_value_heads"] < gemma["num_attention_heads"]  # grouped-query stays so
    assert all(t < 128 for t in (gemma["pad_token_id"], gemma["bos_token_id"]))
    w2v = sweep_rows.shrink(AutoConfig.for_model("wav2vec2").to_dict())
    assert set(w2v["conv_dim"]) == {16} and len(w2v["conv_dim"]) == len(w2v["conv_stride"])
    beit = sweep_rows.shrink(AutoConfig.for_model("beit").to_dict())
    assert beit["out_features"] is None  # named the 12th stage, which no longer exists


def test_a_limited_sweep_takes_the_kinds_in_turn():
    rows, _ = sweep_rows.enumerate_rows()
    first = sweep.select(rows, limit=8)
    assert len(first) == 8 and len({r.kind for r in first}) == 8
    assert {r.kind for r in sweep.select(rows, kinds=["video"])} == {"video"}


@pytest.mark.parametrize(
    ("exit_code", "mismatch", "status"),
    [(0, None, "pass"), (0, "batch3_seq5: out: max abs err 1", "wrong"), (2, None, "refused"),
     (3, None, "crash"), (1, None, "crash"), (-9, None, "crash"), (None, None, "crash")],
)  # fmt: skip
def test_a_symbolize_run_is_pass_refused_wrong_or_crash(exit_code, mismatch, status):
    assert sweep.classify(exit_code, mismatch) == status


def _case(exporter, batch, symbolize="pass", static="ok"):
    case = {"exporter": exporter, "batch": batch, "static": {"status": static}}
    if static == "ok":
        case["symbolize"] = {"status": symbolize, "exit": 0, "message": ""}
        case["re-export"] = {"status": "pass"}
        case["update_model_dims"] = {"status": "fail"}
    return case


def test_the_table_counts_each_kind_exporter_and_traced_batch():
    asked = [["torchscript", 2], ["torchscript", 1]]
    rows = [
        {"name": "a.base", "kind": "encoder", "build": "ok", "asked": asked,
         "cases": [_case("torchscript", 2), _case("torchscript", 1, "wrong")]},
        {"name": "b.base", "kind": "encoder", "build": "ok", "asked": asked,
         "cases": [_case("torchscript", 2, "refused"), _case("torchscript", 1, static="export failed")]},
        {"name": "c.base", "kind": "encoder", "build": "no such class", "asked": asked, "cases": []},
        {"name": "d.base", "kind": "encoder", "build": "ok", "asked": asked, "cases": [_case("torchscript", 2, "crash")]},
    ]  # fmt: skip
    meta = {"rows_scored": 4, "rows_in_registries": 10, "partial": True, "torch": "t",
            "transformers": "x", "onnxruntime": "o"}  # fmt: skip
    text = sweep.table({"meta": meta, "rows": rows})
    # rows, not built, static failed, unfinished, scored, pass, refused, wrong, crash, re-export, umd
    assert "| encoder | torchscript | b2 | 4 | 1 | 0 | 0 | 3 | 1 | 1 | 0 | 1 | 3 | 0 |" in text
    assert "| encoder | torchscript | b1 | 4 | 1 | 1 | 1 | 1 | 0 | 0 | 1 | 0 | 1 | 0 |" in text
    assert "dynamo" not in text and "4 of the 10 rows" in text and "(partial)" in text
    assert sweep.problems({"rows": rows})[0].startswith("a.base torchscript b1: wrong (exit 0)")


def test_the_readme_block_is_replaced_and_the_rest_kept(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{sweep.BEGIN}\nold table\n{sweep.END}\nafter\n")
    sweep.update_readme("| new |\n", readme)
    assert readme.read_text() == f"# x\n\nbefore\n{sweep.BEGIN}\n| new |\n{sweep.END}\nafter\n"
    assert sweep.BEGIN in sweep.README.read_text()  # the project README has the block


@pytest.mark.parametrize("name", ["bert.base", "gpt2.causal-lm"])
def test_quick_subset_no_crash_and_no_wrong(name):
    """Through the forked worker, as the sweep runs a row (exports cached under build/sweep/)."""
    rows, _ = sweep_rows.enumerate_rows()
    [row] = sweep.select(rows, only=[name])
    result = sweep.score_row(row, ["torchscript"], [2], timeout=120, memory_gb=8)
    assert result["build"] == "ok", result
    [case] = result["cases"]
    assert case["static"]["status"] == "ok", case
    assert case["symbolize"]["status"] not in ("wrong", "crash"), case["symbolize"]
    assert case["symbolize"]["status"] == "pass", case["symbolize"]
    assert case["re-export"]["status"] == "pass", case["re-export"]


def test_an_image_model_is_fed_the_smallest_side_it_takes_with_height_and_width_free():
    rows, _ = sweep_rows.enumerate_rows()
    [row] = sweep.select(rows, only=["convnext.base"])  # 4 stages: 32x32 shrinks to nothing
    arch = sweep_rows.architecture(row, "convnext-probe")
    assert [i.shape for i in arch.inputs] == [("batch", 3, "height", "width")]
    assert arch.traced[-1] == {"batch": 2, "height": 64, "width": 64}
    [vit] = sweep.select(rows, only=["vit.base"])  # position table of the configured 32x32
    assert [i.shape for i in sweep_rows.architecture(vit, "vit-probe").inputs] == [
        ("batch", 3, 32, 32)
    ]


def test_the_wrapped_model_names_its_inputs_so_dynamo_dynamic_shapes_match_them():
    rows, _ = sweep_rows.enumerate_rows()
    [row] = sweep.select(rows, only=["bert.base"])
    arch = sweep_rows.architecture(row, "bert-probe")
    assert list(inspect.signature(arch.build().forward).parameters) == arch.input_names
