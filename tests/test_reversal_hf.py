"""The reversal fine-tuning entry point on tiny random checkpoints written here in each format: LLaDA (its own
parameter names, mask id in config.json), Dream (Qwen2 layout, shifted logits), Llama and Qwen2 (AR baselines),
each with a tokenizer trained on the relation texts.  Nothing is downloaded, no remote code runs."""

import functools
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")
from safetensors.torch import save_file  # noqa: E402

from dlmlab.config import ConfigError  # noqa: E402
from dlmlab.errors import UserError  # noqa: E402
from dlmlab.studies.reversal import hf_signatures as sig  # noqa: E402
from dlmlab.studies.reversal.hf_finetune import (AlignedLM, HFFinetuneConfig, finetune, load_model,  # noqa: E402
                                                 main)
from dlmlab.tasks.relations import load_person_description, train_relation_tokenizer  # noqa: E402
from dlmlab.training import TrainConfig  # noqa: E402
from dlmlab.training.lora import LoraSettings  # noqa: E402
from llada_format import llada_config, llada_weights  # noqa: E402


@functools.lru_cache(maxsize=1)
def _tokenizer():
    """A BPE trained on the relation texts with [PAD], [EOS], [BOS], [MASK] as a transformers tokenizer."""
    from transformers import PreTrainedTokenizerFast

    texts = load_person_description("p2d_prompts_train").texts()[:90]
    bpe = train_relation_tokenizer(texts + load_person_description("p2d_reverse_prompts_test").texts()[:30], 400)
    bpe.tok.add_special_tokens(["[PAD]", "[EOS]", "[BOS]", "[MASK]"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe.tok, pad_token="[PAD]", eos_token="[EOS]", bos_token="[BOS]",
                                   mask_token="[MASK]")


@pytest.fixture(scope="module")
def tokenizer():
    return _tokenizer()


def _hf(kind: str, vocab: int):
    common = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256, tie_word_embeddings=False)
    torch.manual_seed(0)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))


def _llada_folder(path, hf, mask_id: int):
    """A Llama's weights under LLaDA's parameter names and config (non-fused llama block)."""
    cfg = llada_config(hf.config, max_sequence_length=256, mask_token_id=mask_id)
    w = llada_weights(hf)
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    save_file({k: v.contiguous() for k, v in w.items()}, str(path / "model.safetensors"))


def make_checkpoint(path, fmt: str, tok):
    """A tiny random checkpoint folder of ``fmt`` (llada | dream | llama | qwen2) with ``tok`` saved beside it."""
    hf = _hf("qwen2" if fmt in ("dream", "qwen2") else "llama", len(tok))
    if fmt == "llada":
        _llada_folder(path, hf, tok.mask_token_id)
    else:
        hf.save_pretrained(path)
        if fmt == "dream":
            cfg = json.loads((path / "config.json").read_text())
            cfg.update(model_type="Dream", architectures=["DreamModel"], mask_token_id=tok.mask_token_id)
            (path / "config.json").write_text(json.dumps(cfg))
    tok.save_pretrained(path)
    return path


def _cfg(ck, **kw):
    train = TrainConfig(steps=3, batch_size=4, lr=3e-3, log_every=1, weight_decay=0.0, progress=False)
    return HFFinetuneConfig(**{"model_path": str(ck), "n_facts": 3, "seq_len": 96, "n_signature_facts": 3,
                               "train": train, **kw})


@pytest.mark.parametrize("fmt,objective,shift", [("llada", "mdm", False), ("dream", "mdm", True),
                                                 ("llama", "ar", False), ("qwen2", "ar", False)])
