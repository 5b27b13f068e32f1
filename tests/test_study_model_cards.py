"""Study models saved with their diffusion metadata: a study model trained into a folder loads with objective
``mdlm``, its mask id and its noise schedule (with its fields), and ``dlmlab sample`` decodes from it."""

import json

import torch

from dlmlab.objectives import LinearSchedule
from dlmlab.training import TrainConfig
from run_util import induction_preset


def test_induction_dlm_run_loads_as_mdlm_and_samples(tmp_path, capsys):
    import dlmlab
    from dlmlab.cli.main import main
    from dlmlab.studies.induction.train import load_data, train_model

    p = induction_preset(steps=2, text_steps=1)  # the card and the sample's row do not depend on training
    data = load_data(p)
    run = tmp_path / "dlm_L1"
    train_model(p, data, 1, "dlm", run, progress=False)
    card = json.loads((run / "model.json").read_text())
    assert card["objective"] == "mdlm" and card["shift_logits"] is False and card["bidirectional"] is True
    loaded = dlmlab.load(run)
    assert loaded.objective == "mdlm" and loaded.mask_id == data.vocab.mask_id and not loaded.shift_logits
    assert loaded.noise == LinearSchedule(eps=1e-3) and card["noise"] == {"name": "linear", "eps": 0.001}
    assert card["t_range"] == [p.t_min, p.t_max] and loaded.t_range == (p.t_min, p.t_max)  # the trained mask rates
    # the text tokenizer the run trained on, saved beside its weights
    text = "the cat sat on the mat"
    assert loaded.tokenizer.vocab_size == data.tokenizer.vocab_size
    assert loaded.tokenizer.encode(text) == data.tokenizer.encode(text) and loaded.tokenizer.decode(
        data.tokenizer.encode(text)) == data.tokenizer.decode(data.tokenizer.encode(text))
    assert main(["sample", str(run), "--prompt", "the", "--gen-len", "6", "--steps", "3", "--temperature", "0",
                 "--format", "jsonl", "--no-progress"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["full"].startswith("the") and len(row["filled_ids"]) == 6
    ar = tmp_path / "ar_L1"
    train_model(p, data, 1, "ar", ar, progress=False)
    assert dlmlab.load(ar).objective == "ar" and dlmlab.load(ar).mask_id is None and dlmlab.load(ar).t_range is None


def test_reversal_real_mdm_run_keeps_its_mask_and_schedule(tmp_path):
    import dlmlab
    from dlmlab.models import Transformer, TransformerConfig
    from dlmlab.studies.reversal.presets import RealDataPreset
    from dlmlab.studies.reversal.real import fit_and_rank, prepare

    cfg = RealDataPreset(enabled=True, n_facts=3, bpe_vocab=600)
    task = prepare(cfg)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2, d_mlp=32,
                                          max_seq_len=cfg.seq_len, attn_mask="bidirectional"))
    fit_and_rank(model, task, "mdm", TrainConfig(steps=2, batch_size=4), cfg.seq_len, 0, False, out_dir=tmp_path)
    loaded = dlmlab.load(tmp_path)
    assert (loaded.objective, loaded.mask_id, loaded.noise) == ("mdlm", task.mask_id, LinearSchedule(eps=1e-3))
    assert loaded.pad_id == task.pad_id  # the whole objective travels (pads were never masked)


def test_reversal_synthetic_kinds_name_their_objective():
    from dlmlab.studies.reversal.presets import PRESETS
    from dlmlab.studies.reversal.synthetic import make_objective
    from dlmlab.tasks.positional_relations import PositionalRelations

    task = PositionalRelations(PRESETS["smoke"].task, 0)
    card = {kind: make_objective(task, kind, 4)[1].to_card() for kind in ("arm", "mdm", "mdm_mdlm")}
    assert card["arm"] == {"objective": "given_mask", "mask_id": None}
    assert card["mdm"] == {"objective": "given_mask", "mask_id": task.mask_id}
    assert card["mdm_mdlm"] == {"objective": "mdlm", "mask_id": task.mask_id, "noise": LinearSchedule().to_data(),
                                "t_range": None, "pad_id": None}
