"""SAM challenge sets (Schlegel et al.): generated football reports in aligned triples.

Every triple shares a question. The baseline passage B has the answer A. The intervention
passage I is B with a semantics-altering modification (SAM) in 1 to 3 goal sentences. A
modified goal no longer counts, so the answer becomes A' != A. The control passage C is I
without the modified sentences. B and I come from one realisation pass. Only the verb phrase
of a modified sentence changes ("curled in" -> "almost curled in"), so B and I are identical
outside those sentences. This is the invariant that `validate` checks.

All six categories use the same expression inventory, written here for this project, and
they are keyed by name. Within one example every modification has the same category, so a
by-category breakdown is clean. Sentences end in ". " and contain no other full stop, so
they can be split again exactly.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from itertools import product

from evaluator.data.derive import register

GENERATOR_VERSION = "qashift-sam-football/2"
PARTS = ("baseline", "intervention", "control")
CATEGORIES = {  # name -> (label in [SAM] Fig. 1, expressions; {past}/{base}/{ger} verb forms)
    "Modal negation": ("I1", ["couldn't {base}", "could not {base}", "wouldn't {base}",
                              "would not {base}"]),
    "Adverbial Modification": ("I2", ["almost {past}", "nearly {past}", "all but {past}"]),
    "Implicit Negation": ("I3", ["was prevented from {ger}", "was stopped from {ger}",
                                 "was kept from {ger}", "was blocked from {ger}"]),
    "Explicit Negation": ("I4", ["didn't succeed in {ger}", "did not succeed in {ger}",
                                 "didn't manage to {base}", "did not manage to {base}"]),
    "Polarity Reversing": ("I5", ["lacked the nerve to {base}", "lost the nerve to {base}",
                                  "lacked the composure to {base}",
                                  "missed the opportunity to {base}"]),
    "Negated Polarity Preserving": ("I6", ["wouldn't find the opportunity to {base}",
                                           "didn't get the chance to {base}",
                                           "did not find the time to {base}",
                                           "would not see the chance to {base}"]),
}
VERBS = [("scored", "score", "scoring"), ("curled in", "curl in", "curling in"),
         ("fired in", "fire in", "firing in"), ("slotted in", "slot in", "slotting in"),
         ("drilled in", "drill in", "drilling in"), ("hammered in", "hammer in", "hammering in"),
         ("smashed in", "smash in", "smashing in"), ("tapped in", "tap in", "tapping in"),
         ("volleyed in", "volley in", "volleying in"), ("blasted in", "blast in",
                                                         "blasting in"),
         ("poked in", "poke in", "poking in"), ("nodded in", "nod in", "nodding in")]
GOAL_NPS = ["a goal", "a fine goal", "a stunning goal", "a superb goal", "a low shot",
            "a powerful shot", "a clever finish", "an unstoppable strike"]
FIRST_CON = ["After the kickoff ", "Early on ", "Straight from the start "]
LATER_CON = ["Then ", "Later ", "Moments later ", "Afterwards ", "After that ", ""]
CAUSES = ["a decisive counter-attack", "a quick one-two", "a corner kick", "a long pass from {p2}",
          "a mistake by {p2}", "a soft clearance by {p2}"]
EFFECTS = ["send the home fans into raptures", "silence the away fans", "stun the crowd",
           "lift the spirits of {team}"]
COMMENTS = ["leaving the goalkeeper no chance", "much to the delight of the fans",
            "a strike worthy of the occasion", "after a fine run down the wing"]
GOAL_TEMPLATES = [
    "{con}{actor} {vp} {gnp} from {d} metres away in the {m} minute.",
    "{con}{actor} {vp} {gnp} from {d} metres in the {m} minute after {cause}.",
    "In the {m} minute {actor} {vp} {gnp} from {d} metres to {effect}.",
    "{con}{actor} of {team} {vp} {gnp} from {d} metres out in the {m} minute.",
    "{con}{actor} {vp} {gnp} in the {m} minute from {d} metres, {comment}.",
    "{con}it was {actor} who {vp} {gnp} from {d} metres in the {m} minute.",
    "{con}{actor} picked up the ball and {vp} {gnp} from {d} metres in the {m} minute.",
    "{con}{team} went forward and {actor} {vp} {gnp} from {d} metres in the {m} minute.",
    "{con}{actor} {vp} {gnp} for {team} from {d} metres in the {m} minute.",
    "Following {cause}, {actor} {vp} {gnp} from {d} metres in the {m} minute.",
]
OTHER_TEMPLATES = [
    "{con}{actor} was fouled by {p2} in the {m} minute.",
    "{con}{actor} shot wide from {d} metres in the {m} minute.",
    "{con}{actor} was shown a yellow card for a tackle on {p2} in the {m} minute.",
    "{con}a free kick by {actor} from {d} metres was saved in the {m} minute.",
    "{con}{actor} hit the post in the {m} minute.",
    "{con}the referee awarded {team} a corner in the {m} minute after a clearance by {actor}.",
    "{con}{actor} was substituted in the {m} minute.",
    "{con}{actor} had a header cleared off the line in the {m} minute.",
]
FIRST_NAMES = ["Naomi", "Amanda", "Linda", "Marta", "Ingrid", "Petra", "Olga", "Beatrix",
               "Carla", "Dora", "Esther", "Fiona", "Greta", "Helga", "Ivy", "Judith", "Karen",
               "Lotte", "Miriam", "Nadia", "Oriana", "Paula", "Rosa", "Sabine", "Tamara",
               "Ulla", "Vera", "Wilma", "Xenia", "Yvonne"]
LAST_NAMES = ["Daniel", "Collins", "Burger", "Okafor", "Lindqvist", "Moreau", "Kowalski",
              "Fischer", "Haddad", "Ivanova", "Jensen", "Keller", "Lorenzo", "Murphy", "Novak",
              "Oliveira", "Petersen", "Quinn", "Rossi", "Santos", "Tanaka", "Umarov", "Varga",
              "Weber", "Yilmaz", "Zeller", "Abbott", "Brennan", "Castillo", "Dumont"]
TEAMS = ["Riverside Rovers", "Northbridge United", "Eastfield Athletic", "Harbour City",
         "Kingsmoor Town", "Westvale Wanderers", "Oakham Albion", "Stonegate Rangers"]
QUESTION_TYPES = ("who-ordinal", "who-reverse", "when-ordinal", "who-extreme", "how-far-extreme")
ORDINALS = {1: "first", 2: "second", 3: "third"}
REVERSE = {1: "last", 2: "second to last"}


@dataclass(frozen=True)
class Triple:
    """One aligned example: three sentence lists sharing a question."""

    id: str
    question: str
    question_type: str
    category: str
    count: int
    baseline_sentences: tuple[str, ...]
    intervention_sentences: tuple[str, ...]
    modified: tuple[int, ...]
    answer_sentence: tuple[int, int]  # sentence index of A in B, of A' in I
    answers: tuple[str, str]  # (A, A')

    @property
    def control_sentences(self) -> tuple[str, ...]:
        return tuple(s for i, s in enumerate(self.intervention_sentences)
                     if i not in self.modified)


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _plan(rng: random.Random, qtype: str, count: int) -> dict:
    """Event types, goal positions, which goals are modified, and the question's target."""
    n_events = 6
    k = rng.choice([1, 2]) if qtype in ("who-ordinal", "when-ordinal", "who-reverse") else 1
    n_goals = rng.randint(max(k + count, count + 1), n_events - 1)
    goal_slots = sorted(rng.sample(range(n_events), n_goals))
    plan = {"events": n_events, "goals": goal_slots, "k": k}
    if qtype in ("who-ordinal", "when-ordinal"):
        first = k - 1
        plan["modified_goals"] = list(range(first, first + count))
        plan["target"], plan["target_after"] = first, first + count
        plan["question"] = ("Who scored the {o} goal?" if qtype == "who-ordinal"
                            else "When was the {o} goal scored?").format(o=ORDINALS[k])
    elif qtype == "who-reverse":
        last = n_goals - k
        plan["modified_goals"] = list(range(last - count + 1, last + 1))
        plan["target"], plan["target_after"] = last, last - count
        plan["question"] = f"Who scored the {REVERSE[k]} goal?"
    else:
        extreme = rng.choice(["farthest", "closest"])
        plan["extreme"] = extreme
        ranked = rng.sample(range(n_goals), n_goals)  # goal index by rank, most extreme first
        plan["rank"] = ranked
        plan["modified_goals"] = ranked[:count]
        plan["target"], plan["target_after"] = ranked[0], ranked[count]
        plan["question"] = ("Who scored the {e} goal?" if qtype == "who-extreme"
                            else "From how far away was the {e} goal scored?").format(e=extreme)
    return plan


