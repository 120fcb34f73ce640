"""Join published model names to SQuAD leaderboard entries, conservatively.

SQuADShifts' ``results.json`` names a model ``"XLNet (single model)"`` plus an institution;
the leaderboard export describes it as ``"XLNet (single model) (Google Brain & CMU)"``.
Names differ in braces, spacing, case, "(single)" vs "(single model)", institution
spelling and unicode, and the leaderboard holds several submissions under one name.
A wrong join silently moves a point on every trend plot, so the rules below prefer
"unmatched, with a reason" over a guess:

1. ``exact``: same normalised name, same kind tag, same normalised institution.
2. ``name+institution``: same name, compatible kind, similar institution.
3. ``name``: same name, compatible kind, institution ignored.
4. ``fuzzy``: name similarity >= ``FUZZY_MIN`` (or equal once parenthetical qualifiers such
   as "(Boundary)" are dropped), identical digits and ``+`` signs (so "MEMEN+" never
   matches "MEMEN" and "aviqa-v2" never matches "aviqa"), and a clear margin.
5. ``bundle-name``: for leaderboard entries without a description, the model name inside
   the CodaLab bundle name (``user-predictions-NAME-results``).

Within a stage, candidates are narrowed by a date in the name ("single model, May 9 2018"
must match the submission date within a day), by an explicit kind tag, by candidates
already claimed at a stronger stage, by institution, and finally by "only one candidate
has a score"; the last step is accepted only if the score check below agrees. A stage that
still leaves several candidates ends the search as *ambiguous*; weaker stages never break
a tie that a stronger stage could not.

Score check: the accepted pairs from stages 1-3 give a line of the new score on the
original score; a weaker-stage match whose residual exceeds ``SCORE_CHECK_TOLERANCE``
robust standard deviations is rejected.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from difflib import SequenceMatcher
from functools import cached_property

import numpy as np

from evaluator.bundles.names import Parsed, name_key, normal_text, parse_name

FUZZY_MIN = 0.9
FUZZY_MARGIN = 0.05
SCORE_CHECK_TOLERANCE = 4.0
STRONG_METHODS = ("exact", "name+institution", "name")

_MONTHS = {m: i + 1 for i, m in enumerate(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"])}
_DATE = re.compile(r"\b([a-z]{3})[a-z]*\.?\s+(\d{1,2})(?:\s*,?\s*(\d{4}))?\b", re.I)
_BUNDLE = re.compile(r"^[^-]+-predictions-(.+)-results$")


def institution_key(s: str | None) -> str:
    """Comparison key for an institution ("AI" and "Artificial Intelligence" are equal)."""
    s = normal_text(s).lower().replace("&", " and ")
    s = s.replace("artificial intelligence", "ai")
    return re.sub(r"[^a-z0-9]", "", s)


def _drop_qualifiers(name: str) -> str:
    return name_key(re.sub(r"\([^)]*\)", " ", name))


def _markers(key: str) -> Counter:
    """Digits and plus signs: the characters that tell versions of one model apart."""
    return Counter(c for c in key if c.isdigit() or c == "+")


def similar_institutions(a: str | None, b: str | None) -> bool:
    """Same institution despite spelling ("Microsoft Research Asia & NUDT " vs "...NUDT")."""
    ka, kb = institution_key(a), institution_key(b)
    if not ka or not kb:
        return False
    if ka == kb or (min(len(ka), len(kb)) >= 4 and (ka in kb or kb in ka)):
        return True
    return SequenceMatcher(None, ka, kb).ratio() >= 0.85


def note_date(note: str | None) -> tuple[int | None, int, int] | None:
    """(year or None, month, day) from a note like "June 21 2018" or "Jan 23"."""
    if not note:
        return None
    m = _DATE.search(note)
    if not m or m.group(1).lower() not in _MONTHS:
        return None
    year = int(m.group(3)) if m.group(3) else None
    return (year, _MONTHS[m.group(1).lower()], int(m.group(2)))


def _date_matches(wanted: tuple[int | None, int, int], created: float | None) -> bool:
    if not created:
        return False
    got = datetime.fromtimestamp(created, tz=UTC).date()
    years = [wanted[0]] if wanted[0] else [got.year - 1, got.year, got.year + 1]
    for y in years:
        try:
            if abs((date(y, wanted[1], wanted[2]) - got).days) <= 1:
                return True
        except ValueError:
            continue
    return False


@dataclass(frozen=True)
class Entry:
    """One leaderboard submission: description, scores (None when the export has none)."""

    index: int
    description: str
    em: float | None
    f1: float | None
    created: float | None = None
    bundle_name: str | None = None

    @cached_property  # the join reads it for every candidate pair
    def parsed(self) -> Parsed:
        return parse_name(self.description, trailing_institution=True)

    @property
    def bundle_key(self) -> str | None:
        m = _BUNDLE.match(self.bundle_name or "")
        return name_key(m.group(1)) if m else None

    @property
    def scored(self) -> bool:
        return self.em is not None and self.f1 is not None

    def label(self) -> str:
        text = self.description.strip() or f"<no description; bundle {self.bundle_name}>"
        score = f"EM {self.em:.2f} F1 {self.f1:.2f}" if self.scored else "no score"
        return f"#{self.index} {text!r} ({score})"


@dataclass(frozen=True)
class Target:
    """A model to find: its published name, institution, and a score for the sanity check."""

    name: str
    institution: str | None = None
    check_score: float | None = None

    @cached_property  # the join reads it for every candidate pair
    def parsed(self) -> Parsed:
        return parse_name(self.name, self.institution)


@dataclass
class Outcome:
    """What happened to one target: status is matched | ambiguous | unmatched."""

    target: Target
    status: str
    method: str | None = None
    entry: Entry | None = None
    candidates: list[Entry] = field(default_factory=list)
    reason: str = ""


def _kind_ok(a: Parsed, b: Parsed) -> bool:
    return a.kind is None or b.kind is None or a.kind == b.kind


def _stage_candidates(stage: str, t: Parsed, entries: list[Entry]) -> list[Entry]:
    out = []
    for e in entries:
        p = e.parsed
        if stage == "bundle-name":
            if not e.description.strip() and e.bundle_key == t.key:
                out.append(e)
            continue
        if not e.description.strip() or not _kind_ok(t, p):
            continue
        if stage == "exact":
            if (p.key == t.key and p.kind == t.kind and t.institution
                    and institution_key(p.institution) == institution_key(t.institution)):
                out.append(e)
        elif stage == "name+institution":
            if p.key == t.key and similar_institutions(p.institution, t.institution):
                out.append(e)
        elif stage == "name":
            if p.key == t.key:
                out.append(e)
    if stage == "fuzzy":
        out = _fuzzy(t, entries)
    return out


def _fuzzy(t: Parsed, entries: list[Entry]) -> list[Entry]:
    scored = []
    for e in entries:
        p = e.parsed
        if not e.description.strip() or not _kind_ok(t, p) or _markers(p.key) != _markers(t.key):
            continue
        ratio = SequenceMatcher(None, t.key, p.key).ratio()
        if _drop_qualifiers(p.name) == _drop_qualifiers(t.name):
            ratio = max(ratio, FUZZY_MIN)
        if ratio >= FUZZY_MIN:
            scored.append((ratio, e))
    if not scored:
        return []
    best = max(r for r, _ in scored)
    # Everything within the margin of the best stays a candidate: a near tie is ambiguous.
    return [e for r, e in scored if r >= best - FUZZY_MARGIN]


STAGES = ("exact", "name+institution", "name", "fuzzy", "bundle-name")


def _narrow(t: Parsed, cands: list[Entry], claimed: dict[int, str]) -> tuple[list[Entry], str]:
    """Apply the tie-breakers in order; return what is left and what was used."""
    used = []
    wanted = note_date(t.note)
    if wanted:
        cands = [e for e in cands if _date_matches(wanted, e.created)]
        used.append("date")
    explicit = [e for e in cands if t.kind and e.parsed.kind == t.kind]
    if explicit and len(explicit) < len(cands):
        cands, _ = explicit, used.append("kind")
    free = [e for e in cands if e.index not in claimed]
    if len(free) < len(cands):
        cands, _ = free, used.append("claimed")
    if len(cands) > 1 and t.institution:
        same = [e for e in cands if similar_institutions(e.parsed.institution, t.institution)]
        if len(same) == 1:
            cands, _ = same, used.append("institution")
    if len(cands) > 1:
        scored = [e for e in cands if e.scored]
        if len(scored) == 1:
            cands, _ = scored, used.append("only-scored")
    return cands, "+".join(used)


def reconcile(targets: list[Target], entries: list[Entry]) -> list[Outcome]:
    """Match every target to at most one entry, stage by stage over all targets."""
    outcomes: dict[int, Outcome] = {}
    claimed: dict[int, str] = {}
    pending = list(range(len(targets)))
    for stage in STAGES:
        proposals: dict[int, tuple[Entry, str]] = {}
        for i in pending:
            t = targets[i].parsed
            if stage == "bundle-name" and _stage_candidates("name", t, entries):
                continue  # only for names that no description mentions at all
            cands = _stage_candidates(stage, t, entries)
            if not cands:
                continue
            left, used = _narrow(t, cands, claimed)
            if len(left) == 1:
                proposals[i] = (left[0], used)
            elif not left:
                why = "date in the name matches no submission date" if "date" in used else (
                    "every candidate is already matched to another model")
                outcomes[i] = Outcome(targets[i], "unmatched", stage, None, cands, why)
            else:
                outcomes[i] = Outcome(
                    targets[i], "ambiguous", stage, None, left,
                    f"{len(left)} leaderboard entries fit equally well at stage '{stage}' "
                    "and nothing in the published name separates them")
        by_entry = Counter(e.index for e, _ in proposals.values())
        for i, (e, used) in proposals.items():
            if by_entry[e.index] > 1:
                rivals = [targets[j].name for j, (f, _) in proposals.items()
                          if f.index == e.index and j != i]
                outcomes[i] = Outcome(targets[i], "ambiguous", stage, None, [e],
                                      f"same entry also fits {rivals} at stage '{stage}'")
                continue
            method = stage + (f" ({used})" if used else "")
            outcomes[i] = Outcome(targets[i], "matched", method, e, [e])
            claimed[e.index] = targets[i].name
        pending = [i for i in pending if i not in outcomes]
    for i in pending:
        outcomes[i] = Outcome(targets[i], "unmatched", None, None,
                              closest(targets[i], entries),
                              "no leaderboard entry carries this name")
    result = [outcomes[i] for i in range(len(targets))]
    _score_check(result)
    return result


def _score_check(outcomes: list[Outcome]) -> None:
    """Reject weak matches whose scores sit far off the line the strong matches follow."""
    strong = [o for o in outcomes if o.status == "matched" and o.entry.scored
              and o.target.check_score is not None and o.method.split(" ")[0] in STRONG_METHODS
              and "only-scored" not in o.method]
    if len(strong) < 10:
        return
    x = np.array([o.entry.f1 for o in strong])
    y = np.array([o.target.check_score for o in strong])
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    scale = 1.4826 * float(np.median(np.abs(resid - np.median(resid))))
    for o in outcomes:
        weak = o.method and (o.method.split(" ")[0] not in STRONG_METHODS
                             or "only-scored" in o.method)
        if o.status != "matched" or not weak or not o.entry.scored or o.target.check_score is None:
            continue
        r = o.target.check_score - (slope * o.entry.f1 + intercept)
        if abs(r) > SCORE_CHECK_TOLERANCE * scale:
            o.status, o.candidates = "unmatched", [o.entry]
            o.reason = (f"rejected by score check: residual {r:+.1f} F1 points vs the line of "
                        f"strong matches (tolerance {SCORE_CHECK_TOLERANCE * scale:.1f})")
            o.entry = None


def closest(target: Target, entries: list[Entry], k: int = 3) -> list[Entry]:
    """The k entries whose names look most like the target's (for the coverage report)."""
    key = target.parsed.key

    def sim(e: Entry) -> float:
        other = e.parsed.key if e.description.strip() else (e.bundle_key or "")
        return SequenceMatcher(None, key, other).ratio()

    return sorted(entries, key=lambda e: (-sim(e), e.index))[:k]


