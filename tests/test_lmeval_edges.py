"""The lm-eval backend at its edges (issue 37): the printed results table, bad input in one line before any
forward, the hf backend's refusals and BOS rule, standard errors in valid JSON, and what the docs promise."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
lm_eval = pytest.importorskip("lm_eval")
transformers = pytest.importorskip("transformers")

from dlmlab.cli.main import main  # noqa: E402
from dlmlab.errors import UserError  # noqa: E402
from dlmlab.lmeval import DlmlabLM  # noqa: E402
from dlmlab.lmeval.config import from_model_args  # noqa: E402
from test_lmeval import gpt2_folder, mdlm_run  # noqa: E402,F401  (module fixtures)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "lm_eval.md"


def _one_line_error(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("dlmlab lm-eval: error:")]
    assert len(err) == 1, err
    return err[0]


def test_printed_results_table_names_its_columns(gpt2_folder, capsys):
    assert main(["lm-eval", "--model_args", f"path={gpt2_folder},batch_size=4", "--tasks", "dlmlab_reversal_mc",
                 "--limit", "2"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("|")]
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["Tasks", "Version", "Filter", "n-shot", "Metric",
                                                                    "", "Value", "", "Stderr"], lines[0]
    assert re.fullmatch(r"\|[-:|]+\|", lines[1])
    rows = [ln for ln in lines[2:] if "dlmlab_reversal_mc" in ln]
    assert rows and "acc" in rows[0] and not any(re.match(r"\| A +\| B", ln) for ln in lines)


def test_unknown_or_missing_tasks_are_one_line(gpt2_folder, capsys):
    DlmlabLM.last = None
    assert main(["lm-eval", "--model_args", f"path={gpt2_folder}", "--tasks", "dlmlab_reversal_mcc"]) == 2
    line = _one_line_error(capsys)
    assert "unknown task dlmlab_reversal_mcc (--tasks); did you mean dlmlab_reversal_mc?" in line
    assert main(["lm-eval", "--model_args", f"path={gpt2_folder}"]) == 2
    assert "give --tasks" in _one_line_error(capsys)
    assert DlmlabLM.last is None  # no model was loaded


def test_output_path_is_checked_before_the_first_forward(gpt2_folder, tmp_path, capsys, monkeypatch):
    DlmlabLM.last = None
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    args = ["lm-eval", "--model_args", f"path={gpt2_folder}", "--tasks", "dlmlab_reversal_mc", "--limit", "1"]
    assert main(args + ["--output_path", str(blocker / "out")]) == 2
    line = _one_line_error(capsys)
    assert f"--output_path {blocker / 'out'}: {blocker} is a file, not a folder" in line
    assert main(args + ["--output_path", str(blocker / "deeper" / "r.json")]) == 2
    assert "is a file" in _one_line_error(capsys)
    # a folder that cannot be written (as on a read-only disk; the tests may run as root, so access() says no)
    import dlmlab.cli.lm_eval_cmd as cmd

    monkeypatch.setattr(cmd.os, "access", lambda p, mode: Path(p) != tmp_path)
    assert main(args + ["--output_path", str(tmp_path / "new" / "out")]) == 2
    assert f"{tmp_path} is not writable" in _one_line_error(capsys)
    assert DlmlabLM.last is None and not (tmp_path / "new").exists()  # nothing ran, nothing was created


def test_model_args_kv_reuse_and_integers(gpt2_folder, capsys):
    assert from_model_args({"path": "x", "kv_reuse": "dual"}).kv_reuse == "dual"
    with pytest.raises(UserError, match=r"^model_args: cache= was renamed kv_reuse="):
        from_model_args({"path": "x", "cache": "dual"})
    assert from_model_args({"path": "x", "mc_num": 8.0, "step": 3.0}).mc_num == 8
    # the harness's command line reads "-3" as -3.0: the message is about the value, not its type
    assert main(["lm-eval", "--model_args", f"path={gpt2_folder},mc_num=-3", "--tasks", "dlmlab_reversal_mc"]) == 2
    assert _one_line_error(capsys).endswith("mc_num must be >= 1, got -3")


def test_ar_continuation_longer_than_the_context_is_refused_as_hf_does(gpt2_folder):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    ours = DlmlabLM(path=str(gpt2_folder), max_length=8)
    peer = HFLM(pretrained=str(gpt2_folder), max_length=8, device="cpu", batch_size=1)
    ok = [Instance("loglikelihood", {}, ("ab", "cdefghij"), 0)]  # 8 tokens: fits
    long = [Instance("loglikelihood", {}, ("ab", "cdefghijk"), 0)]  # 9 tokens
    assert ours.loglikelihood(ok)[0][0] == pytest.approx(peer.loglikelihood(ok)[0][0], rel=1e-5)
    with pytest.raises(AssertionError):
        peer.loglikelihood(long)
    with pytest.raises(UserError, match="a continuation of 9 tokens exceeds the model's 8 positions"):
        ours.loglikelihood(long)


@pytest.fixture(scope="module")
def bos_folder(tmp_path_factory, gpt2_folder):
    """The tiny GPT-2 with a tokenizer that adds a BOS token ``<s>`` to every text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    path = tmp_path_factory.mktemp("gpt2_bos")
    for f in gpt2_folder.iterdir():
        if f.name.startswith(("config", "model", "generation")):
            (path / f.name).write_bytes(f.read_bytes())
    chars = "abcdefgh "
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({"<s>": len(vocab), "[EOS]": len(vocab) + 1, "[UNK]": len(vocab) + 2})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="[EOS]",
                                         unk_token="[UNK]").save_pretrained(path)
    return path