def _names(rng: random.Random, n: int) -> list[str]:
    pairs = rng.sample(list(product(FIRST_NAMES, LAST_NAMES)), n * 3)
    out, lasts = [], set()
    for first, last in pairs:  # distinct surnames too, so no name is inside another
        if last not in lasts:
            out.append(f"{first} {last}")
            lasts.add(last)
        if len(out) == n:
            break
    return out


def _realise(rng: random.Random, plan: dict, category: str, used: set) -> tuple:
    n_events, goal_slots = plan["events"], plan["goals"]
    n_goals = len(goal_slots)
    while True:  # a template permutation never used before in this set
        goal_t = rng.sample(range(len(GOAL_TEMPLATES)), n_goals)
        other_t = rng.sample(range(len(OTHER_TEMPLATES)), n_events - n_goals)
        signature = (tuple(goal_slots), tuple(goal_t), tuple(other_t))
        if signature not in used:
            used.add(signature)
            break
    people = _names(rng, n_events + 6)
    scorers, extras = people[:n_goals], people[n_goals:]
    minutes = sorted(rng.sample(range(10, 90), n_events))  # two digits: none inside another
    distances = sorted(rng.sample(range(10, 41), n_events), reverse=True)
    goal_dist = [0] * n_goals
    if "rank" in plan:
        values = distances[:n_goals] if plan["extreme"] == "farthest" else \
            sorted(distances[:n_goals])
        for rank, goal in enumerate(plan["rank"]):
            goal_dist[goal] = values[rank]
    else:
        goal_dist = rng.sample(distances[:n_goals], n_goals)
    other_dist = iter(distances[n_goals:])
    teams = rng.sample(TEAMS, 2)
    modifiers = {g: rng.choice(CATEGORIES[category][1]) for g in plan["modified_goals"]}
    base_sents, int_sents = [], []
    goal_iter, other_iter, extra_iter = iter(range(n_goals)), iter(other_t), iter(extras)
    goal_sentence = {}
    for slot in range(n_events):
        con = rng.choice(FIRST_CON if slot == 0 else LATER_CON)
        fill = {"con": con, "m": ordinal(minutes[slot]), "team": rng.choice(teams),
                "cause": rng.choice(CAUSES), "effect": rng.choice(EFFECTS),
                "comment": rng.choice(COMMENTS), "gnp": rng.choice(GOAL_NPS)}
        fill["p2"] = next(extra_iter)
        fill["cause"] = fill["cause"].format(p2=fill["p2"])
        fill["effect"] = fill["effect"].format(team=fill["team"])
        if slot in goal_slots:
            g = next(goal_iter)
            goal_sentence[g] = slot
            past, base, ger = rng.choice(VERBS)
            template = GOAL_TEMPLATES[goal_t[g]]
            fill.update(actor=scorers[g], d=goal_dist[g])
            plain = template.format(vp=past, **fill)
            sam = modifiers[g].format(past=past, base=base, ger=ger) if g in modifiers else past
            changed = template.format(vp=sam, **fill)
        else:
            template = OTHER_TEMPLATES[next(other_iter)]
            fill.update(actor=next(extra_iter), d=next(other_dist))
            plain = changed = template.format(vp="", **fill)
        base_sents.append(_capitalise(plain))
        int_sents.append(_capitalise(changed))
    return base_sents, int_sents, goal_sentence, scorers, minutes, goal_dist


