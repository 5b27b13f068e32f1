"""Every claim answers to a sentence of its study's summary (issue 34): FILE:LINE resolves, in our own words."""

from __future__ import annotations

import importlib
import re

import pytest

from dlmlab.report import claim
from dlmlab.report.claims import REPRODUCED, claim_tally, count_verdicts, underpowered
from dlmlab.report.html import claims_html, study_section
from dlmlab.report.results import StudyResult, render_markdown
from dlmlab.report.seeds import SEED_FILES, SeedRef, check_ref, seeds_dir, with_seeds

STUDIES = ("induction", "reversal", "state", "prediff")
ROOT = seeds_dir()


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _shares_run(a: str, b: str, n: int = 5) -> bool:
    """True when ``a`` and ``b`` share a run of ``n`` consecutive words (a copied phrase)."""
    wa, wb = _words(a), _words(b)
    runs = {tuple(wa[i:i + n]) for i in range(len(wa) - n + 1)}
    return any(tuple(wb[i:i + n]) in runs for i in range(len(wb) - n + 1))


def test_seed_ref_validates_its_fields():
    ok = SeedRef("000_53ecdc8713c33aa0.txt:37", "a probe reads the mask rate after layer 0", 0.82)
    assert (ok.file, ok.line) == ("000_53ecdc8713c33aa0.txt", 37)
    with pytest.raises(ValueError, match="not FILE:LINE"):
        SeedRef("000_53ecdc8713c33aa0.txt", "a probe reads the mask rate")
    with pytest.raises(ValueError, match="not FILE:LINE"):
        SeedRef("999_0000000000000000.txt:3", "a probe reads the mask rate")
    with pytest.raises(ValueError, match="ref must be None"):
        SeedRef("000_53ecdc8713c33aa0.txt:37", "a probe reads the mask rate", extension=True)
    with pytest.raises(ValueError, match="one non-empty line"):
        SeedRef("000_53ecdc8713c33aa0.txt:37", "a probe reads the mask rate", deviation="a\nb")
    with pytest.raises(ValueError, match="study_effect"):
        SeedRef("000_53ecdc8713c33aa0.txt:37", "a probe reads the mask rate", study_effect="0.8")
    assert SeedRef(None, "steering along the mask-rate direction", extension=True).line is None


def test_with_seeds_sets_every_field_and_refuses_a_claim_without_one():
    refs = {"a": SeedRef("003_59f6a69613976956.txt:20", "the combined model beats both parts", {"x": 26.9},
                         deviation="cpu scale"),
            "b": SeedRef(None, "something no summary states", extension=True)}
    out = with_seeds([claim("a", "A", True, judgement=REPRODUCED), claim("b", "B", False,
                                                                         judgement=underpowered("x"))], refs)
    d = out[0].to_dict()
    assert (d["seed_ref"], d["study_effect"], d["deviation"], d["extension"]) == \
        ("003_59f6a69613976956.txt:20", {"x": 26.9}, "cpu scale", False)
    assert out[1].extension and out[1].seed_ref is None
    # the tally counts the study's own claims; the extension apart
    t = claim_tally(out)
    assert (t["claims_total"], t["claims_hold"], t["extensions_total"]) == (1, 1, 1)
    assert t["extensions_verdicts"]["inconclusive"] == 1 and t["claims_verdicts"]["inconclusive"] == 0
    with pytest.raises(KeyError, match="'c' cites no summary sentence"):
        with_seeds([claim("c", "C", True, judgement=REPRODUCED)], refs)


def test_reports_show_the_summary_line_and_put_extensions_apart(tmp_path):
    refs = {"a": SeedRef("003_59f6a69613976956.txt:20", "the combined model beats both parts", 26.9,
                         deviation="measured at cpu scale"),
            "b": SeedRef(None, "steering along the mask-rate direction", extension=True)}
    claims = with_seeds([claim("a", "A beats B", True, judgement=REPRODUCED, **{f"k{i}": i for i in range(9)}),
                         claim("b", "B", False, judgement=underpowered("x"))], refs)
    md = render_markdown(StudyResult("s", "smoke", {}, claims=claims), "T")
    own, ext = md.split("## Extensions")
    assert "`003_59f6a69613976956.txt:20`: the combined model beats both parts (deviation: measured at cpu scale)" \
        in own and "| 26.9 |" in own and "(3 more in results.json)" in own and "`b`" not in own
    assert "`b`" in ext and "0 reproduced, 0 contradicted, 1 inconclusive (1 underpowered)." in ext
    html = claims_html([c.to_dict() for c in claims[:1]])
    assert "<code>003_59f6a69613976956.txt:20</code>" in html and "3 more</summary>" in html
    res = StudyResult("s", "smoke", {}, claims=claims)
    (tmp_path / "results.json").write_text(__import__("json").dumps(res.to_dict()))
    page = study_section("s", {"status": "ran", "files_in": "this folder"}, tmp_path)
    assert "Claims (1: 1 reproduced" in page and "Extensions (1: 0 reproduced, 0 contradicted, 1 inconclusive" in page
    assert "files in <code>this folder</code>" in page
    assert count_verdicts([c.to_dict() for c in claims]) == count_verdicts(claims[:1])


@pytest.mark.skipif(ROOT is None, reason="../shared/seeds is not beside this checkout")
@pytest.mark.parametrize("study", STUDIES)
def test_every_reference_of_a_study_resolves_to_its_own_summary_in_our_own_words(study):
    refs = importlib.import_module(f"dlmlab.studies.{study}.seeds").SEED_REFS
    assert refs, f"{study} cites no summary sentence"
    for cid, ref in refs.items():
        if ref.extension:
            continue
        assert SEED_FILES[ref.file] == study, f"{cid}: {ref.ref} is another study's summary"
        line = check_ref(ref, ROOT)
        assert not _shares_run(line, ref.says), f"{cid}: 'says' copies the summary's wording"
        if ref.deviation:
            assert not _shares_run(line, ref.deviation), f"{cid}: 'deviation' copies the summary's wording"
