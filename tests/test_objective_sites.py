"""One objective abstraction at every training site.

* Every study's training path scores its batches through an :class:`~dlmlab.objectives.Objective` (a spy on
  the objectives' ``loss`` sees each site), and its loss equals the objective's on the same batch.
* The induction study's times keep their exact draws (``t_min + (t_max - t_min) * antithetic U``).
"""

import dataclasses

import pytest
import torch

import dlmlab.objectives as O
from dlmlab.objectives import CosineSchedule, LinearSchedule
from dlmlab.objectives import schedule as schedule_mod
from dlmlab.training import TrainConfig
from run_util import induction_preset

# imported lazily, so that each test (not the collection) fails on a toolkit without them
ARObjective = getattr(O, "ARObjective", None)
MaskedDiffusionObjective = getattr(O, "MaskedDiffusionObjective", None)
TaggingObjective = getattr(O, "TaggingObjective", None)
GivenMaskObjective = getattr(O, "GivenMaskObjective", None)
PrefixDiffusionObjective = getattr(O, "PrefixDiffusionObjective", None)
Objective = getattr(O, "Objective", None)


@pytest.fixture
def spy(monkeypatch):
    """Records the class of every objective whose ``loss`` runs."""
    seen = []
    assert ARObjective is not None, "dlmlab.objectives has no Objective classes"
    for cls in (ARObjective, MaskedDiffusionObjective, TaggingObjective, GivenMaskObjective, PrefixDiffusionObjective):
        orig = cls.loss

        def wrapped(self, model, batch, *a, _orig=orig, **kw):
            seen.append(type(self).__name__)
            return _orig(self, model, batch, *a, **kw)

        monkeypatch.setattr(cls, "loss", wrapped)
    return seen


def test_objectives_follow_the_protocol_and_no_module_sample_t():
    for obj in (ARObjective(), MaskedDiffusionObjective(5), TaggingObjective()):
        assert isinstance(obj, Objective)
    assert not hasattr(schedule_mod, "sample_t")  # times come from a schedule class (or an objective's t_range)


def test_induction_times_keep_their_exact_draws():
    from dlmlab.studies.induction.train import objective_of
    from dlmlab.tasks.repeated import RepeatedVocab

    p = induction_preset(t_min=0.02, t_max=0.5)
    obj = objective_of(p, RepeatedVocab(20, 32), "dlm")
    x = torch.randint(0, 20, (16, 24), generator=torch.Generator().manual_seed(0))
    b = obj.make_batch(x, torch.Generator().manual_seed(7))
    g = torch.Generator().manual_seed(7)  # the historical draw: module sample_t(B, gen, eps=0) scaled to the range
    u = (torch.rand(1, generator=g) + torch.arange(16) / 16) % 1.0
    t = 0.02 + (0.5 - 0.02) * (0.0 + (1.0 - 0.0) * u)
    assert torch.equal(b["t"], t) and torch.equal(b["noise"], torch.rand(x.shape, generator=g))
    assert obj.mask_id == 52 and obj.schedule == LinearSchedule()


