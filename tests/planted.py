"""Synthetic traffic with planted topics: each topic has its own words, questions mix a template,
2-4 topic words and a shared filler word, so that the topic of every question is known."""

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
TEMPLATES = ["how do i fix {a} with {b}", "why is my {a} {b} not working", "can i change the {a} for {b} {c}",
             "where is the {a} {b} setting", "{a} {b} {c} question", "help with {a} and {b}"]
FILLER = "please today again urgent quickly account team".split()


def question(rng: random.Random, topic: str) -> str:
    words = rng.sample(TOPICS[topic], 3)
    text = rng.choice(TEMPLATES).format(a=words[0], b=words[1], c=words[2])
    return f"{text} {rng.choice(FILLER)}"


def records(n: int, topics: list[str], *, seed: int = 0, prefix: str = "t", weights: list[float] | None = None,
            signals: bool = False) -> list[dict[str, Any]]:
    """``n`` log records; ``meta.topic`` holds the planted topic (the truth for purity)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        topic = rng.choices(topics, weights=weights)[0]
        rec: dict[str, Any] = {"query_id": f"{prefix}{i:06d}", "question": question(rng, topic), "topic": topic,
                               "retrieved": [{"id": f"{topic}-{j}", "text": f"{topic} chunk {j}", "score": 1 - j / 10}
                                             for j in range(3)]}
        out.append(rec)
    return out


def purity(truth: list[str], found: list[int]) -> float:
    """Share of questions whose cluster's majority planted topic is their own."""
    by_cluster: dict[int, dict[str, int]] = {}
    for t, c in zip(truth, found, strict=True):
        by_cluster.setdefault(c, {}).setdefault(t, 0)
        by_cluster[c][t] += 1
    return sum(max(v.values()) for v in by_cluster.values()) / max(len(truth), 1)
