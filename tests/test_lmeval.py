"""The lm-evaluation-harness backend ``dlmlab`` (dlmlab.lmeval), offline: its peer the harness's own ``hf`` backend on
a tiny random GPT-2 folder written here (same loglikelihoods, rolling perplexities, generations and task scores), a
tiny masked-diffusion run through ``lm_eval.simple_evaluate`` and ``dlmlab lm-eval``, the rolling bound against
``dlmlab eval``'s ELBO bound, and the Monte Carlo estimators against the exact NELBO."""

import functools
import json
import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before the harness and datasets read them
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
lm_eval = pytest.importorskip("lm_eval")
transformers = pytest.importorskip("transformers")

from dlmlab.cli.main import main  # noqa: E402
from dlmlab.lmeval import DlmlabLM, task_manager  # noqa: E402
from dlmlab.lmeval import estimators as E  # noqa: E402

TASKS = ["dlmlab_reversal_mc", "dlmlab_wikitext2", "dlmlab_repeat_gen"]


@functools.lru_cache(maxsize=1)
def _task_chars() -> str:
    """Every character of the task texts the tests read (so a char tokenizer covers them)."""
    from dlmlab.lmeval.tasks import utils

    pages = utils.wikitext2()["test"]["page"][:3]
    mc = utils.reversal_mc()["test"]
    rows = [r["prompt"] + " ".join(r["choices"]) for r in mc]
    return "".join(sorted(set("".join(pages + rows) + "Repeat:\nAgain ")))


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A tiny random GPT-2 folder with a character tokenizer (EOS included)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    path = tmp_path_factory.mktemp("gpt2")
    chars = _task_chars()
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({"[EOS]": len(vocab), "[UNK]": len(vocab) + 1})
    torch.manual_seed(0)
    transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=len(vocab), n_positions=256, bos_token_id=None, eos_token_id=None,
    )).eval().save_pretrained(path)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def mdlm_run(tmp_path_factory):
    """A tiny masked-diffusion run (char tokenizer over the task texts), trained a few steps."""
    d = tmp_path_factory.mktemp("mdlm")
    corpus = d / "corpus.txt"
    chars = _task_chars()
    g = torch.Generator().manual_seed(0)
    corpus.write_text("".join(chars[i] for i in torch.randint(0, len(chars), (3000,), generator=g).tolist()) + chars)
    cfg = d / "mdlm.yaml"
    cfg.write_text(f"objective: mdlm\nmodel: {{d_model: 16, n_layers: 1, n_heads: 2, d_mlp: 32, max_seq_len: 32, "
                   f"positions: rope, attn_mask: bidirectional}}\ndata: {{source: {corpus}, tokenizer: char, seq_len: 32}}\n"
                   "train: {steps: 40, batch_size: 8, lr: 3.0e-3, progress: false}\neval_batches: 4\n")
    assert main(["train", str(cfg), "--out", str(d / "run")]) == 0
    return d / "run"


def _evaluate(lm, tasks, limit):
    return lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=task_manager(include_defaults=False), limit=limit, log_samples=True)


def _scores(res) -> dict:
    return {t: {k: v for k, v in d.items() if k not in ("name", "alias", "sample_len")} for t, d in res["results"].items()}


def test_hf_backend_and_dlmlab_agree_on_a_tiny_gpt2(gpt2_folder):
    from lm_eval.models.huggingface import HFLM

    ours = _evaluate(DlmlabLM(path=str(gpt2_folder), batch_size=16), TASKS, 3)
    peer = _evaluate(HFLM(pretrained=str(gpt2_folder), batch_size=16, device="cpu"), TASKS, 3)
    for task in TASKS:
        a, b = ours["samples"][task], peer["samples"][task]
        assert len(a) == len(b) == 3
        for x, y in zip(a, b):
            for ra, rb in zip(x["resps"], y["resps"]):
                ra, rb = ra[0], rb[0]
                if isinstance(ra, str):  # a generation
                    assert ra == rb
                elif isinstance(ra, (tuple, list)):  # (loglikelihood, is_greedy)
                    assert ra[0] == pytest.approx(rb[0], rel=1e-5, abs=1e-4) and ra[1] == rb[1]
                else:  # a rolling loglikelihood
                    assert ra == pytest.approx(rb, rel=1e-5)
    sa, sb = _scores(ours), _scores(peer)
    for task in TASKS:
        for k, v in sb[task].items():
            if isinstance(v, str):  # e.g. "N/A" for a standard error the harness does not compute
                assert sa[task][k] == v
            else:
                assert sa[task][k] == pytest.approx(v, rel=1e-5, abs=1e-9), (task, k)


