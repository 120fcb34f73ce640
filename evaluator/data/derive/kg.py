"""Knowledge-graph synthetic QA after Liu et al.'s WikidataSyntheticQA, with WordNet 3.0 in
place of Wikidata (which cannot be reached here).

Entities are synsets: the first lemma is the label, the others are aliases. Relations are
WordNet's pointers (hypernym, hyponym, meronyms and holonyms, antonym, ...), each with a
label, aliases and, where WordNet has one, its inverse. A passage takes a seed entity among
the `seeds` of highest degree (among those with enough triples around them), gathers the
triples of the seed and of every entity it points to, samples `triples_per_passage` of them
and realises each as "subject relation object" (a random label or alias for each part),
joined by " . ". A question picks one realised triple, masks its subject or object as XXXXX
(the answer: that element's words in the passage, an exact span), gives the other parts
fresh realisations and, at random, swaps to the inverse relation (subject and object
exchanged) and replaces the unmasked entity by one of its hypernyms. `aliases: false`
realises every entity and relation by its label only (the paper's ablation).

The test part's seeds and the training part's are disjoint: the ranked seeds are shuffled
with `split_seed` (the same for both parts) and the first `test_share` of them belong to the
test part. Questions per passage: `questions` in all over `passages`, at least one each and
at most five (the paper's evaluation part has five per passage; its training part 10,000
over 8,376 passages).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from evaluator.core.errors import DataError
from evaluator.data.derive import register

GENERATOR_VERSION = "kg-wordnet-1"
MASK = "XXXXX"
DEFAULT_ROOT = Path("/usr/share/wordnet")
FILES = ("data.noun", "data.verb", "data.adj")

# pointer symbol -> (label, aliases, inverse symbol or None)
RELATIONS: dict[str, tuple[str, tuple[str, ...], str | None]] = {
    "@": ("is a kind of", ("is a type of", "hypernym"), "~"),
    "~": ("has the kind", ("has the subtype", "hyponym"), "@"),
    "@i": ("is an instance of", ("is an example of", "instance hypernym"), "~i"),
    "~i": ("has the instance", ("has the example", "instance hyponym"), "@i"),
    "#m": ("is a member of", ("belongs to", "member holonym"), "%m"),
    "%m": ("has the member", ("includes the member", "member meronym"), "#m"),
    "#p": ("is a part of", ("is a component of", "part holonym"), "%p"),
    "%p": ("has the part", ("has the component", "part meronym"), "#p"),
    "#s": ("is a substance of", ("is an ingredient of", "substance holonym"), "%s"),
    "%s": ("is made of", ("has the substance", "substance meronym"), "#s"),
    "!": ("is the opposite of", ("antonym", "contrasts with"), "!"),
    "=": ("has the attribute", ("attribute", "is measured by"), "="),
    "*": ("entails", ("implies", "entailment"), None),
    ">": ("causes", ("brings about", "cause"), None),
    ";c": ("belongs to the topic", ("topic domain", "is a term of"), "-c"),
    "-c": ("has the topic member", ("topic term", "covers the term"), ";c"),
    ";r": ("belongs to the region", ("region domain", "is used in"), "-r"),
    "-r": ("has the regional term", ("region term", "is the region of"), ";r"),
    ";u": ("has the usage", ("usage domain", "is labelled"), "-u"),
    "-u": ("is the usage of", ("usage term", "labels"), ";u"),
}
HYPERNYMS = ("@", "@i")


@dataclass(frozen=True)
class Triple:
    subject: str  # synset key "offset-pos"
    relation: str  # pointer symbol
    object: str


@dataclass(frozen=True)
class Query:
    """A question before realisation: which triple, which element is masked, and the two
    optional rewrites (`subject`, `relation`, `object` are what the question shows)."""

    triple: Triple
    masked: str  # "subject" or "object", of the question's triple
    subject: str
    relation: str
    object: str
    inverted: bool
    hypernym: str | None  # the entity the unmasked one was replaced by


@dataclass(frozen=True)
class Graph:
    names: dict[str, tuple[str, ...]]  # entity -> (label, *aliases)
    edges: dict[str, tuple[tuple[str, str], ...]]  # entity -> ((relation, entity), ...)
    rankings: dict = field(default_factory=dict, compare=False, repr=False)  # seed rankings

    def triples(self, entity: str) -> list[Triple]:
        return [Triple(entity, rel, obj) for rel, obj in self.edges.get(entity, ())]

    def degree(self, entity: str) -> int:
        return len(self.edges.get(entity, ()))

    def hypernyms(self, entity: str) -> list[str]:
        return [obj for rel, obj in self.edges.get(entity, ()) if rel in HYPERNYMS]


def _lemma(word: str) -> str:
    word = word.split("(", 1)[0]  # adjective markers: "galore(ip)"
    return word.replace("_", " ")


def parse(lines) -> tuple[dict[str, tuple[str, ...]], dict[str, list[tuple[str, str]]]]:
    """Synsets and pointers of a WordNet data file (wndb(5WN)): `offset lex_filenum ss_type
    w_cnt word lex_id ... p_cnt pointer... | gloss`; w_cnt is hexadecimal."""
    names, edges = {}, {}
    for line in lines:
        if line.startswith("  "):  # the licence header
            continue
        fields = line.split(" | ", 1)[0].split()
        offset, pos = fields[0], fields[2].replace("s", "a")
        key = f"{offset}-{pos}"
        words = int(fields[3], 16)
        lemmas = [_lemma(fields[4 + 2 * k]) for k in range(words)]
        names[key] = tuple(dict.fromkeys(lemmas))
        at = 4 + 2 * words
        pointers = int(fields[at])
        out = []
        for k in range(pointers):
            symbol, target, target_pos = fields[at + 1 + 4 * k: at + 4 + 4 * k]
            if symbol in RELATIONS:
                out.append((symbol, f"{target}-{target_pos.replace('s', 'a')}"))
        edges[key] = out
    return names, edges


def wordnet_root(root: str | Path | None = None) -> Path:
    path = Path(root) if root else DEFAULT_ROOT
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise DataError(f"WordNet 3.0 data files not found under {path} ({', '.join(missing)}"
                        f"): install the Debian package wordnet-base (install.sh does)")
    return path


@cache
def load_graph(root: str | None = None) -> Graph:
    """Every synset of the noun, verb and adjective files with its pointers; only pointers
    between loaded synsets are kept."""
    path = wordnet_root(root)
    names, edges = {}, {}
    for name in FILES:
        with open(path / name, encoding="utf-8") as f:
            n, e = parse(f)
        names.update(n)
        edges.update(e)
    return Graph(names, {k: tuple((r, o) for r, o in v if o in names)
                         for k, v in edges.items()})


@cache
def wordnet_version(root: str | None = None) -> str:
    digest = hashlib.sha256()
    for name in FILES:
        digest.update((wordnet_root(root) / name).read_bytes())
    return f"WordNet 3.0 (data files sha256 {digest.hexdigest()[:16]})"


def neighbourhood(graph: Graph, seed: str) -> list[Triple]:
    """The triples of the seed and of every entity it points to, each once, in a fixed order."""
    pool = dict.fromkeys(graph.triples(seed))
    for _, neighbour in graph.edges.get(seed, ()):
        pool.update(dict.fromkeys(graph.triples(neighbour)))
    return list(pool)


def ranked_seeds(graph: Graph, count: int, need: int) -> list[str]:
    """The `count` entities of highest degree (ties by key, so the order is fixed) among
    those with at least `need` triples around them (kept with the graph: ranking takes
    seconds and every folder of a process asks for it)."""
    if (count, need) not in graph.rankings:
        graph.rankings[count, need] = _rank(graph, count, need)
    return list(graph.rankings[count, need])


def _rank(graph: Graph, count: int, need: int) -> tuple[str, ...]:
    out = []
    for entity in sorted(graph.names, key=lambda e: (-graph.degree(e), e)):
        if len(out) == count or graph.degree(entity) == 0:
            break
        if len(neighbourhood(graph, entity)) >= need:
            out.append(entity)
    return tuple(out)


def part_seeds(graph: Graph, part: str, count: int, need: int, test_share: float,
               split_seed: int) -> list[str]:
    """The seeds of one part: the ranked seeds shuffled by `split_seed`, the first
    `test_share` of them the test part's, the rest the training part's."""
    seeds = ranked_seeds(graph, count, need)
    random.Random(split_seed).shuffle(seeds)
    cut = int(round(test_share * len(seeds)))
    return seeds[:cut] if part == "test" else seeds[cut:]


def realise(names: tuple[str, ...], rng: random.Random, aliases: bool) -> str:
    return rng.choice(names) if aliases else names[0]


def relation_names(symbol: str) -> tuple[str, ...]:
    label, others, _ = RELATIONS[symbol]
    return (label, *others)


def passage_triples(graph: Graph, seed: str, count: int, rng: random.Random) -> list[Triple]:
    """`count` triples sampled from those of the seed and of every entity it points to."""
    pool = neighbourhood(graph, seed)
    if len(pool) < count:
        raise ValueError(f"kg: seed {seed} has {len(pool)} triples around it, fewer than "
                         f"{count}")
    return rng.sample(pool, count)


def make_query(triple: Triple, graph: Graph, rng: random.Random, *, p_inverse: float,
               p_hypernym: float) -> Query:
    """Mask the subject or the object; maybe invert the relation (swapping the two ends) and
    maybe replace the unmasked entity by one of its hypernyms (never by the answer itself)."""
    masked = rng.choice(("subject", "object"))
    subject, relation, obj = triple.subject, triple.relation, triple.object
    inverted = False
    inverse = RELATIONS[relation][2]
    if inverse is not None and rng.random() < p_inverse:
        subject, relation, obj = obj, inverse, subject
        masked = "object" if masked == "subject" else "subject"
        inverted = True
    hypernym = None
    other = obj if masked == "subject" else subject
    answer = subject if masked == "subject" else obj
    choices = [h for h in graph.hypernyms(other) if h != answer]
    if choices and rng.random() < p_hypernym:
        hypernym = rng.choice(choices)
        if masked == "subject":
            obj = hypernym
        else:
            subject = hypernym
    return Query(triple, masked, subject, relation, obj, inverted, hypernym)


def question_text(query: Query, graph: Graph, rng: random.Random, aliases: bool) -> str:
    parts = []
    for role in ("subject", "relation", "object"):
        if role == query.masked:
            parts.append(MASK)
        elif role == "relation":
            parts.append(realise(relation_names(query.relation), rng, aliases))
        else:
            parts.append(realise(graph.names[getattr(query, role)], rng, aliases))
    return " ".join(parts) + " ?"


def questions_per_passage(passages: int, questions: int, rng: random.Random) -> list[int]:
    """`questions` spread over `passages`: one each, the rest at random, at most five each."""
    if not passages <= questions <= 5 * passages:
        raise ValueError(f"kg: {questions} questions cannot be spread over {passages} passages "
                         f"at one to five each")
    counts = [1] * passages
    open_ = list(range(passages))
    for _ in range(questions - passages):
        k = rng.randrange(len(open_))
        counts[open_[k]] += 1
        if counts[open_[k]] == 5:
            open_[k] = open_[-1]
            open_.pop()
    return counts


def generate(graph: Graph, seeds: list[str], counts: list[int], rng: random.Random, *,
             triples_per_passage: int, aliases: bool, p_inverse: float, p_hypernym: float,
             label: str) -> tuple[dict, list[list[Query]]]:
    """SQuAD-format data (one article) and the queries behind every question."""
    paragraphs, queries = [], []
    for number, count in enumerate(counts):
        seed = rng.choice(seeds)
        triples = passage_triples(graph, seed, triples_per_passage, rng)
        pieces, spans, at = [], [], 0
        for triple in triples:
            sub = realise(graph.names[triple.subject], rng, aliases)
            rel = realise(relation_names(triple.relation), rng, aliases)
            obj = realise(graph.names[triple.object], rng, aliases)
            text = f"{sub} {rel} {obj}"
            spans.append({"subject": (at, sub), "object": (at + len(sub) + len(rel) + 2, obj)})
            pieces.append(text)
            at += len(text) + 3  # " . "
        context = " . ".join(pieces) + " ."
        qas, made = [], []
        for k in rng.sample(range(len(triples)), count):
            query = make_query(triples[k], graph, rng, p_inverse=p_inverse,
                               p_hypernym=p_hypernym)
            role = query.masked if not query.inverted else (
                "object" if query.masked == "subject" else "subject")
            start, text = spans[k][role]
            qas.append({"id": f"{label}-{number}-{len(qas)}",
                        "question": question_text(query, graph, rng, aliases),
                        "answers": [{"text": text, "answer_start": start}]})
            made.append(query)
        paragraphs.append({"context": context, "qas": qas})
        queries.append(made)
    return {"version": GENERATOR_VERSION,
            "data": [{"title": f"WordNet synthetic QA ({label})", "paragraphs": paragraphs}]
            }, queries


def tools() -> dict[str, str]:
    return {"generator": GENERATOR_VERSION, "wordnet": wordnet_version()}


@register("kg", needs_parent=False, tools=tools)
def kg(parent: dict | None, params: dict, rng: random.Random) -> tuple[dict, dict]:
    """WordNet synthetic QA: `part` train or test, `passages` passages holding `questions`
    questions, seeds among the `seeds` entities of highest degree."""
    part = str(params.get("part", "test"))
    if part not in ("train", "test"):
        raise ValueError(f"kg: part must be train or test, got {part!r}")
    passages, questions = int(params.get("passages", 200)), int(params.get("questions", 1000))
    top, share = int(params.get("seeds", 10000)), float(params.get("test_share", 0.2))
    per_passage = int(params.get("triples_per_passage", 50))
    aliases = bool(params.get("aliases", True))
    p_inverse = float(params.get("p_inverse", 0.5))
    p_hypernym = float(params.get("p_hypernym", 0.5))
    graph = load_graph()
    seeds = part_seeds(graph, part, top, per_passage, share, int(params.get("split_seed", 0)))
    counts = questions_per_passage(passages, questions, rng)
    raw, queries = generate(graph, seeds, counts, rng, triples_per_passage=per_passage,
                            aliases=aliases, p_inverse=p_inverse, p_hypernym=p_hypernym,
                            label=f"kg-{part}")
    flat = [q for made in queries for q in made]
    return raw, {"part": part, "passages": passages, "questions": len(flat),
                 "seeds": len(seeds), "triples_per_passage": per_passage, "aliases": aliases,
                 "inverted": sum(q.inverted for q in flat),
                 "hypernym_rewrites": sum(q.hypernym is not None for q in flat)}
