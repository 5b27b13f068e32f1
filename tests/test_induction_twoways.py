"""Heads measured two ways (issue 24 item 2): the scores on masked / unmasked random / unmasked text rows,
their checkpoint curves, the summary, and the reserved-ids preset."""

import dataclasses

import pytest
import torch

from dlmlab.analysis import emergence, heads, induction
from dlmlab.models import Transformer, TransformerConfig
from dlmlab.objectives import ARObjective, MaskedDiffusionObjective
from dlmlab.studies.induction import heads_twoways as tw
from dlmlab.studies.induction.presets import PRESETS
from dlmlab.studies.induction.train import StudyObjective

MASK = 11
AR, DLM = StudyObjective("ar", ARObjective()), StudyObjective("dlm", MaskedDiffusionObjective(MASK))


def tiny(mask: str, n_layers: int = 2) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=12, d_model=16, n_layers=n_layers, n_heads=2, d_mlp=0,
                                         attn_mask=mask, max_seq_len=16)).eval()


def repeated(B: int = 6, half: int = 8, seed: int = 0) -> torch.Tensor:
    r = torch.randint(0, MASK, (B, half), generator=torch.Generator().manual_seed(seed))
    return torch.cat([r, r], 1)


def test_one_forward_gives_the_study_scores():
    """prev / next equal analysis.heads' scores; AR induction equals the TransformerLens score; the DLM's
    masked-query induction equals the study's target -> source attention on one masked target per row."""
    x = repeated()
    ar, dlm = tiny("causal"), tiny("bidirectional")
    s = tw.head_scores(ar, x, AR)
    assert set(s) == {"prev", "next", "induction"}
    assert torch.allclose(s["prev"], heads.previous_token_scores(ar, x), atol=1e-6)
    assert torch.allclose(s["next"], heads.next_token_scores(ar, x), atol=1e-6)
    assert torch.allclose(s["induction"], induction.ar_induction_scores(ar, x), atol=1e-6)
    d = tw.head_scores(dlm, x, DLM)
    assert "induction_masked_queries" not in d  # nothing masked
    assert torch.allclose(d["induction"], heads.diagonal_scores(dlm, x, -8, min_query=8), atol=1e-6)
    rows = induction.build_rows(x, MASK, "forward", "both", per_seq=1, seed=3)  # one masked target per row
    d = tw.head_scores(dlm, rows.noisy, DLM)
    ref = heads.attention_to(dlm, rows.noisy, rows.target, rows.source)
    assert torch.allclose(d["induction_masked_queries"], ref, atol=1e-6)
    assert not torch.allclose(d["induction"], ref, atol=1e-6)  # every query vs the masked one only
    with pytest.raises(ValueError, match="objective"):
        tw.head_scores(dlm, x, "mdlm")


def test_inputs_masked_random_and_repeated_text():
    x = repeated(B=20)
    masked = x.clone()
    masked[:, ::5] = MASK
    text = torch.arange(20 * 16).reshape(20, 16) % MASK
    inp = tw.twoway_inputs(x, masked, text, n=4)
    assert list(inp) == ["masked", "random", "text"] and all(v.shape == (4, 16) for v in inp.values())
    assert torch.equal(inp["random"], x[:4]) and torch.equal(inp["masked"], masked[:4])
    assert torch.equal(inp["text"][:, :8], text[:4, :8]) and torch.equal(inp["text"][:, 8:], text[:4, :8])
    assert list(tw.twoway_inputs(x, None, None)) == ["random"]  # AR, no text
    with pytest.raises(ValueError, match="length"):
        tw.twoway_inputs(x, None, text[:, :10])
    with pytest.raises(ValueError, match="must match"):
        tw.twoway_inputs(x, masked[:, :8], None)


def test_summary_finds_heads_thresholds_and_order_against_the_accuracy_jump():
    def m(prev, ind):  # [L=2, H=2]
        return {"prev": torch.tensor([[0.1, prev], [0.9, 0.0]]), "induction": torch.tensor([[0.99, 0.0], [ind, 0.1]])}

    curves = [(100, {"random": m(0.2, 0.0)}), (200, {"random": m(0.6, 0.1)}), (300, {"random": m(0.7, 0.5)})]
    s = tw.summarise({"random": m(0.7, 0.5)}, curves, n_layers=2, accuracy_jump={"midpoint_step": 300})["random"]
    assert s["prev"]["head"] == [0, 1] and s["prev"]["final"] == pytest.approx(0.7)  # layer 0 only (not L1H0's 0.9)
    assert s["prev"]["first_step_at_threshold"] == 200 and s["prev"]["before_accuracy_jump"] is True
    assert s["induction"]["head"] == [1, 0]  # layers >= 1 only (not L0H0's 0.99)
    assert s["induction"]["first_step_at_threshold"] == 300 and [c[0] for c in s["induction"]["curve"]] == [100, 200, 300]
    late = tw.summarise({"random": m(0.7, 0.5)}, curves, 2, {"midpoint_step": 100})["random"]
    assert late["prev"]["before_accuracy_jump"] is False  # the previous-token head formed after the jump
    one = tw.summarise({"random": m(0.7, 0.5)}, curves, n_layers=1)["random"]
    assert "induction" not in one and one["prev"]["before_accuracy_jump"] is None


