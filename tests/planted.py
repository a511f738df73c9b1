"""Synthetic traffic with planted topics: each topic has its own words, questions mix a template,
2-4 topic words and a shared filler word, so that the topic of every question is known.
``noisy_records`` adds what real logs have (seeded): typos (a swapped or dropped character), short
questions of 1-3 words, and generic words every topic shares ("how", "account", "help")."""

from __future__ import annotations

import random
from typing import Any

TOPICS: dict[str, list[str]] = {
    "billing": "invoice refund charge payment receipt vat subscription discount coupon billing".split(),
    "sso": "okta saml sso azure login certificate idp provisioning scim metadata".split(),
    "export": "csv export spreadsheet download excel columns report xlsx delimiter encoding".split(),
    "mobile": "iphone android app notification offline tablet battery push ios gps".split(),
    "api": "api token webhook endpoint ratelimit json pagination sdk oauth curl".split(),
    "timesheet": "timesheet hours overtime approval shift clock payroll holiday leave weekly".split(),
    "garden": "tomato compost seedling mulch pruning soil fertilizer greenhouse weeds watering".split(),
}
# five more subjects for the 12-topic set; kept apart so that code iterating TOPICS sees the same 7
MORE_TOPICS: dict[str, list[str]] = {
    "travel": "flight hotel visa luggage passport boarding airline layover itinerary baggage".split(),
    "kitchen": "recipe oven dough flour bake yeast sourdough knead skillet simmer".split(),
    "music": "guitar chord piano tuning amplifier strings metronome drum melody pedal".split(),
    "car": "engine brake tyre gearbox clutch radiator exhaust alternator mileage ignition".split(),
    "pets": "puppy kitten vet leash litter grooming flea kibble vaccination collar".split(),
}
VOCABULARY = {**TOPICS, **MORE_TOPICS}
TWELVE = list(VOCABULARY)[:12]
TEMPLATES = ["how do i fix {a} with {b}", "why is my {a} {b} not working", "can i change the {a} for {b} {c}",
             "where is the {a} {b} setting", "{a} {b} {c} question", "help with {a} and {b}"]
FILLER = "please today again urgent quickly account team".split()
# words any subject's questions use: the noise a topic label must not be made of
GENERIC = "how account help problem issue error settings need want working support".split()
NOISY_TEMPLATES = [*TEMPLATES, "{g} {a} {b} {g2}", "my {a} {g} {b}", "{a} {g}", "{g} {g2} {a} {b} {c}",
                   "is there a way to get {a} {b} in my {g}", "{a} {b} {g} {g2} please"]


def question(rng: random.Random, topic: str) -> str:
    words = rng.sample(VOCABULARY[topic], 3)
    text = rng.choice(TEMPLATES).format(a=words[0], b=words[1], c=words[2])
    return f"{text} {rng.choice(FILLER)}"


def typo(rng: random.Random, word: str) -> str:
    """``word`` with two neighbouring characters swapped or one character dropped."""
    if len(word) < 4:
        return word
    i = rng.randrange(1, len(word) - 1)
    if rng.random() < 0.5:
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    return word[:i] + word[i + 1:]


def noisy_question(rng: random.Random, topic: str, *, typo_rate: float = 0.15, short_rate: float = 0.2) -> str:
    """A question of ``topic`` as people type them: a fifth are 1-3 topic words only, the rest a
    template mixing topic words with generic and filler words; each topic word has a typo with
    probability ``typo_rate``."""
    words = [typo(rng, w) if rng.random() < typo_rate else w for w in rng.sample(VOCABULARY[topic], 3)]
    if rng.random() < short_rate:
        return " ".join(words[:rng.randint(1, 3)])
    g, g2 = rng.sample(GENERIC, 2)
    text = rng.choice(NOISY_TEMPLATES).format(a=words[0], b=words[1], c=words[2], g=g, g2=g2)
    return f"{text} {rng.choice(FILLER)}" if rng.random() < 0.5 else text


def records(n: int, topics: list[str], *, seed: int = 0, prefix: str = "t", weights: list[float] | None = None,
            signals: bool = False, noisy: bool = False) -> list[dict[str, Any]]:
    """``n`` log records; ``meta.topic`` holds the planted topic (the truth for purity). ``noisy``:
    questions from :func:`noisy_question`."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = rng.choices(topics, weights=weights)[0]
        text = noisy_question(rng, topic) if noisy else question(rng, topic)
        rec: dict[str, Any] = {"query_id": f"{prefix}{i:06d}", "question": text, "topic": topic,
                               "retrieved": [{"id": f"{topic}-{j}", "text": f"{topic} chunk {j}", "score": 1 - j / 10}
                                             for j in range(3)]}
        out.append(rec)
    return out


def balanced(per_topic: int, topics: list[str], *, seed: int = 0, prefix: str = "p") -> list[dict[str, Any]]:
    """Exactly ``per_topic`` noisy questions of each topic, shuffled (seeded)."""
    rng = random.Random(seed)
    plan = [t for t in topics for _ in range(per_topic)]
    rng.shuffle(plan)
    return [{"query_id": f"{prefix}{i:06d}", "question": noisy_question(rng, t), "topic": t,
             "retrieved": [{"id": f"{t}-0", "text": f"{t} chunk", "score": 1.0}]} for i, t in enumerate(plan)]


def purity(truth: list[str], found: list[int]) -> float:
    """Share of questions whose cluster's majority planted topic is their own."""
    by_cluster: dict[int, dict[str, int]] = {}
    for t, c in zip(truth, found, strict=True):
        by_cluster.setdefault(c, {}).setdefault(t, 0)
        by_cluster[c][t] += 1
    return sum(max(v.values()) for v in by_cluster.values()) / max(len(truth), 1)