def test_every_training_site_scores_through_an_objective(spy, tmp_path):
    from dlmlab.models import Transformer, TransformerConfig
    from dlmlab.prediff import METHODS, make_task
    from dlmlab.studies.induction.train import load_data, train_model
    from dlmlab.studies.reversal.presets import PRESETS as REV
    from dlmlab.studies.reversal.synthetic import build_model, make_objective
    from dlmlab.studies.state.cells import make_task as state_task
    from dlmlab.studies.state.cells import train_on_task
    from dlmlab.studies.state.presets import PRESETS as STATE
    from dlmlab.tasks.positional_relations import PositionalRelations
    from dlmlab.training import train

    p = induction_preset(steps=2, text_steps=1)
    data = load_data(p)
    for obj in ("ar", "dlm"):
        train_model(p, data, 1, obj, None, progress=False)
    assert spy == ["ARObjective"] * 2 + ["MaskedDiffusionObjective"] * 2
    spy.clear()

    task = PositionalRelations(REV["smoke"].task, 0)
    mb, lf = make_objective(task, "mdm_mdlm", 8)
    model = build_model(REV["smoke"], task, "mdm_mdlm", "learned", 0)
    g = torch.Generator().manual_seed(1)
    b = O.step_batch(lf, mb(1, g), g, 1)
    assert torch.equal(lf.loss(model, b)[0], MaskedDiffusionObjective(task.mask_id).loss(model, b)[0])
    assert spy == ["MaskedDiffusionObjective"] * 2
    spy.clear()
    for kind, mask in (("mdm", task.mask_id), ("arm", None)):  # forward-only queries: the given-mask objective
        assert make_objective(task, kind, 8)[1] == GivenMaskObjective(mask)

    torch.manual_seed(0)
    bb = Transformer(TransformerConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, d_mlp=32, max_seq_len=16))
    mb, lf = make_task(METHODS["ar_control"], torch.randint(0, 30, (500,)), 16, 4, 2)
    train(bb, TrainConfig(steps=1, batch_size=4, progress=False), mb, lf)
    assert spy == ["ARObjective"]
    spy.clear()

    sp = STATE["smoke"]
    st = state_task("parity", sp)
    from dlmlab.studies.state.cells import build

    train_on_task(build("lstm", st, sp), st, sp, False, "x", steps=1, arch="lstm")
    assert spy == ["TaggingObjective"]


@pytest.mark.parametrize("method", ["prediff", "diffugpt", "attn_obj"])
def test_prediff_methods_draw_their_batch_through_one_objective(method):
    """A diffusion method's batch fields (prompt, times, mask noise, self-conditioning rows, annealed mask) come
    from PrefixDiffusionObjective.make_batch, in one documented order, and make_task's loss is its loss."""
    from dlmlab.data import TokenStream
    from dlmlab.prediff import METHODS, PrefixDiffusionObjective, annealed_mask, make_task, method_objective
    from dlmlab.prediff.objectives import cosine_mask_rates

    m = METHODS[method]
    obj = method_objective(m, 16, 10, prompt_frac=0.5)
    assert isinstance(obj, PrefixDiffusionObjective) and isinstance(obj, O.Objective)
    assert isinstance(method_objective(METHODS["ar_control"], 16, 10), O.ARObjective)
    stream = torch.randint(0, 30, (400,))
    mb, lf = make_task(m, stream, 16, 4, 10)
    assert type(lf) is PrefixDiffusionObjective and lf == obj and lf.name == "prefix_diffusion"
    g0 = torch.Generator().manual_seed(7)
    b = O.step_batch(lf, mb(3, g0), g0, 3)
    g = torch.Generator().manual_seed(7)
    x = TokenStream.windows(stream, 4, 16, g)
    t = cosine_mask_rates(4, g)
    noise, sc = torch.rand(x.shape, generator=g), torch.rand(4, generator=g) < m.self_cond_frac
    assert torch.equal(b["tokens"], x) and torch.equal(b["t"], t) and torch.equal(b["noise"], noise)
    assert torch.equal(b["self_cond"], sc) and b["prompt_len"].tolist() == [8] * 4
    if m.attention in ("annealed", "hybrid_annealed"):
        assert torch.equal(b["attn"], annealed_mask(m.attention, b["prompt_len"], 16, obj.progress(3), g))
    else:
        assert "attn" not in b