def test_estimators_are_unbiased_for_the_exact_nelbo():
    """A synthetic CE (position difficulty + a mask-count effect + a pattern term) whose exact NELBO is known."""
    L = 6
    base = torch.tensor([0.2, 2.5, 0.7, 1.9, 0.1, 1.2], dtype=torch.float64)

    def ce(masks):
        n = masks.sum(1, keepdim=True).double()
        pattern = torch.sin(masks.double() @ torch.arange(1.0, L + 1, dtype=torch.float64))[:, None]
        return base[None] * (1 + 0.3 * n) + 0.2 * pattern

    exact, se0 = E.combine("dlmlab", E.exact_masks(L), ce(E.exact_masks(L)))
    assert se0 == 0.0 and E.is_exact("dlmlab", L, 63) and not E.is_exact("dlmlab", L, 62)
    # LLaDA's counts round k + j L / b half to even (as its code does), which favours even counts when j L / b
    # is a half integer: with L = 6, b = 8 two of eight offsets are ties, so 5/8 of the rows are even
    counts = torch.cat([E.plan("llada", L, 8, torch.Generator().manual_seed(s), batch=8).sum(1) for s in range(300)])
    assert (counts % 2 == 0).double().mean() == pytest.approx(5 / 8, abs=0.03)
    # b = 3 keeps clear of ties for L = 6
    for method, K, b in (("llada", 9, 3), ("dlmlab", 8, 8)):
        vals, ses = [], []
        for seed in range(400):
            masks = E.plan(method, L, K, torch.Generator().manual_seed(seed), batch=b)
            assert masks.shape == (K, L) and bool((masks.sum(1) >= 1).all())
            v, s = E.combine(method, masks, ce(masks))
            vals.append(v)
            ses.append(s)
        v = torch.tensor(vals)
        err = v.std() / math.sqrt(len(vals))
        assert abs(v.mean() - exact) < 4 * err, (method, float(v.mean()), exact)
        # the reported standard error is of the right size (collapsed strata: not below the real spread)
        assert 0.7 * v.std() < torch.tensor(ses).mean() < 2.0 * v.std()


def test_masked_diffusion_run_through_the_harness(mdlm_run):
    lm = DlmlabLM(path=str(mdlm_run), mc_num=4, batch_size=64, gen_steps=4, block_len=8)
    res = _evaluate(lm, TASKS, 2)
    s = _scores(res)
    # the scores from their definitions over the per-document loglikelihoods / generations our backend returned
    mc, wt, gen = (res["samples"][t] for t in TASKS)
    best = [max(range(len(x["resps"])), key=lambda i: x["resps"][i][0][0]) for x in mc]
    assert s["dlmlab_reversal_mc"]["acc,none"] == sum(b == x["target"] for b, x in zip(best, mc)) / len(mc)
    per_char = [max(range(len(x["resps"])), key=lambda i: x["resps"][i][0][0] / len(x["doc"]["choices"][i]))
                for x in mc]  # acc_norm: the loglikelihood per character of the choice
    assert s["dlmlab_reversal_mc"]["acc_norm,none"] == sum(b == x["target"] for b, x in zip(per_char, mc)) / len(mc)
    hits = [x["filtered_resps"][0].strip() == x["target"].strip() for x in gen]
    assert s["dlmlab_repeat_gen"]["exact_match,strip"] == sum(hits) / len(gen)
    nats, n_bytes = -sum(x["resps"][0][0] for x in wt), sum(len(x["doc"]["page"].encode()) for x in wt)
    assert s["dlmlab_wikitext2"]["bits_per_byte,none"] == pytest.approx(nats / n_bytes / math.log(2), rel=1e-9)
    kinds = {r["kind"] for r in lm.stats}
    assert {"loglikelihood", "rolling"} <= kinds
    report = lm.se_report()
    assert report["estimator"] == "dlmlab" and report["summary"]["loglikelihood"]["mean_se"] > 0
    assert all(r["se"] >= 0 and math.isfinite(r["se"]) for r in lm.stats)
    # the same request scores the same wherever it is batched (draws seeded per request)
    ctx, cont = lm.tok_encode("Repeat: a"), lm.tok_encode("bc defgh")
    one = lm.score_pairs([(ctx, cont)])[0]
    two = lm.score_pairs([(lm.tok_encode("xy"), cont), (ctx, cont)])[1]
    assert one.loglik == two.loglik and one.se == two.se > 0


