"""HF fine-tuning entry point of the reversal study, on tiny random LLaMA / Qwen2 models built here."""

import json

import pytest
import torch

from dlmlab.config import ConfigError
from dlmlab.studies.reversal.hf_finetune import HFFinetuneConfig, HFLogits, finetune, load_local, main
from dlmlab.tasks.relations import load_person_description, train_relation_tokenizer
from dlmlab.training import TrainConfig

transformers = pytest.importorskip("transformers")


def make_checkpoint(path, arch="llama", mask=True):
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    texts = load_person_description("p2d_prompts_train").texts()[:90]
    specials = ["[PAD]", "[EOS]"] + (["[MASK]"] if mask else [])
    bpe = train_relation_tokenizer(texts + load_person_description("p2d_reverse_prompts_test").texts()[:30], 400)
    bpe.tok.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe.tok, pad_token="[PAD]", eos_token="[EOS]",
                                  **({"mask_token": "[MASK]"} if mask else {}))
    common = dict(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_wrapper_attention_direction(tmp_path, arch):
    model, tok = load_local(make_checkpoint(tmp_path, arch))
    x = torch.randint(0, 300, (2, 10))
    y = x.clone()
    y[:, -1] = (y[:, -1] + 1) % 300
    for bidir in (False, True):
        w = HFLogits(model, bidirectional=bidir).eval()
        with torch.no_grad():
            a, b = w(x), w(y)
        changed_early = not torch.allclose(a[:, :5], b[:, :5], atol=1e-6)
        assert changed_early == bidir
    # the Dream-style shift moves logits one position right
    with torch.no_grad():
        plain, shifted = HFLogits(model, False)(x), HFLogits(model, False, shift=True)(x)
    torch.testing.assert_close(shifted[:, 1:], plain[:, :-1])


@pytest.mark.parametrize("objective,arch", [("mdm", "llama"), ("ar", "qwen2")])
def test_finetune_end_to_end(tmp_path, objective, arch):
    ck = make_checkpoint(tmp_path / "ck", arch)
    cfg = HFFinetuneConfig(model_path=str(ck), objective=objective, n_facts=3, seq_len=200,
                           train=TrainConfig(steps=3, batch_size=4, lr=1e-3, log_every=1, weight_decay=0.0))
    res = finetune(cfg, tmp_path / "out", progress=False)
    assert 0.0 <= res["forward_acc"] <= 1.0 and 0.0 <= res["reverse_acc"] <= 1.0
    assert res["chance"] == pytest.approx(1 / 3)
    saved = json.loads((tmp_path / "out" / "hf_reversal.json").read_text())
    assert saved["objective"] == objective and saved["final_loss"] > 0


def test_finetune_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no local checkpoint"):
        load_local(tmp_path / "missing")
    with pytest.raises(ConfigError, match="model_path"):
        finetune(HFFinetuneConfig())
    ck = make_checkpoint(tmp_path / "nomask", mask=False)
    with pytest.raises(ConfigError, match="mask token"):
        finetune(HFFinetuneConfig(model_path=str(ck), objective="mdm", n_facts=3))
    with pytest.raises(ConfigError, match="outside the model's vocabulary"):
        finetune(HFFinetuneConfig(model_path=str(ck), objective="mdm", mask_token_id=10**6, n_facts=3))


def test_cli_main(tmp_path):
    ck = make_checkpoint(tmp_path / "ck")
    rc = main(["--model", str(ck), "--objective", "mdm", "--n-facts", "2", "--seq-len", "200", "--steps", "2",
               "--batch-size", "2", "--out", str(tmp_path / "o"), "--no-progress"])
    assert rc == 0 and (tmp_path / "o" / "hf_reversal.json").exists()
