"""bench/sweep.py: rows from the registries, one generic shrink, the status of a symbolize run,
the table; and the quick subset ``make test`` runs (two tiny architectures, TorchScript, traced
at batch 2, through the same worker as the full sweep: no crash, no wrong)."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import numpy as np
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


def _consistent(model_type):
    from transformers import AutoConfig

    base = AutoConfig.for_model(model_type)
    return type(base).from_dict(sweep_rows.shrink(base.to_dict(), consistent=True))


def test_a_row_that_builds_as_shrunk_keeps_that_config_the_consistency_rules_are_a_fallback():
    from transformers import AutoConfig

    row = sweep_rows.Row("transformers", "bert", "base", "encoder", "BertModel")
    plain = sweep_rows.shrink(AutoConfig.for_model("bert").to_dict())
    assert (
        sweep_rows._config(row, use_cache=False).to_dict()
        == type(AutoConfig.for_model("bert")).from_dict({**plain, "use_cache": False}).to_dict()
    )


def test_per_stage_lists_keep_one_entry_per_stage():
    # Swin's 4 stages are its "num_layers": its num_heads was cut to 2 entries (index out of range)
    swin = _consistent("swin")
    assert len(swin.num_heads) == len(swin.depths) == 4
    clap = _consistent("clap").audio_config
    assert len(clap.num_attention_heads) == len(clap.depths) == 4


def test_head_counts_divide_the_width_they_split():
    pvt = _consistent("pvt")  # heads [1, 2, 5, 8] over widths [8, 8, 16, 32]
    assert all(w % h == 0 for h, w in zip(pvt.num_attention_heads, pvt.hidden_sizes, strict=True))
    bark = _consistent("bark").semantic_config  # 12 heads of a 32 wide layer
    assert bark.hidden_size % bark.num_heads == 0


def test_group_counts_divide_the_shrunk_channels():
    import transformers

    bit = _consistent("bit")  # 32 groups over 4 bottleneck channels
    assert bit.num_groups <= 4
    transformers.BitModel(bit)


def test_strict_configs_validate_out_indices_mrope_sections_and_token_ids():
    assert _consistent("data2vec-vision").out_indices == [2]  # named layers 3..11 of 12
    from transformers import AutoConfig

    swin = _consistent("maskformer-swin")  # a backbone keeps its stages and what it names
    assert swin.out_features == AutoConfig.for_model("maskformer-swin").out_features
    text = _consistent("cosmos3_edge_text")  # three sections summing to half the head
    sections = text.rope_parameters["mrope_section"]
    assert len(sections) == 3 and sum(sections) == text.head_dim // 2


def test_sizes_that_were_an_old_width_follow_it_across_sub_configs():
    csm = _consistent("csm")
    assert csm.depth_decoder_config.backbone_hidden_size == csm.hidden_size == 32
    assert csm.codec_config.upsample_groups == csm.codec_config.hidden_size  # depthwise


def test_per_layer_overrides_keep_only_the_layers_left():
    from transformers import AutoConfig

    config = AutoConfig.for_model("embedding_gemma2")  # overrides at layers 5, 11, 17, 23
    small = sweep_rows.shrink(config.to_dict(), consistent=True)
    assert all(int(k) < 2 for k in small["text_config"]["per_layer_config"] or ())
    type(config).from_dict(small)  # was: keys must be layer indices in the range [0, 2)


def test_a_row_over_a_kv_cache_of_an_encoder_kin_is_built_as_a_decoder():
    bert = sweep_rows.Row("transformers", "bert", "causal-lm-kv", "decoder-kv", "BertLMHeadModel")
    assert sweep_rows._config(bert, use_cache=True).is_decoder
    gpt2 = sweep_rows.Row("transformers", "gpt2", "causal-lm-kv", "decoder-kv", "GPT2LMHeadModel")
    assert not getattr(sweep_rows._config(gpt2, use_cache=True), "is_decoder", False)  # as it was


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


def _case(exporter, batch, symbolize="pass", static="ok", **advice):
    case = {"exporter": exporter, "batch": batch, "static": {"status": static}}
    if static == "ok":
        case["symbolize"] = {"status": symbolize, "exit": 0, "message": ""}
        case["re-export"] = {"status": "pass"}
        case["update_model_dims"] = {"status": "fail"}
    for method, status in advice.items():  # ref="pass": "symbolize+ref" passed
        case[f"symbolize+{method}"] = {"status": status, "exit": 0, "message": ""}
    return case


def test_the_table_counts_each_kind_exporter_and_traced_batch():
    asked = [["torchscript", 2], ["torchscript", 1]]
    rows = [
        {"name": "a.base", "kind": "encoder", "build": "ok", "asked": asked,
         "cases": [_case("torchscript", 2), _case("torchscript", 1, "wrong")]},
        {"name": "b.base", "kind": "encoder", "build": "ok", "asked": asked,
         "cases": [_case("torchscript", 2, "refused", ref="pass"), _case("torchscript", 1, static="export failed")]},
        {"name": "c.base", "kind": "encoder", "build": "no such class", "asked": asked, "cases": []},
        {"name": "d.base", "kind": "encoder", "build": "ok", "asked": asked, "cases": [_case("torchscript", 2, "crash")]},
        {"name": "e.base", "kind": "decoder", "build": "ok", "asked": asked,
         "cases": [_case("torchscript", 2, "refused", ref="refused", bound="pass"),
                   _case("torchscript", 1, "refused", ref="wrong", bound="refused")]},
    ]  # fmt: skip
    meta = {"rows_scored": 4, "rows_in_registries": 10, "partial": True, "torch": "t",
            "transformers": "x", "onnxruntime": "o"}  # fmt: skip
    text = sweep.table({"meta": meta, "rows": rows})
    # rows, not built, static failed, unfinished, scored, pass, refused, wrong, crash,
    # +ref, +bound (passes plainly or after the advice), advice wrong, re-export, umd
    assert (
        "| encoder | torchscript | b2 | 4 | 1 | 0 | 0 | 3 | 1 | 1 | 0 | 1 | 2 | 2 | 0 | 3 | 0 |"
        in text
    )
    assert (
        "| encoder | torchscript | b1 | 4 | 1 | 1 | 1 | 1 | 0 | 0 | 1 | 0 | 0 | 0 | 0 | 1 | 0 |"
        in text
    )
    assert (
        "| decoder | torchscript | b2 | 1 | 0 | 0 | 0 | 1 | 0 | 1 | 0 | 0 | 0 | 1 | 0 | 1 | 0 |"
        in text
    )
    assert (
        "| decoder | torchscript | b1 | 1 | 0 | 0 | 0 | 1 | 0 | 1 | 0 | 0 | 0 | 0 | 1 | 1 | 0 |"
        in text
    )
    assert "dynamo" not in text and "4 of the 10 rows" in text and "(partial)" in text
    # by kind: scored, symbolize, symbolize after advice, re-export (both traced batches)
    assert "| encoder | 4 | 1 | 2 | 4 |" in text and "| decoder | 2 | 0 | 1 | 2 |" in text
    assert "| all | 6 | 1 | 3 | 6 |" in text
    problems = sweep.problems({"rows": rows})
    assert problems[0].startswith("a.base torchscript b1: wrong (exit 0)")
    assert "e.base torchscript b1 symbolize+ref: wrong (exit 0): " in problems


def test_the_readme_block_is_replaced_and_the_rest_kept(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{sweep.BEGIN}\nold table\n{sweep.END}\nafter\n")
    sweep.update_readme("| new |\n", readme)
    assert readme.read_text() == f"# x\n\nbefore\n{sweep.BEGIN}\n| new |\n{sweep.END}\nafter\n"
    assert sweep.BEGIN in sweep.README.read_text()  # the project README has the block


def _row(name, source, versions=None):
    row = {"name": name, "source": source, "kind": "vision", "build": "ok", "cases": []}
    return {**row, "versions": versions} if versions else row


def test_rows_of_a_source_this_environment_cannot_import_are_kept_with_their_count():
    # torchvision installs only beside another torch (make sweep-torchvision): its rows come
    # from another environment, and a run here without torchvision must not drop them
    tv = {"torch": "2.14.1+cu130", "torchvision": "0.29.1"}
    previous = {
        "meta": {"registries": {"transformers": 3, "torchvision": 2}},
        "rows": [_row("alexnet.base", "torchvision", tv), _row("bert.base", "transformers"),
                 _row("gone.base", "transformers")],
    }  # fmt: skip
    here = [_row("bert.base", "transformers", {"torch": "2.13.0+cpu", "transformers": "5"})]
    known = {"bert.base", "gpt2.base", "vit.base"}
    merged = sweep._merge(previous, here, known, {"torchvision": "No module named 'torchvision'"})
    assert [r["name"] for r in merged] == [
        "alexnet.base",
        "bert.base",
    ]  # gone.base: no longer a row
    assert merged[1]["versions"]["torch"] == "2.13.0+cpu"  # this run's row replaces the old one
    rows = [sweep_rows.Row("transformers", n.split(".")[0], "base", "encoder", "X") for n in known]
    meta = sweep._meta(rows, {"torchvision": "No module"}, merged, previous["meta"])
    assert meta["registries"] == {"transformers": 3, "torchvision": 2}
    assert meta["rows_in_registries"] == 5 and meta["sources_missing"] == {}
    header = sweep._made_with(meta)
    assert "torchvision rows: torch 2.14.1+cu130, torchvision 0.29.1" in header
    assert "transformers rows: torch 2.13.0+cpu, transformers 5" in header
    # never swept: still said
    fresh = sweep._meta(rows, {"torchvision": "No module"}, merged[1:], None)
    assert fresh["sources_missing"] == {"torchvision": "No module"}


def test_a_source_that_gives_no_rows_here_is_a_usage_error(capsys):
    if "torchvision" in sys.modules or sweep_rows.enumerate_rows()[1] == {}:
        pytest.skip("torchvision imports here")
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--sources", "torchvision", "--list"])
    assert exc.value.code == 2
    assert "no rows from source(s) ['torchvision'] here" in capsys.readouterr().err


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


# --------------------------------------------------------------------------------------------
# symbolize as a user who follows its refusal's advice (--ref, a bound)


def test_the_advice_the_sweep_follows_is_found_in_symbolize_s_own_words():
    from onnxsurgery.passes.symbolize.wording import BOUND_HINT, FIX

    coincident = FIX["coincident-size"].format(syms="seq", readings="seq", node="n")
    padding = FIX["tf-padding"].format(syms="height", axes="x:2")
    bound = BOUND_HINT.format(syms="seq", example="seq")
    assert sweep.advised(f"error: symbolize: ...; {coincident}re-export") == ["ref"]
    assert sweep.advised(padding) == ["ref"]
    assert sweep.advised(f"...; {bound}export with TorchScript; {padding}") == ["ref", "bound"]
    assert sweep.advised("error: symbolize: needs 1 == batch; re-export with dynamic axes") == []


def test_a_run_with_reference_cases_that_do_not_match_is_a_refusal_not_a_crash():
    assert sweep.classify(1, None, validated=True) == "refused"
    assert sweep.classify(1, None) == "crash"  # without --ref, exit 1 is not symbolize's
    assert sweep.classify(0, "batch3: y: max abs err 1", validated=True) == "wrong"


def test_the_reference_case_is_at_a_size_no_check_uses_and_within_a_bound():
    rows, _ = sweep_rows.enumerate_rows()
    for name in ("t5.base", "wavlm.base", "mobilenet_v2.base"):
        [row] = sweep.select(rows, only=[name])
        arch = sweep_rows.architecture(row, f"{name}-probe")
        for traced in arch.traced:
            sizes = sweep_rows.reference_sizes(arch, traced)
            odd, quarter, *over = sizes[:4]
            for ref in sizes[:4]:
                assert ref not in [*arch.traced, *arch.checks]
                for sym, value in ref.items():
                    assert value not in {s[sym] for s in (*arch.traced, *arch.checks)}, (name, sym)
                    assert sym == "batch" or (value < traced[sym]) == (ref not in over)
            assert all(v % 2 != traced[k] % 2 for k, v in odd.items() if k != "batch")
    assert odd["height"] != odd["width"]  # mobilenet_v2: what coincides when traced differs
    assert (quarter["height"], quarter["width"]) == (24, 16)  # whole patches of 8


def test_a_symbol_that_is_the_sum_of_two_others_is_their_sum_in_the_reference():
    rows, _ = sweep_rows.enumerate_rows()
    [row] = sweep.select(rows, only=["gpt2.causal-lm-kv"])  # the mask's total = past + seq
    arch = sweep_rows.architecture(row, "gpt2-kv-probe")
    for k, ref in enumerate(sweep_rows.reference_sizes(arch, arch.traced[-1])):
        assert ref["total"] == ref["past"] + ref["seq"], ref
        if k < 4:  # after them, one symbol at a time at its traced value
            assert ref["seq"] != arch.traced[-1]["seq"] and ref["past"] != arch.traced[-1]["past"]


def _same_padded():
    """transformers' tf_padding: a stride-2 Conv padded 'same' from the input's size, which a
    static export bakes as the traced size's pads (0, 1): symbolize cannot tell them from fixed
    pads and advises reference cases at a size of the other parity."""
    import torch

    class SamePadded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, stride=2)

        def forward(self, x):
            h, w = int(x.shape[-2]), int(x.shape[-1])
            ph, pw = (max((-(-n // 2) - 1) * 2 + 3 - n, 0) for n in (h, w))
            x = torch.nn.functional.pad(x, (pw // 2, pw - pw // 2, ph // 2, ph - ph // 2))
            return (self.conv(x),)

    return SamePadded()


def _positions():
    """Learned positions 0..seq-1 added to the input: a static export folds the table's first
    seq rows into a constant, and symbolize advises a bound (seq<=traced)."""
    import torch

    class Positions(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pos = torch.nn.Embedding(32, 8)

        def forward(self, x):
            return (x + self.pos(torch.arange(int(x.shape[1]))),)

    return Positions()


def _tiny(tmp_path, name):
    from corpus.architectures import Architecture, InputSpec, OutputSpec

    if name == "same-padded":
        inputs = (InputSpec("x", ("batch", 3, "height", "width")),)
        outputs = (OutputSpec("y", ("batch", 4, "y_2", "y_3")),)
        traced = ({"batch": 2, "height": 16, "width": 16},)
        checks = ({"batch": 3, "height": 15, "width": 21}, {"batch": 1, "height": 20, "width": 9})
        builder = _same_padded
    else:
        inputs = (InputSpec("x", ("batch", "seq", 8)),)
        outputs = (OutputSpec("y", ("batch", "seq", 8)),)
        traced = ({"batch": 2, "seq": 8},)
        checks = ({"batch": 3, "seq": 5}, {"batch": 1, "seq": 6})
        builder = _positions
    return Architecture(name, "encoder", builder, inputs, outputs, traced, checks, cache=tmp_path)


def test_a_refusal_that_advises_reference_cases_is_scored_again_with_one(tmp_path):
    """Plain symbolize is refused (the pads could be fixed or 'same'); with one torch reference
    case at a size of the other parity that no check uses, it passes at every check size."""
    case = sweep.score_case(_tiny(tmp_path, "same-padded"), "torchscript", 2, timeout=120)
    assert case["symbolize"]["status"] == "refused" and case["symbolize"]["advice"] == ["ref"]
    ref = case["symbolize+ref"]
    assert ref["reference"] == {"batch": 4, "height": 13, "width": 11}
    assert ref["status"] == "pass", ref
    assert "--ref" in ref["command"] and "symbolize+bound" not in case
    assert sweep.after_advice(case) == {
        "pass": False, "+ref": True, "+bound": True, "advice wrong": False
    }  # fmt: skip
    assert "--ref" not in case["symbolize"]["command"]  # plain symbolize is scored as before


def test_a_refusal_that_advises_a_bound_is_scored_within_it_and_over_it(tmp_path):
    case = sweep.score_case(_tiny(tmp_path, "positions"), "torchscript", 2, timeout=120)
    assert case["symbolize"]["status"] == "refused" and "bound" in case["symbolize"]["advice"]
    bound = case["symbolize+bound"]
    assert bound["status"] == "pass", bound
    assert "seq<=traced" in bound["command"] and "; over: batch2_seq9 " in bound["message"]
    assert sweep.after_advice(case)["+bound"] and not sweep.after_advice(case)["pass"]
    assert sweep.score_case(_tiny(tmp_path, "positions"), "torchscript", 2, 120, advice=False)[
        "symbolize"
    ] == {k: v for k, v in case["symbolize"].items()}  # the same plain result either way
    assert "symbolize+bound" not in sweep.score_case(
        _tiny(tmp_path, "positions"), "torchscript", 2, 120, advice=False
    )


def _tagged_worker(row, exporters, batches, sink, *args):
    """A stand-in for the sweep's worker: two cases tagged with its sweep's process id."""
    import json
    import os
    import time

    for batch in (2, 1):
        with open(sink, "a") as f:
            f.write(json.dumps({"case": {"batch": batch, "sweep": os.getppid()}}) + "\n")
        time.sleep(0.3)


def _score_tagged(row, out):
    result = sweep.score_row(row, ["torchscript"], [2, 1], timeout=5, memory_gb=8)
    out.put([c["sweep"] for c in result["cases"]])


def test_two_sweeps_scoring_one_row_at_once_read_only_their_own_cases(tmp_path, monkeypatch):
    """build/sweep/ is one cache shared by several checkouts: each sweep reads only its worker."""
    import multiprocessing

    monkeypatch.setattr(sweep, "sweep_root", lambda: tmp_path)
    monkeypatch.setattr(sweep, "_worker", _tagged_worker)
    row = sweep_rows.Row("transformers", "bert", "base", "encoder", "BertModel")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    sweeps = [ctx.Process(target=_score_tagged, args=(row, out)) for _ in range(2)]
    for p in sweeps:
        p.start()
    got = sorted([out.get(timeout=60), out.get(timeout=60)])
    for p in sweeps:
        p.join()
    assert sorted(p.pid for p in sweeps) == sorted(tags[0] for tags in got)
    assert all(tags == [tags[0]] * 2 for tags in got), got
    assert not list((tmp_path / "results").iterdir())  # read, then removed


def _caching_worker(row, exporters, batches, sink, *args):
    """A stand-in for the sweep's worker that caches an export, as a row's build does."""
    import json

    folder = sweep.sweep_root() / f"{row.name}-{sweep_rows.row_key(row)}" / "torchscript"
    folder.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(b"onnx")
    with open(sink, "a") as f:
        f.write(json.dumps({"build": "ok"}) + "\n")
        f.write(json.dumps({"case": {"batch": 2, "static": {"status": "export failed"}}}) + "\n")


@pytest.mark.parametrize("prune", [False, True])
def test_prune_deletes_a_row_s_cache_once_it_is_scored_and_keeps_its_results(
    tmp_path, monkeypatch, prune
):
    monkeypatch.setattr(sweep, "sweep_root", lambda: tmp_path)
    monkeypatch.setattr(sweep, "_worker", _caching_worker)
    rows = [sweep_rows.Row("transformers", t, "base", "encoder", "M") for t in ("bert", "gpt2")]
    saved = []
    results = sweep.score_rows(
        rows, ["torchscript"], [2], timeout=5, memory_gb=8, save=saved.append, prune=prune
    )
    assert [len(r["cases"]) for r in results] == [1, 1] and len(saved) == 2
    cached = sorted(p.name for p in tmp_path.iterdir() if p.name != "results")
    assert cached == ([] if prune else [f"{r.name}-{sweep_rows.row_key(r)}" for r in rows])


def test_a_refusal_advising_both_is_followed_with_the_reference_within_the_bound(monkeypatch):
    """Both advised: the bounded run gets the reference too, where it is within the bound; a
    reference over the traced size (a model torch takes no smaller) is left out of it; a bound
    the run with the reference advises is followed too."""
    runs = []

    def fake_symbolize(arch, static, traced, timeout, bound=False, ref=None):
        runs.append((bound, ref))
        return {"status": "refused", "exit": 2, "message": "", "advice": ["bound"]}

    monkeypatch.setattr(sweep, "symbolize_by_cli", fake_symbolize)
    for sizes, within in (({"batch": 4, "seq": 7}, True), ({"batch": 4, "seq": 11}, False)):
        monkeypatch.setattr(sweep, "_reference", lambda *a, s=sizes: (Path("refs"), s, ""))
        runs.clear()
        out = sweep.follow_advice(None, Path("m.onnx"), {"batch": 2, "seq": 8}, 1, ["ref", "bound"])
        assert runs == [(False, Path("refs")), (True, Path("refs") if within else None)]
        assert out["symbolize+ref"]["reference"] == sizes and "symbolize+bound" in out
        runs.clear()
        sweep.follow_advice(None, Path("m.onnx"), {"batch": 2, "seq": 8}, 1, ["ref"])
        assert [bound for bound, _ in runs] == [False, True]  # advised after the reference


def test_a_bounded_refusal_advising_reference_cases_is_followed_with_one_within_the_bound(
    monkeypatch,
):
    """The other order (LongT5 by TorchScript): the plain refusal advises a bound, the bounded
    run's refusal then reference cases; the bounded run is made again with one, at the first
    size within the bound (one over it is skipped), the first bounded run kept beside it."""
    runs = []

    def fake_symbolize(arch, static, traced, timeout, bound=False, ref=None):
        runs.append((bound, ref))
        if ref is None:
            return {"status": "refused", "exit": 2, "message": "coincident", "advice": ["ref"]}
        return {"status": "pass", "exit": 0, "message": "4 sizes ok"}

    def fake_reference(arch, static, traced, least=None, within=False):
        sizes = [{"batch": 4, "seq": 11}, {"batch": 4, "seq": 7}]
        sizes = [s for s in sizes if not within or s["seq"] <= traced["seq"]]
        return Path(f"refs-{sizes[0]['seq']}"), sizes[0], ""

    monkeypatch.setattr(sweep, "symbolize_by_cli", fake_symbolize)
    monkeypatch.setattr(sweep, "_reference", fake_reference)
    out = sweep.follow_advice(None, Path("m.onnx"), {"batch": 2, "seq": 8}, 1, ["bound"])
    assert runs == [(True, None), (True, Path("refs-7"))]
    bound = out["symbolize+bound"]
    assert bound["status"] == "pass" and bound["reference"] == {"batch": 4, "seq": 7}
    assert bound["without reference"] == {"status": "refused", "message": "coincident"}
    assert sweep.after_advice({"symbolize": {"status": "refused"}, **out})["+bound"]
    runs.clear()  # both advised, the reference over the bound: the bounded run gets one within
    out = sweep.follow_advice(None, Path("m.onnx"), {"batch": 2, "seq": 8}, 1, ["ref", "bound"])
    assert runs == [(False, Path("refs-11")), (True, None), (True, Path("refs-7"))]


def test_a_refusal_naming_the_sizes_its_reference_must_reach_gets_a_case_there():
    """symbolize's one-point refusal asks for reference cases where the stage it met reaches 2
    (``height 32 or more, width 32 or more``): the sweep, as a user following it, records its
    case at least there, at sizes no check uses, before the sizes it tries otherwise."""
    from test_one_point_refs import AXES, TRACED

    import onnxsurgery
    from onnxsurgery.errors import PassError
    from onnxsurgery.passes.symbolize import Symbolize

    with pytest.raises(PassError) as info:
        Symbolize(**AXES)(TRACED, onnxsurgery.PassContext(provider="cpu"))
    least = sweep_rows.advised_least(str(info.value))
    assert least == {"height": 32, "width": 32}
    assert sweep_rows.advised_least("pass reference cases (--ref) at another batch") == {}
    rows, _ = sweep_rows.enumerate_rows()
    [row] = sweep.select(rows, only=["mobilenet_v2.base"])
    arch = sweep_rows.architecture(row, "mobilenet-probe")
    traced = arch.traced[0]
    first, *rest = sweep_rows.reference_sizes(arch, traced, {"height": 100, "width": 90})
    assert first["height"] >= 100 and first["width"] >= 90 and first["batch"] >= 2
    for sym, value in first.items():
        assert value not in {s[sym] for s in (*arch.traced, *arch.checks)}, sym
    assert rest == sweep_rows.reference_sizes(arch, traced)


def test_last_the_reference_keeps_one_symbol_at_its_traced_value_for_a_model_that_takes_no_other():
    """TimeSformer's torch code takes one width only (its patch grid's width is read from the
    config): after the sizes that change every symbol, the sweep tries them with one symbol at a
    time back at its traced value; none is a traced or check size."""
    rows, _ = sweep_rows.enumerate_rows()
    [row] = sweep.select(rows, only=["mobilenet_v2.base"])
    arch = sweep_rows.architecture(row, "mobilenet-probe")
    traced = arch.traced[0]
    sizes = sweep_rows.reference_sizes(arch, traced)
    first, rest = sizes[:4], sizes[4:]
    assert rest and all(r not in [*arch.traced, *arch.checks, *first] for r in rest)
    assert rest[:2] == [
        {**first[0], "height": traced["height"]},
        {**first[0], "width": traced["width"]},
    ]
    assert all(sum(r[k] == traced[k] for k in ("height", "width")) == 1 for r in rest)


def test_the_oracle_forgives_rounding_within_the_output_s_scale_and_nothing_more():
    from corpus.harness import mismatch

    # torchvision's resnet18 with random weights at 32x32: logits up to 460; ORT and torch
    # differ by 4.6e-4, at elements near 0 too (the static export itself was "mismatch")
    torch_out = np.linspace(-460.0, 460.0, 1000).astype(np.float32)[None]
    torch_out[0, 500] = 0.05
    ort_out = torch_out.copy()
    ort_out[0, 500] += 4.6e-4
    assert mismatch("out_0", ort_out, torch_out) == ("", pytest.approx(4.6e-4, rel=1e-2))
    wrong = torch_out.copy()
    wrong[0, 500] += 0.05  # a reading off by the value itself
    problem, err = mismatch("out_0", wrong, torch_out)
    assert problem.startswith("out_0: max abs err 0.05 (output scale 460)")
    small = torch_out / 460.0  # values of 1: 4.6e-4 at an element near 0 is past rounding
    problem, _ = mismatch("out_0", small + np.float32(4.6e-4), small)
    assert problem


def _slow_worker(row, exporters, batches, sink, *rest):
    """Builds, scores one case, then hangs (a row whose next export never ends)."""
    import json
    import time

    with open(sink, "a") as f:
        f.write(json.dumps({"build": "ok", "signature": {}}) + "\n")
        f.write(json.dumps({"case": {"exporter": "torchscript", "batch": 2}}) + "\n")
    time.sleep(60)


def test_a_row_past_its_budget_is_unfinished_with_the_cases_it_scored(tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(sweep, "sweep_root", lambda: tmp_path)
    monkeypatch.setattr(sweep, "_worker", _slow_worker)
    row = sweep_rows.Row("transformers", "bert", "base", "encoder", "BertModel")
    start = time.perf_counter()
    result = sweep.score_row(row, ("torchscript",), (2, 1), timeout=240, memory_gb=8, row_budget=2)
    assert time.perf_counter() - start < 20  # not 60 + 240 * 5 * 2 seconds
    assert result["build"] == "ok" and len(result["cases"]) == 1
    assert result["worker"] == "worker took longer than 2 s after 1 case(s)"


def test_a_cache_from_another_build_is_dropped_before_a_row_is_scored(tmp_path):
    """Exports and references of one build only: a builder whose weights changed, or a cache
    from before the weights were recorded, loses its exports' stamps and references (redone),
    so a static model is never scored against torch of other weights (Bailing hybrid: 3.44)."""
    from dataclasses import replace

    import torch
    from corpus.architectures import Architecture, InputSpec, OutputSpec
    from corpus.harness import arch_root, current_cache

    scale = [1.0]

    def builder():
        layer = torch.nn.Linear(2, 2)
        with torch.no_grad():
            layer.weight.mul_(scale[0])
        return layer

    arch = Architecture(
        "tiny", "test", builder, (InputSpec("x", ("batch", 2)),), (OutputSpec("y", ("batch", 2)),),
        ({"batch": 2},), ({"batch": 3},),
    )  # fmt: skip
    arch = replace(arch, cache=tmp_path)
    root = arch_root(arch)

    def cached() -> list[Path]:
        made = [root / "torchscript" / "b2" / "model.stamp.json", root / "references" / "b3.npz"]
        for path in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
        return made

    made = cached()
    assert current_cache(arch)  # no weights recorded beside them: redone once
    assert not any(p.exists() for p in made)
    made = cached()
    assert not current_cache(arch)  # the same build: kept
    assert all(p.exists() for p in made)
    scale[0] = 2.0
    assert current_cache(arch)  # another build: dropped
    assert not any(p.exists() for p in made)


def test_a_parameter_built_frozen_is_left_as_built():
    """Every trained parameter gets noise (no real model has zero biases and unit norms); one
    the module builds frozen does not: Pegasus's sinusoidal position table (an
    nn.Embedding(_freeze=True) filled by create_weight) is in a checkpoint exactly as built, and
    with noise on it, symbolize was refused where a real Pegasus decoder passes."""
    import torch
    from corpus.architectures import Architecture, InputSpec, OutputSpec

    table = torch.arange(12.0).reshape(6, 2)

    def builder():
        net = torch.nn.Module()
        net.positions = torch.nn.Embedding.from_pretrained(table.clone(), freeze=True)
        net.proj = torch.nn.Linear(2, 2)
        torch.nn.init.zeros_(net.proj.bias)
        return net

    arch = Architecture(
        "tiny", "test", builder, (InputSpec("x", ("batch", 2)),), (OutputSpec("y", ("batch", 2)),),
        ({"batch": 2},), ({"batch": 3},),
    )  # fmt: skip
    net = arch.build()
    assert torch.equal(net.positions.weight, table)
    assert not torch.equal(net.proj.bias, torch.zeros(2))  # trained: perturbed
    assert not any(p.requires_grad for p in net.parameters())


def test_each_row_names_the_commit_its_checkout_is_at_when_it_starts(tmp_path, monkeypatch):
    """A sweep of hours may see its checkout move: the commit is read for each row, not once."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "a")
    first = git("rev-parse", "--short", "HEAD")
    monkeypatch.setattr(sweep, "REPO", tmp_path)
    assert sweep._commit() == first
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "b")
    assert sweep._commit() == git("rev-parse", "--short", "HEAD") != first