def test_one_forward_serves_several_short_continuations(mdlm_run):
    """One-token answers after one prompt: exact (every subset), and the masked row is shared by all of them."""
    lm = DlmlabLM(path=str(mdlm_run), mc_num=8, greedy_check=False)
    ctx = lm.tok_encode("Repeat: ab")
    scores = lm.score_pairs([(ctx, lm.tok_encode(c)) for c in "xyz"])
    assert lm.scorer.last_forwards == 1 and all(s.se == 0 for s in scores)
    logits = lm.run.model(torch.tensor([ctx + [lm.run.mask_id]]))[0, -1]
    logits[lm.run.mask_id] = -math.inf
    for c, s in zip("xyz", scores):
        assert s.loglik == pytest.approx(float(logits.log_softmax(-1)[lm.tok_encode(c)[0]]), abs=1e-5)


def test_rolling_bound_matches_dlmlab_eval(mdlm_run, capsys):
    """The rolling ELBO bound over dlmlab eval's own windows equals its bound within their standard errors."""
    from lm_eval.api.instance import Instance

    from dlmlab.data import load_corpus
    from dlmlab.data.lm import TokenStream
    from dlmlab.training.lm import load_run, run_objective

    assert main(["eval", str(mdlm_run)]) == 0
    nelbo_eval = json.loads(capsys.readouterr().out)["nelbo"]
    model, cfg, tok = load_run(str(mdlm_run))
    stream, _ = load_corpus(cfg.data, tok)
    T = cfg.data.seq_len
    x = TokenStream.chunks(stream.val, T + 1, limit=cfg.eval_batches * cfg.train.batch_size)[:, :T]
    # dlmlab eval's own estimator (its objective's loss on its windows), replicated with other seeds: the
    # spread of one `dlmlab eval` number, and a mean of many with a small standard error
    obj = run_objective(cfg, tok.vocab_size)
    reps = []
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            b = [obj.loss(model, obj.make_batch(xb, g))[0].item() for xb in x.split(cfg.train.batch_size)]
        reps.append(sum(b) / len(b))
    reps = torch.tensor(reps, dtype=torch.float64)
    sd_eval, mean_eval = float(reps.std()), float(reps.mean())
    lm = DlmlabLM(path=str(mdlm_run), mc_num=16, greedy_check=False)
    docs = [tok.decode(row.tolist()) for row in x]
    assert all(lm.tok_encode(d) == row.tolist() for d, row in zip(docs, x))
    ll = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (d,), 0) for d in docs])
    rolls = [r for r in lm.stats if r["kind"] == "rolling"]
    n_tok = x.numel()
    nelbo = -sum(ll) / n_tok
    se = math.sqrt(sum(r["se"] ** 2 for r in rolls)) / n_tok
    assert abs(nelbo - nelbo_eval) < 3 * math.hypot(se, sd_eval), (nelbo, nelbo_eval, se, sd_eval)
    assert abs(nelbo - mean_eval) < 3 * math.hypot(se, sd_eval / math.sqrt(len(reps))), (nelbo, mean_eval, se, sd_eval)