def test_analyse_model_adds_twoways_curves_and_keeps_the_emergence_curves(tmp_path):
    """analyse_model's single checkpoint pass gives the same emergence curves as emergence.checkpoint_curves,
    and the two-ways curve's last checkpoint equals the final model's scores."""
    from dlmlab.studies.induction.analyse import accuracy_fn, analyse_model, lightly_masked
    from dlmlab.studies.induction.train import load_data, study_objective, train_model
    from dlmlab.tasks.repeated import mixed_batch, repeated_tokens

    p = dataclasses.replace(PRESETS["smoke"], steps=4, text_steps=2, ckpt_every=2, depths=[2])
    data = load_data(p)
    dlm = study_objective(p, data.vocab, "dlm")
    assert dlm.masked and dlm.context == "both" and dlm.mask_id == data.vocab.mask_id
    model, _ = train_model(p, data, 2, dlm, tmp_path, progress=False)
    g = torch.Generator().manual_seed(1)
    ev = repeated_tokens(p.eval_seqs, p.seq_len // 2, data.lo, data.hi, g, distinct=True)
    probe = mixed_batch(data.val_ids, p.probe_seqs, p.seq_len, p.p_repeated, data.lo, data.hi, g, p.min_half)
    text = mixed_batch(data.val_ids, 8, p.seq_len, 0.0, data.lo, data.hi, g)
    r = analyse_model(model, dlm, p, data.vocab, ev, probe, tmp_path, False, text)
    assert (r["objective"], r["context"]) == ("dlm", "both")
    mid = data.vocab.mask_id
    head_input = lightly_masked(ev, mid, seed=p.seed)
    ref = emergence.checkpoint_curves(model, tmp_path, {
        "accuracy": accuracy_fn(dlm, ev[: max(8, ev.shape[0] // 2)], max(1, p.per_seq // 2), p.seed),
        "prev_layer0": lambda mm: float(heads.previous_token_scores(mm, head_input[:32])[0].max())})
    assert r["emergence"]["curve"] == ref["accuracy"] and r["emergence"]["curves"]["prev_layer0"] == ref["prev_layer0"]
    t = r["heads_twoways"]
    assert set(t["summary"]) == {"masked", "random", "text"} and t["seconds"] > 0
    for cond in ("masked", "random", "text"):
        s = t["summary"][cond]["prev"]
        assert [c[0] for c in s["curve"]] == [2, 4] and s["curve"][-1][1] == pytest.approx(s["final"])
    assert torch.allclose(torch.as_tensor(t["final"]["masked"]["prev"]),
                          heads.previous_token_scores(model, head_input[: tw.N_SEQS]), atol=1e-6)


def test_reserved_ids_preset_differs_from_cpu_only_in_random_ids():
    a, b = dataclasses.asdict(PRESETS["cpu"]), dataclasses.asdict(PRESETS["cpu_reserved_ids"])
    assert {k for k in a if a[k] != b[k]} == {"random_ids"}
    assert a["random_ids"] == "text" and b["random_ids"] == "reserved"


def test_compare_runs_prints_one_row_per_run_model_and_input(tmp_path, capsys):
    import json

    def m(prev, ind):
        return {"prev": [[0.1, prev], [0.0, 0.0]], "next": [[0.6, 0.0], [0.0, 0.0]], "induction": [[0.0, 0.0], [ind, 0.1]]}

    curves = [(100, {"random": m(0.2, 0.0), "text": m(0.1, 0.0)}), (200, {"random": m(0.7, 0.5), "text": m(0.6, 0.4)})]
    summary = tw.summarise({"random": m(0.7, 0.5), "text": m(0.6, 0.4)}, curves, 2, {"midpoint_step": 200})
    for name, ids in (("a", "text"), ("b", "reserved")):
        (tmp_path / name).mkdir()
        res = {"config": {"random_ids": ids}, "results": {"models": {
            "dlm_L2": {"emergence": {"midpoint_step": 200}, "heads_twoways": {"summary": summary}}}}}
        (tmp_path / name / "results.json").write_text(json.dumps(res))
    assert tw.main([str(tmp_path / "a" / "results.json"), str(tmp_path / "b" / "results.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + 4
    assert out[2].startswith("| a | text | dlm_L2 | random | 200 | L0H1 0.70 (200) |")
    assert "| b | reserved | dlm_L2 | text |" in out[5] and "L1H0 0.40 (200)" in out[5]
    assert tw.main([]) == 2