def test_a_text_starting_with_bos_gets_no_second_one(bos_folder):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    ours = DlmlabLM(path=str(bos_folder))
    peer = HFLM(pretrained=str(bos_folder), device="cpu", batch_size=1)
    bos = ours.run.tokenizer.bos_token_id
    for text in ("<s>abc", "abc", " <s>ab"):
        assert ours.tok_encode(text) == peer.tok_encode(text), text
    assert ours.tok_encode("<s>abc")[:2] == [bos, 0] and ours.tok_encode("abc")[0] == bos
    reqs = [Instance("loglikelihood", {}, ("<s>ab", "cd"), 0), Instance("loglikelihood_rolling", {}, ("<s>abc",), 1)]
    assert ours.loglikelihood(reqs[:1])[0][0] == pytest.approx(peer.loglikelihood(reqs[:1])[0][0], rel=1e-5)
    assert ours.loglikelihood_rolling(reqs[1:])[0] == pytest.approx(peer.loglikelihood_rolling(reqs[1:])[0], rel=1e-5)


def test_standard_errors_file_is_valid_json_when_one_row_gives_none(mdlm_run, tmp_path, capsys):
    """mc_num 1-2 leaves one Monte Carlo row per long continuation: its standard error is unknown (null)."""
    from lm_eval.api.instance import Instance

    from dlmlab.cli.lm_eval_cmd import _write_standard_errors

    lm = DlmlabLM(path=str(mdlm_run), mc_num=2, greedy_check=False)
    reqs = [Instance("loglikelihood", {}, ("Repeat: a", c), i) for i, c in enumerate(("bc defgh", "b"))]
    (ll, _), (ll1, _) = lm.loglikelihood(reqs)
    assert "2 loglikelihood requests by the dlmlab estimator (mc_num 2): mean standard error 0.0000 nats (1 without " \
        "one: a single Monte Carlo row)" in capsys.readouterr().err
    assert math.isnan(lm.stats[0]["se"]) and math.isfinite(ll) and lm.stats[1]["se"] == 0  # one token: exact
    _write_standard_errors(str(tmp_path))
    text = (tmp_path / "dlmlab_standard_errors.json").read_text()
    report = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert [r["se"] for r in report["requests"]] == [None, 0.0]
    assert report["summary"]["loglikelihood"] == {"requests": 2, "without_se": 1, "mean_se": 0.0, "rss_se": 0.0}


def test_what_the_docs_say_about_the_model_name(gpt2_folder):
    """After `import dlmlab.lmeval` the harness's Python API knows model="dlmlab"; its own command line does not
    import dlmlab, so `lm_eval --model dlmlab` finds no such model (the docs say so)."""
    from dlmlab.lmeval import task_manager

    out = lm_eval.simple_evaluate(model="dlmlab", model_args=f"path={gpt2_folder}", tasks=["dlmlab_reversal_mc"],
                                  task_manager=task_manager(include_defaults=False), limit=1)
    assert "dlmlab_reversal_mc" in out["results"]
    code = "from lm_eval.api.registry import get_model\ntry:\n get_model('dlmlab')\nexcept ValueError as e:\n print(e)"
    said = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "Attempted to load model 'dlmlab', but no model for this name found" in said
    text = " ".join(DOCS.read_text().split())
    assert "registers a model named `dlmlab`" not in text
    assert "`lm_eval --model dlmlab` does not work" in text


def test_docs_standard_error_calibration_is_the_quoted_benchmarks():
    """The docs' range of dlmlab's reported-over-empirical standard error is the quoted benchmark table's, which
    includes mc_num 8 (where it understates most)."""
    text = DOCS.read_text()
    rows = re.findall(r"^\| (\d+) \| dlmlab \| (\d+) \| \d+ \| ([\d.]+) \| ([\d.]+) \|$", text, re.M)
    cal = [float(c) for L, k, sd, c in rows if float(sd) > 0]  # the exact enumerations have nothing to calibrate
    assert {int(k) for _, k, _, _ in rows} >= {8, 16, 32}
    stated = re.search(r"reported standard errors are ([\d.]+)-([\d.]+) of the real spread for dlmlab", " ".join(
        text.split()))
    assert stated and (float(stated.group(1)), float(stated.group(2))) == (min(cal), max(cal))