def test_generation_batches_unequal_prompts_as_one_by_one(mdlm_run, gpt2_folder):
    from lm_eval.api.instance import Instance

    kw = {"until": ["\n"], "max_gen_toks": 6}
    prompts = ["Repeat: ab\nAgain:", "Re", "Repeat: abcdef\nAgain:", "Rep"]
    for path, extra in ((mdlm_run, {"gen_steps": 3, "block_len": 3}), (gpt2_folder, {})):
        lm = DlmlabLM(path=str(path), batch_size=4, **extra)
        reqs = [Instance("generate_until", {}, (p, kw), i) for i, p in enumerate(prompts)]
        together = lm.generate_until(reqs)
        alone = [lm.generate_until([r])[0] for r in reqs]
        assert together == alone and all("\n" not in t for t in together)


def test_cli_runs_the_harness(gpt2_folder, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["lm-eval", "--model_args", f"path={gpt2_folder},batch_size=4", "--tasks", "dlmlab_reversal_mc",
                 "--limit", "2", "--output_path", str(out)]) == 0
    assert "dlmlab_reversal_mc" in capsys.readouterr().out
    assert list(out.rglob("results_*.json"))
    se = json.loads((out / "dlmlab_standard_errors.json").read_text())
    assert se["estimator"] == "exact" and se["summary"]["loglikelihood"]["mean_se"] == 0
    assert main(["lm-eval", "--model", "hf", "--model_args", f"path={gpt2_folder}", "--tasks", "x"]) == 2
    assert "dlmlab model" in capsys.readouterr().err
    assert main(["lm-eval", "--model_args", f"path={tmp_path / 'nowhere'}", "--tasks", "dlmlab_reversal_mc"]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # other commands still refuse unknown flags
        main(["eval", str(gpt2_folder), "--no-such-flag"])


def _char_tokenizer(path, chars: str, **specials):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(chars)}
    for s in specials.values():
        vocab[s] = len(vocab)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=specials["unk_token"]))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, **specials).save_pretrained(path)


@pytest.mark.parametrize("kind", ["llada", "dream"])
def test_llada_and_dream_folders_score_exactly_one_token_answers(tmp_path, kind):
    """A one-token continuation's ELBO is its exact log-probability; Dream's shifted logits are aligned."""
    from safetensors.torch import save_file

    from dlmlab.models.hf_dream import align_logits
    from llada_format import llada_config, llada_weights

    V = 40
    common = dict(vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=64, tie_word_embeddings=False)
    torch.manual_seed(0)
    if kind == "llada":
        hf = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
        tmp_path.mkdir(exist_ok=True)
        (tmp_path / "config.json").write_text(json.dumps(llada_config(hf.config, mask_token_id=V - 1)))
        save_file(llada_weights(hf), str(tmp_path / "model.safetensors"))
    else:
        hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
        hf.save_pretrained(tmp_path)
        cfg = json.loads((tmp_path / "config.json").read_text())
        cfg.update(model_type="Dream", architectures=["DreamModel"], mask_token_id=V - 1)
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    _char_tokenizer(tmp_path, "abcdefghij ", unk_token="[UNK]", eos_token="[EOS]")
    lm = DlmlabLM(path=str(tmp_path), mc_num=4)
    assert lm.is_diffusion and lm.run.mask_id == V - 1 and lm.run.shift_logits == (kind == "dream")
    ctx = lm.tok_encode("abc de")
    scores = lm.score_pairs([(ctx, lm.tok_encode(c)) for c in "fg"])
    with torch.no_grad():
        out = lm.run.model(torch.tensor([ctx + [V - 1]]))
    logits = (align_logits(out) if kind == "dream" else out)[0, -1].clone()
    logits[V - 1] = -math.inf
    for c, s in zip("fg", scores):
        assert s.se == 0 and s.loglik == pytest.approx(float(logits.log_softmax(-1)[lm.tok_encode(c)[0]]), abs=1e-5)
    # a longer continuation: a Monte Carlo estimate with its standard error, within 4 of them of the exact ELBO
    # computed here over all 2^5 - 1 masked subsets S of it (sum of log p at S, weighted 1 / (|S| C(5, |S|)))
    cont = lm.tok_encode("fghij")
    s = lm.score_pairs([(ctx, cont)])[0]
    L, exact = len(cont), 0.0
    with torch.no_grad():
        for k in range(1, 2 ** L):
            S = [i for i in range(L) if k >> i & 1]
            out = lm.run.model(torch.tensor([ctx + [V - 1 if i in S else c for i, c in enumerate(cont)]]))
            logits = (align_logits(out) if kind == "dream" else out)[0, len(ctx):].double()
            logits[:, V - 1] = -math.inf
            logp = logits.log_softmax(-1)
            exact += sum(float(logp[i, cont[i]]) for i in S) / (len(S) * math.comb(L, len(S)))
    assert s.se > 0 and abs(s.loglik - exact) < 4 * s.se, (s, exact)
    # and generation runs
    from lm_eval.api.instance import Instance

    assert len(lm.generate_until([Instance("generate_until", {}, ("abc", {"max_gen_toks": 4}), 0)])) == 1