def coverage_report(outcomes: list[Outcome], title: str = "Reconciliation") -> str:
    """Plain-text report: counts, then every match, ambiguity and miss with its reason."""
    matched = [o for o in outcomes if o.status == "matched"]
    scored = [o for o in matched if o.entry.scored]
    ambiguous = [o for o in outcomes if o.status == "ambiguous"]
    unmatched = [o for o in outcomes if o.status == "unmatched"]
    lines = [
        f"{title}: {len(outcomes)} models",
        f"  matched:               {len(matched)}",
        f"    with a test score:   {len(scored)}",
        f"    entry has no score:  {len(matched) - len(scored)}",
        f"  ambiguous:             {len(ambiguous)}",
        f"  unmatched:             {len(unmatched)}",
        "",
        "Methods: " + ", ".join(
            f"{m}={c}" for m, c in sorted(Counter(o.method for o in matched).items())),
        "",
    ]
    if len(matched) > len(scored):
        lines.append("MATCHED, BUT THE LEADERBOARD EXPORT HAS NO TEST SCORE FOR THE ENTRY")
        for o in matched:
            if not o.entry.scored:
                lines.append(f"- {o.target.name!r} [{o.target.institution or ''}] -> "
                             f"{o.entry.label()} via {o.method}")
        lines.append("")
    for header, group in (("AMBIGUOUS", ambiguous), ("UNMATCHED", unmatched)):
        lines.append(header)
        for o in group:
            lines.append(f"- {o.target.name!r} [{o.target.institution or ''}]: {o.reason}")
            label = "candidates" if o.status == "ambiguous" else "closest"
            for e in o.candidates[:6]:
                lines.append(f"    {label}: {e.label()}")
        lines.append("")
    lines.append("MATCHED")
    for o in matched:
        lines.append(f"- {o.target.name!r} [{o.target.institution or ''}] -> {o.entry.label()} "
                     f"via {o.method}")
    return "\n".join(lines) + "\n"