@pytest.mark.parametrize("objective", ["ar", "mdlm"])
def test_dlmlab_train_task_is_the_objective(objective, spy):
    from dlmlab.data import TokenStream
    from dlmlab.training.lm import RunConfig, make_lm_task

    from dlmlab.data import DataConfig

    cfg = RunConfig(objective=objective, model=TransformerConfigFor(objective), data=DataConfig(seq_len=12),
                    train=TrainConfig(batch_size=4, progress=False),
                    noise=CosineSchedule(t_lo=0.1) if objective == "mdlm" else None)
    stream = TokenStream(torch.randint(0, 20, (400,), generator=torch.Generator().manual_seed(0)), 0.1)
    mb, lf = make_lm_task(cfg, stream, 20)
    g = torch.Generator().manual_seed(3)
    b = O.step_batch(lf, mb(1, g), g, 1)
    from dlmlab.models import Transformer

    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(cfg.model, vocab_size=21))
    ref = ARObjective() if objective == "ar" else MaskedDiffusionObjective(20, CosineSchedule(t_lo=0.1))
    assert torch.equal(lf.loss(model, b)[0], ref.loss(model, b)[0]) and lf == ref
    if objective == "mdlm":
        assert (b["t"] >= 0.1).all()  # drawn through the named schedule's range
    assert spy == [type(ref).__name__] * 2


def TransformerConfigFor(objective):
    from dlmlab.models import TransformerConfig

    return TransformerConfig(d_model=16, n_layers=1, n_heads=2, d_mlp=32, max_seq_len=16,
                             attn_mask="causal" if objective == "ar" else "bidirectional")


def test_the_given_mask_objective_is_the_query_loss():
    """The reversal study's forward-only loss, now an objective: the NLL of the target at the given position equals
    the query analysis's loss (bit for bit), with the mask written at the query position."""
    from dlmlab.studies.reversal.presets import PRESETS as REV
    from dlmlab.studies.reversal.queries import query_loss
    from dlmlab.studies.reversal.synthetic import build_model, queries
    from dlmlab.tasks.positional_relations import PositionalRelations

    task = PositionalRelations(REV["smoke"].task, 0)
    lay = task.sample_layout(8, torch.Generator().manual_seed(2))
    for kind in ("mdm", "arm"):
        model = build_model(REV["smoke"], task, kind, "rope", 0)
        q = queries(task, kind, lay)[0]
        obj = GivenMaskObjective(task.mask_id if kind == "mdm" else None)
        clean = q.tokens.clone()
        if kind == "mdm":
            clean[torch.arange(8), q.query_pos] = q.target  # the mask is written by make_batch
        b = obj.make_batch(clean, None, query_pos=q.query_pos, target=q.target)
        assert torch.equal(b["tokens"], q.tokens)
        loss, metrics = obj.loss(model, b)
        assert torch.equal(loss, query_loss(model, q)) and torch.equal(metrics["loss"], loss.detach())
        assert obj.shift_logits == (kind == "arm")


@pytest.mark.parametrize("obj", [
    lambda: ARObjective(pad_id=4, per_row=True), lambda: MaskedDiffusionObjective(9, "cosine", (0.2, 0.6), pad_id=1),
    lambda: GivenMaskObjective(7), lambda: TaggingObjective(),
    lambda: PrefixDiffusionObjective(16, 10, 0.25, "mdlm_bound", "loglinear", "hybrid_annealed", 0.3, 0.4)])
def test_every_objective_writes_itself_and_reads_back_equal(obj):
    import json

    o = obj()
    card = json.loads(json.dumps(o.to_card()))  # JSON-ready
    assert card["objective"] == o.name and O.objective_from_card(card) == o and o == o.name
    assert O.objective_from_card({"objective": None}) is None


def test_metrics_are_tensors_without_a_host_sync():
    """Objectives return their metrics as detached 0-d tensors: the loop converts them on logged steps only."""
    from conftest import tiny_transformer

    x = torch.randint(0, 20, (4, 9), generator=torch.Generator().manual_seed(0))
    model = tiny_transformer(vocab_size=21, attn_mask="bidirectional")
    for obj, tokens in ((ARObjective(), x), (MaskedDiffusionObjective(20), x[:, :8])):
        g = torch.Generator().manual_seed(1)
        _, metrics = obj.loss(model, obj.make_batch(tokens, g))
        assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in metrics.values())