def test_a_users_own_local_task_yaml(gpt2_folder, tmp_path, capsys):
    """docs/lm_eval.md's recipe: a JSONL file of the user's and a YAML naming it, found by --include_path."""
    data = tmp_path / "qa.jsonl"
    data.write_text("".join(json.dumps({"q": f"Repeat: {w}\nAgain:", "a": w}) + "\n" for w in ("abc", "de", "fgh")))
    tasks = tmp_path / "my_tasks"
    tasks.mkdir()
    (tasks / "my_repeat.yaml").write_text(f"""task: my_repeat
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: generate_until
test_split: test
doc_to_text: "{{{{q}}}}"
doc_to_target: "{{{{a}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
metric_list:
  - metric: exact_match
""")
    out = tmp_path / "out"
    assert main(["lm-eval", "--model_args", f"path={gpt2_folder}", "--tasks", "my_repeat,dlmlab_repeat_gen",
                 "--include_path", str(tasks), "--limit", "2", "--output_path", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "my_repeat" in printed and "dlmlab_repeat_gen" in printed


def test_ar_runs_of_other_families_score_exactly(tmp_path):
    """A GRU AR run: teacher-forced log-likelihoods by hand; a context longer than max_length is cut on the left."""
    corpus = tmp_path / "c.txt"
    corpus.write_text("the cat sat on the mat. the dog ran to it. " * 40)
    cfg = tmp_path / "gru.yaml"
    cfg.write_text(f"objective: ar\nmodel: {{family: gru, d_model: 16, n_layers: 1}}\n"
                   f"data: {{source: {corpus}, tokenizer: char, seq_len: 12}}\n"
                   "train: {steps: 2, batch_size: 4, lr: 1.0e-3, progress: false}\neval_batches: 1\n")
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 0
    lm = DlmlabLM(path=str(tmp_path / "run"), max_length=8)
    assert not lm.is_diffusion and lm.max_length == 8
    ctx, cont = lm.tok_encode("the cat sat"), lm.tok_encode(" on")
    s = lm.score_pairs([(ctx, cont), (ctx[-3:], cont)])
    x = torch.tensor([(ctx + cont)[-9:-1]])
    with torch.no_grad():
        lp = lm.run.model(x).log_softmax(-1)[0, -3:]
    want = float(lp.gather(-1, torch.tensor(cont)[:, None]).sum())
    assert s[0].loglik == pytest.approx(want, abs=1e-5) and s[0].se == 0
    assert s[0].is_greedy == bool((lp.argmax(-1) == torch.tensor(cont)).all())
    assert s[1].loglik != s[0].loglik  # a shorter context gives another number