def _capitalise(sentence: str) -> str:
    return sentence[0].upper() + sentence[1:]


def generate_triples(n: int, seed: int, max_sam: int = 3) -> list[Triple]:
    """`n` aligned triples: modification counts and question types round-robin, categories
    balanced and shuffled; deterministic in (n, seed, max_sam)."""
    rng = random.Random(seed)
    categories = [list(CATEGORIES)[j % len(CATEGORIES)] for j in range(n)]
    rng.shuffle(categories)  # exactly balanced when 6 divides n, crossed at random
    used: set = set()
    triples = []
    for i in range(n):
        count = 1 + i % max_sam
        qtype = QUESTION_TYPES[(i // max_sam) % len(QUESTION_TYPES)]
        category = categories[i]
        plan = _plan(rng, qtype, count)
        base, inter, goal_sentence, scorers, minutes, dist = _realise(rng, plan, category, used)
        t, t2 = plan["target"], plan["target_after"]
        if qtype.startswith("who"):
            answers = (scorers[t], scorers[t2])
        elif qtype == "when-ordinal":
            answers = (ordinal(minutes[goal_sentence[t]]) + " minute",
                       ordinal(minutes[goal_sentence[t2]]) + " minute")
        else:
            answers = (f"{dist[t]} metres", f"{dist[t2]} metres")
        modified = tuple(sorted(goal_sentence[g] for g in plan["modified_goals"]))
        triples.append(Triple(f"sam-{seed}-{i:05d}", plan["question"], qtype, category, count,
                              tuple(base), tuple(inter), modified,
                              (goal_sentence[t], goal_sentence[t2]), answers))
    return triples


def _paragraph(triple: Triple, part: str) -> dict:
    if part == "baseline":
        sents, where, answer = triple.baseline_sentences, triple.answer_sentence[0], \
            triple.answers[0]
    else:
        sents, where, answer = triple.intervention_sentences, triple.answer_sentence[1], \
            triple.answers[1]
        if part == "control":
            where -= sum(1 for m in triple.modified if m < where)
            sents = triple.control_sentences
    offset = sum(len(s) + 1 for s in sents[:where]) + sents[where].index(answer)
    label = CATEGORIES[triple.category][0]
    meta = {"category": triple.category, "label": label, "count": triple.count,
            "question_type": triple.question_type, "baseline_answer": triple.answers[0],
            "intervention_answer": triple.answers[1], "modified_sentences": list(triple.modified)}
    return {"context": " ".join(sents),
            "qas": [{"id": triple.id, "question": triple.question,
                     "answers": [{"text": answer, "answer_start": offset}], "sam": meta}]}


def to_squad(triples: list[Triple], part: str) -> dict:
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}")
    return {"version": GENERATOR_VERSION,
            "data": [{"title": f"SAM football reports ({part})",
                      "paragraphs": [_paragraph(t, part) for t in triples]}]}


@register("sam-football", needs_parent=False,
          tools=lambda: {"generator": GENERATOR_VERSION})
def sam_football(parent: dict | None, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """SAM football reports: one part (baseline | intervention | control) of aligned triples."""
    n, part = int(params.get("triples", 4200)), str(params.get("part", "baseline"))
    max_sam = int(params.get("max_sam", 3))
    seed = rng.randrange(2**32)
    triples = generate_triples(n, seed, max_sam)
    problems = validate_triples(triples)
    if problems:
        raise ValueError(f"generated triples fail validation: {problems[:3]}")
    raw = to_squad(triples, part)
    counts: dict[str, int] = {}
    for t in triples:
        counts[t.category] = counts.get(t.category, 0) + 1
    return raw, {"triples": n, "part": part, "by_category": counts}


# --- validation -------------------------------------------------------------------------------
SENTENCE_SPLIT = re.compile(r"(?<=\.) ")


def split_sentences(context: str) -> list[str]:
    return SENTENCE_SPLIT.split(context)


def validate_triples(triples: list[Triple]) -> list[str]:
    """Problems with generated triples, in words; empty when every invariant holds."""
    return validate_files(to_squad(triples, "baseline"), to_squad(triples, "intervention"),
                          to_squad(triples, "control"))


def _qas(raw: dict) -> dict[str, tuple[str, dict]]:
    return {qa["id"]: (p["context"], qa) for a in raw["data"] for p in a["paragraphs"]
            for qa in p["qas"]}


def validate_files(baseline: dict, intervention: dict, control: dict) -> list[str]:
    """Check the triple invariants of the notes on three SQuAD-format files aligned by id."""
    problems: list[str] = []
    b_all, i_all, c_all = _qas(baseline), _qas(intervention), _qas(control)
    if not (b_all.keys() == i_all.keys() == c_all.keys()):
        return ["baseline, intervention and control do not share the same question ids"]
    for qid, (b_ctx, b_qa) in b_all.items():
        (i_ctx, i_qa), (c_ctx, c_qa) = i_all[qid], c_all[qid]
        a, a2 = b_qa["answers"][0]["text"], i_qa["answers"][0]["text"]
        modified = set(i_qa["sam"]["modified_sentences"])
        b_s, i_s = split_sentences(b_ctx), split_sentences(i_ctx)
        checks = {
            "the question differs across the triple":
                b_qa["question"] == i_qa["question"] == c_qa["question"],
            "A' equals A": a != a2,
            "the intervention answer differs from the control answer":
                c_qa["answers"][0]["text"] == a2,
            "B and I differ in sentence count": len(b_s) == len(i_s),
            "B and I differ outside the modified sentences": len(b_s) == len(i_s) and all(
                (x == y) != (k in modified) for k, (x, y) in enumerate(zip(b_s, i_s))),
            "C is not I without the modified sentences":
                c_ctx == " ".join(s for k, s in enumerate(i_s) if k not in modified),
            "A is not in the baseline context": a in b_ctx,
            "A' is not in the intervention and control contexts": a2 in i_ctx and a2 in c_ctx,
            "an answer offset is wrong": all(
                ctx[q["answers"][0]["answer_start"]:][:len(q["answers"][0]["text"])]
                == q["answers"][0]["text"]
                for ctx, q in ((b_ctx, b_qa), (i_ctx, i_qa), (c_ctx, c_qa))),
            "the number of modifications is not 1 to 3":
                1 <= len(modified) <= 3 and len(modified) == i_qa["sam"]["count"],
            "the category is unknown": i_qa["sam"]["category"] in CATEGORIES,
        }
        problems += [f"{qid}: {what}" for what, ok in checks.items() if not ok]
    return problems
