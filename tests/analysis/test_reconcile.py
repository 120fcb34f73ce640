"""Joining SQuADShifts names to leaderboard entries: tricky pairs and the real coverage."""

from __future__ import annotations

import pytest

from analysis.sources.reconcile import Entry, Target, name_key, parse_name, reconcile
from analysis.sources.tidy import published_reconciliation


def entry(i, desc, em=80.0, f1=88.0, created=None, bundle=None):
    return Entry(i, desc, em, f1, created, bundle)


def only(outcomes):
    (o,) = outcomes
    return o


def test_parse_splits_name_kind_note_and_institution():
    p = parse_name("{ANNA} (single model) (LG AI Research) ", trailing_institution=True)
    assert (p.name, p.kind, p.institution) == ("{ANNA}", "single", "LG AI Research")
    p = parse_name("MARS (single model, May 9 2018)")
    assert (p.name, p.kind, p.note) == ("MARS", "single", "May 9 2018")
    p = parse_name("FastQA (German Research Center for AI) https://arxiv.org/abs/1703.04816",
                   trailing_institution=True)
    assert (p.name, p.kind, p.institution) == ("FastQA", None, "German Research Center for AI")
    # Without a kind tag a published name keeps its parentheses: "(base)" is not a place.
    assert parse_name("InfoWord (base)").name == "InfoWord (base)"


def test_name_key_ignores_braces_case_spacing_and_unicode_but_keeps_versions():
    assert name_key("{EAZI}") == name_key("eazi")
    assert name_key("ST_bl") == name_key("ST bl")
    assert name_key("Match-LSTM w/ Ans-Ptr") == name_key("Match-LSTM with Ans-Ptr")
    assert name_key("BiDAF\u00a0+ Self-Attention") == name_key("BiDAF + Self Attention")
    assert name_key("MEMEN+") != name_key("MEMEN")
    assert name_key("XLNET-123++") != name_key("XLNET-123")


@pytest.mark.parametrize("published, institution, description", [
    ("M-NET (single model)", "UFL", "M-NET (single) (UFL)"),
    ("MMIPN (single model)", "Anonymous", "MMIPN(Single)"),
    ("{gqa} (single model)", "FAIR", "{gqa} (single model) (FAIR)"),
    ("BERT+MT (single model)", "", "\tBERT+MT (single model) (Xiaoi Research)"),
    ("Dynamic Chunk Reader (Single)", "", "Dynamic Chunk Reader (IBM)  https://arxiv.org/x"),
    ("MEMEN (single model)", "Zhejiang University",
     "MEMEN  (single model) (Zhejiang University) https://arxiv.org/abs/1707.09098"),
])
def test_spelling_variants_match(published, institution, description):
    o = only(reconcile([Target(published, institution)], [entry(0, description)]))
    assert o.status == "matched" and o.entry.index == 0


def test_versions_and_kinds_never_match_each_other():
    entries = [entry(0, "MEMEN (single model) (ZJU)"), entry(1, "aviqa (ensemble) (aviqa team)"),
               entry(2, "AVIQA-v2 (single model) (aviqa team)")]
    outs = reconcile([Target("MEMEN+ (Single)"), Target("aviqa-v2 (ensemble)")], entries)
    assert [o.status for o in outs] == ["unmatched", "unmatched"]
    assert "no leaderboard entry" in outs[0].reason and len(outs[0].candidates) == 3


def test_duplicates_are_separated_by_institution_or_left_ambiguous():
    entries = [entry(0, "Common-sense BERT (single model) (Jerry AGI)"),
               entry(1, "Common-sense BERT (single model) (MST/EOI)"),
               entry(2, "Jenga (single model) (FAIR)", 74.4),
               entry(3, "Jenga (single model) (FAIR)")]
    a, b = reconcile([Target("Common-sense BERT (single model)", "MST/EOI"),
                      Target("Jenga (Single)")], entries)
    assert a.status == "matched" and a.entry.index == 1
    assert b.status == "ambiguous" and {e.index for e in b.candidates} == {2, 3}


def test_a_date_in_the_name_picks_the_submission_of_that_day():
    entries = [entry(0, "MARS (single model) (YFD)", created=1525859070),   # 2018-05-09
               entry(1, "MARS (single model) (YFD)", created=1529575305)]   # 2018-06-21
    o = only(reconcile([Target("MARS (single model, June 21 2018)")], entries))
    assert o.status == "matched" and o.entry.index == 1 and "date" in o.method


def test_an_entry_is_never_given_to_two_models():
    entries = [entry(0, "InfoWord-Base (single model) (Google)")]
    a, b = reconcile([Target("InfoWord-Base (single model)", "Google"),
                      Target("InfoWord (base)")], entries)
    assert a.status == "matched" and b.status != "matched"


def test_entries_without_description_match_by_bundle_name_only_exactly():
    entries = [entry(0, "", bundle="ifajcik-predictions-BIDAF-COMPOUND-DSS-results"),
               entry(1, "", bundle="ifajcik-predictions-BIDAF-COMPOUND-results")]
    a, b = reconcile([Target("BIDAF-COMPOUND (single)"), Target("BIDAF-COMPOUND-DSS (single)")],
                     entries)
    assert (a.entry.index, b.entry.index) == (1, 0)
    assert a.method == b.method == "bundle-name"


@pytest.fixture(scope="module")
def real(shared_data):
    results, outcomes, report = published_reconciliation(shared_data)
    nw = {m["name"] for m in results["new-wiki"]["models"]}
    return {o.target.name: o for o in outcomes if o.target.name in nw}, report


def test_real_coverage_counts(real):
    by_name, report = real
    assert len(by_name) == 105
    matched = [o for o in by_name.values() if o.status == "matched"]
    scored = [o for o in matched if o.entry.scored]
    # 95 is out of reach without guessing: 12 names are absent from the export and 9 are
    # ambiguous duplicates (docs/analysis.md lists each one).
    assert len(matched) == 84 and len(scored) == 80
    assert "New-Wiki models" in report and "UNMATCHED" in report and "'Delphi'" in report


@pytest.mark.parametrize("name, em, f1", [
    ("XLNet (single model)", 89.898, 95.080),
    ("Tuned BERT-1seq Large Cased (single model)", 87.465, 93.294),
    ("BERT-uncased (single model)", 84.926, 91.932),
    ("XLNET-123++ (single model)", 89.856, 94.903),
    ("SpanBERT (single model)", 88.839, 94.635),
    ("BiDAF + Self Attention (Single)", 72.139, 81.048),
    ("Match-LSTM w/ Ans-Ptr (Ensemble)", 67.901, 77.022),
    ("MARS (single model, Jan 23)", 76.859, 84.739),
    ("BIDAF-COMPOUND-DSS (single)", 67.544, 76.429),
])
def test_real_spot_checks(real, name, em, f1):
    o = real[0][name]
    assert o.status == "matched"
    assert o.entry.em == pytest.approx(em, abs=1e-3) and o.entry.f1 == pytest.approx(f1, abs=1e-3)


@pytest.mark.parametrize("name", ["Conductor-net (Single)", "DCN+ (Single)", "Jenga (Single)",
                                  "MARS (single model)", "UnsupervisedQA V1"])
def test_real_duplicates_stay_ambiguous(real, name):
    assert real[0][name].status == "ambiguous"


def test_real_matches_pass_the_score_sanity_check(real):
    """No matched model does better on New-Wiki than its original test score by > 1 point."""


    for o in real[0].values():
        if o.status == "matched" and o.entry.scored:
            assert o.target.check_score <= o.entry.f1 + 1.0, o.target.name
