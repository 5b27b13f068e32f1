"""The causal backbone of the PreDiff study: pretrained here (GPT-2 architecture) or loaded from a local HF directory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from dlmlab.data import BPETokenizer, TokenStream, load_tokenizer, resolve_text
from dlmlab.models import Transformer
from dlmlab.models.hf_gpt2 import load_gpt2, save_gpt2
from dlmlab.models.hf_llama import load_llama
from dlmlab.prediff.objectives import MethodConfig, make_task
from dlmlab.studies.prediff.presets import PreDiffPreset
from dlmlab.training import train
from dlmlab.training.distributed import is_main_process, sync


def hf_tokenizer(path: Path):
    """``tokenizer.json`` of a HF model directory, or its GPT-2 ``vocab.json`` + ``merges.txt``."""
    if (path / "tokenizer.json").exists():
        return load_tokenizer(path / "tokenizer.json")
    if (path / "vocab.json").exists() and (path / "merges.txt").exists():
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers

        tok = Tokenizer(models.BPE.from_file(str(path / "vocab.json"), str(path / "merges.txt")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        return BPETokenizer(tok)
    raise FileNotFoundError(f"{path} has no tokenizer.json (or vocab.json + merges.txt)")


def prepare(p: PreDiffPreset, out: Path, progress: bool = True) -> tuple[Transformer, object, TokenStream, dict]:
    """-> (causal backbone, tokenizer, token stream split train/val, info dict for results.json)."""
    text = resolve_text(p.resolved(p.corpus)).read_text(encoding="utf-8")
    cut = int(len(text) * (1 - p.val_fraction))
    info: dict = {}
    if p.backbone_path:
        path = Path(p.resolved(p.backbone_path))
        backbone = load_gpt2(path) if p.backbone_kind == "gpt2" else load_llama(path)
        tokenizer = hf_tokenizer(path)
        info["backbone"] = {"source": str(path), "kind": p.backbone_kind}
    else:
        tokenizer = BPETokenizer.train(text[:cut], p.bpe_vocab)
    stream = TokenStream(torch.tensor(tokenizer.encode(text), dtype=torch.long), p.val_fraction)
    if not p.backbone_path:
        cfg = dataclasses.replace(p.model, vocab_size=tokenizer.vocab_size, attn_mask="causal", positions="learned",
                                  norm="layernorm", tie_embeddings=True)
        torch.manual_seed(p.pretrain.seed)
        model = Transformer(cfg).to(p.device)
        pre = MethodConfig("pretrain", attention="causal", objective="ar")
        batches, objective = make_task(pre, stream.train, p.seq_len, p.pretrain.batch_size, p.pretrain.steps)
        cfg_train = dataclasses.replace(p.pretrain, progress=p.pretrain.progress and progress)
        history = train(model, cfg_train, batches, objective, out_dir=out / "runs" / "pretrain", desc="pretrain AR",
                        tokenizer=tokenizer)
        hf_dir = out / "backbone"
        if is_main_process():  # under torchrun rank 0 writes the backbone, every rank reads it back
            save_gpt2(model.cpu(), hf_dir)
            tokenizer.save(hf_dir / "tokenizer.json")
        sync()
        model.cpu()
        backbone = load_gpt2(hf_dir)
        x = stream.val[: p.seq_len][None]
        with torch.no_grad():
            diff = (backbone(x) - model(x)).abs().max().item()
        info["backbone"] = {"source": "pretrained here", "hf_dir": "backbone", "pretrain_steps": p.pretrain.steps,
                            "final_train_loss": history[-1]["loss"] if history else None,
                            "hf_roundtrip_max_logit_diff": diff, "params": backbone.num_params()}
        if is_main_process():
            (hf_dir / "dlmlab_pretrain.json").write_text(json.dumps(info["backbone"], indent=1))
    info["tokenizer_vocab"] = tokenizer.vocab_size
    info["tokens"] = {"train": len(stream.train), "val": len(stream.val)}
    return backbone.to(p.device).eval(), tokenizer, stream, info
