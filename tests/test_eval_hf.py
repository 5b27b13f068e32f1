"""`dlmlab eval` on a Hugging Face folder: the held-out NLL equals the one computed by hand."""

from __future__ import annotations

import json

import pytest
import torch

from dlmlab.cli.main import main
from run_util import write_corpus


def _tiny_gpt2_folder(path):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=12, n_positions=32, bos_token_id=None, eos_token_id=None,
    )).eval().save_pretrained(path)
    vocab = {w: i for i, w in enumerate("the cat sat on mat. dog ran to it. [UNK]".split())}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(path)


def test_eval_works_on_a_hugging_face_folder(tmp_path, capsys):
    import math

    import dlmlab
    from dlmlab.objectives import ar_loss

    hf = tmp_path / "gpt2"
    _tiny_gpt2_folder(hf)
    src = write_corpus(tmp_path)
    assert main(["eval", str(hf), "--source", str(src), "--seq-len", "8", "--batch-size", "2", "--batches", "2"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["format"], res["seq_len"]) == ("gpt2", 8) and math.isclose(res["ppl"], math.exp(res["nll"]))
    # the same number by hand: windows of 9 tokens from the last 10% of the text
    run = dlmlab.load(hf)
    ids = torch.tensor(run.tokenizer.encode(src.read_text()))
    val = ids[int(len(ids) * 0.9):]
    x = val[: 4 * 9].view(4, 9)
    with torch.no_grad():
        want = sum(ar_loss(run.model, xb)[0].item() for xb in x.split(2)) / 2
    assert res["nll"] == pytest.approx(want, rel=1e-6)
    # a window longer than the model's positions is a one-line error
    assert main(["eval", str(hf), "--source", str(src), "--seq-len", "40"]) == 2
    assert "positions" in capsys.readouterr().err