def test_finetune_end_to_end(tmp_path, tokenizer, fmt, objective, shift):
    ck = make_checkpoint(tmp_path / fmt, fmt, tokenizer)
    res = finetune(_cfg(ck, eval_every=2, lora=LoraSettings(r=4) if fmt == "llada" else None), tmp_path / "out",
                   progress=False)
    assert (res["format"], res["objective"], res["shift_logits"]) == (fmt, objective, shift)
    if objective == "mdm":
        assert res["mask_id"] == tokenizer.mask_token_id  # from the checkpoint's config.json
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    for key in ("forward_acc", "reverse_acc", "forward_acc_per_token", "reverse_acc_per_token"):
        assert 0.0 <= saved[key] <= 1.0 and saved[key] == saved["signatures"][-1][key]
    assert saved["chance"] == pytest.approx(1 / 3) and saved["final_loss"] > 0
    trace = saved["signatures"]
    assert [s["step"] for s in trace] == [0, 2, 3]  # start, every eval_every, end
    for s in trace:
        for d in ("reverse", "forward"):
            assert 0 < s[f"{d}_p"] < 1 and 0 < s[f"{d}_p_control"] < 1 and 0 <= s[f"{d}_acc"] <= 1
        assert -1 <= s["grad_cosine"] <= 1 and -1 <= s["grad_cosine_control"] <= 1
        assert len(s["grad_cosine_per_fact"]) == 3
        # the reported cosine is the mean of the per-fact cosines (float64, plain)
        assert s["grad_cosine"] == pytest.approx(sum(s["grad_cosine_per_fact"]) / 3, rel=1e-12, abs=1e-15)
        assert all(-1 - 1e-9 <= c <= 1 + 1e-9 for c in s["grad_cosine_per_fact"])
        if objective == "mdm":
            assert len(s["attn_corr_per_layer"]) == 2 and -1 <= s["attn_corr"] <= 1
            finite = [c for c in s["attn_corr_per_layer"] if c == c]  # the mean over layers with a correlation
            assert s["attn_corr"] == pytest.approx(sum(finite) / len(finite), rel=1e-12, abs=1e-15)
        else:
            assert s["attn_corr"] is None  # no A -> B attention in a causal forward document
    assert (tmp_path / "out" / "adapters.safetensors").exists() == (fmt == "llada")
    lines = (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]
    assert saved["final_loss"] == json.loads(lines[-1])["loss"]  # the last logged step's loss


def test_aligned_lm_prepends_bos_and_realigns_shifted_logits(tmp_path, tokenizer):
    model, info = load_model(make_checkpoint(tmp_path / "d", "dream", tokenizer))
    assert info.shift_logits and info.objective == "mdm"
    x = torch.randint(0, 300, (2, 9))
    bos = tokenizer.bos_token_id
    with torch.no_grad():
        raw = model(torch.cat([torch.full((2, 1), bos), x], 1))
        shifted = AlignedLM(model, bos, shift=True)(x)
        plain = AlignedLM(model, bos, shift=False)(x)
        no_bos = AlignedLM(model, None, shift=True)(x)
        inner = model(x)
    torch.testing.assert_close(shifted, raw[:, :-1])  # position i scored by the output in front of it
    torch.testing.assert_close(plain, raw[:, 1:])
    torch.testing.assert_close(no_bos[:, 1:], inner[:, :-1])
    torch.testing.assert_close(no_bos[:, 0], inner[:, 0])


def test_signature_spans_mark_name_and_description(tokenizer):
    from dlmlab.studies.reversal.hf_finetune import _Encoder, signature_docs

    enc = _Encoder(tokenizer)
    fwd, rev = signature_docs(HFFinetuneConfig(model_path="x", n_facts=3, n_signature_facts=3), enc, 0)
    name = load_person_description("p2d_reverse_prompts_test").completions[0]
    ids = enc.encode(name)
    assert rev.tokens[0][rev.a[0]].tolist() == ids
    assert fwd.tokens[0][fwd.a[0]].tolist() == ids  # the same tokens for A in both documents
    assert (fwd.b.sum(1) > 0).all() and (rev.b.sum(1) > 0).all() and not (fwd.a & fwd.b).any()
    cf, cr = signature_docs(HFFinetuneConfig(model_path="x", dataset="celebrity", n_facts=4, n_signature_facts=3),
                            enc, 0)
    assert cf.tokens.shape[0] == 3 and (cf.a.sum(1) > 0).all() and (cr.a.sum(1) > 0).all()


def test_gradient_cosine_matches_autograd_on_weights(tmp_path, tokenizer):
    """The per-fact storage cosine from module hooks equals the cosine of autograd weight gradients."""
    from dlmlab.studies.reversal.hf_finetune import _Encoder, signature_docs

    model, info = load_model(make_checkpoint(tmp_path / "l", "llada", tokenizer))
    lm = AlignedLM(model, tokenizer.bos_token_id, False)
    fwd, rev = signature_docs(HFFinetuneConfig(model_path="x", n_facts=3, n_signature_facts=3), _Encoder(tokenizer),
                              tokenizer.pad_token_id)
    got = sig.storage_gradient_cosines(lm, fwd, rev, "mdm", info.mask_id)["per_fact"]
    ws = [p for n, p in model.named_parameters() if n.endswith(("attn.W_v.weight", "attn.W_o.weight"))]
    for n in range(3):
        g = [torch.cat([t.flatten() for t in torch.autograd.grad(
            sig.span_nll(lm, d.tokens[n:n + 1], d.a[n:n + 1], "mdm", info.mask_id).sum(), ws)]) for d in (fwd, rev)]
        want = torch.nn.functional.cosine_similarity(g[0], g[1], dim=0)
        assert float(got[n]) == pytest.approx(float(want), abs=1e-4)


def test_errors(tmp_path, tokenizer):
    with pytest.raises(ConfigError, match="model_path"):
        HFFinetuneConfig()
    with pytest.raises(ConfigError, match="device must be"):
        HFFinetuneConfig(model_path="x", device="gpu0")
    with pytest.raises(ConfigError, match="n_signature_facts"):
        HFFinetuneConfig(model_path="x", n_facts=3, n_signature_facts=5)
    with pytest.raises(UserError, match="no local checkpoint"):
        load_model(tmp_path / "missing")
    ck = make_checkpoint(tmp_path / "ll", "llama", tokenizer)
    with pytest.raises(ConfigError, match="outside the model's vocabulary"):
        finetune(_cfg(ck, objective="mdm", mask_token_id=10**6), progress=False)


def test_cli_with_yaml_and_lora(tmp_path, tokenizer):
    ck = make_checkpoint(tmp_path / "ck", "llada", tokenizer)
    (tmp_path / "c.yaml").write_text(f"model_path: {ck}\nn_facts: 3\nn_signature_facts: 3\n"
                                     "train: {steps: 2, batch_size: 2, lr: 0.001, log_every: 1}\n")
    rc = main(["--config", str(tmp_path / "c.yaml"), "--lora-r", "2", "--steps", "1", "--out", str(tmp_path / "o"),
               "--no-progress"])
    res = json.loads((tmp_path / "o" / "results.json").read_text())
    assert rc == 0 and res["lora"] and res["config"]["lora"]["r"] == 2 and res["config"]["train"]["steps"] == 1
    (tmp_path / "bad.yaml").write_text(f"model_path: {ck}\nn_fact: 3\n")
    assert main(["--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "o2")]) == 2


def test_tokenizer_with_remote_class_loads_without_running_it(tmp_path, tokenizer):
    from dlmlab.studies.reversal.hf_finetune import load_tokenizer

    tokenizer.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    cfg.update(tokenizer_class="DreamTokenizer", bos_token={"content": "[BOS]", "special": True},
               auto_map={"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]})
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    (tmp_path / "tokenization_dream.py").write_text(f"open({str(tmp_path / 'EXECUTED')!r}, 'w')\n")
    tok = load_tokenizer(tmp_path)
    assert not (tmp_path / "EXECUTED").exists()
    assert (tok.bos_token_id, tok.pad_token_id, tok.mask_token_id) == (
        tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.mask_token_id)


def test_shipped_gpu_config_loads():
    from pathlib import Path

    from dlmlab.config import load_yaml

    for path in sorted((Path(__file__).parents[1] / "configs" / "reversal_finetune").glob("*.yaml")):
        cfg = load_yaml(HFFinetuneConfig, path)
        assert cfg.lora is not None and cfg.dtype == "bfloat16", path


def test_summary_of_runs(tmp_path, tokenizer):
    from dlmlab.studies.reversal.hf_summary import main as summary_main

    for fmt in ("llada", "qwen2"):
        finetune(_cfg(make_checkpoint(tmp_path / fmt, fmt, tokenizer), train=TrainConfig(steps=1, batch_size=2,
                                                                                         progress=False)),
                 tmp_path / f"run_{fmt}", progress=False)
    assert summary_main([str(tmp_path / "run_llada"), str(tmp_path / "run_qwen2"), "--out", str(tmp_path / "s")]) == 0
    md = (tmp_path / "s" / "summary.md").read_text()
    assert "| run_llada | llada | mdm |" in md and "| run_qwen2 | qwen2 | ar |" in md
    f = lambda x: "n/a" if x is None else f"{x:.3g}"  # noqa: E731
    for fmt in ("llada", "qwen2"):  # each row quotes its run's own results.json (the last signatures, the first p)
        r = json.loads((tmp_path / f"run_{fmt}" / "results.json").read_text())
        first, s = r["signatures"][0], r["signatures"][-1]
        cells = [f"run_{fmt}", fmt, r["objective"], "LoRA" if r["lora"] else "full", f(r["chance"]),
                 f(r["forward_acc"]), f(r["reverse_acc"]), f"{f(s['reverse_p'])} / {f(s['reverse_p_control'])}",
                 f"{f(first['reverse_p'])} -> {f(s['reverse_p'])}",
                 f"{f(s['grad_cosine'])} / {f(s['grad_cosine_control'])}",
                 f"{f(s.get('attn_corr'))} / {f(s.get('attn_corr_control'))}"]
        assert "| " + " | ".join(cells) + " |" in md.splitlines(), (cells, md)
    assert (tmp_path / "s" / "figures" / "signatures.png").stat().st_size > 0
    assert summary_main([str(tmp_path / "nothing"), "--out", str(tmp_path / "s2")]) == 2
