"""Benchmark: recall of the built-in redaction per kind on the planted set (tests/pii_planted.py),
through a real ``labeler.ingest_logs`` into a fresh database, read back from what was stored; the
look-alikes (dates, versions, amounts, order numbers...) that were changed are the false positives.
Next to it, libphonenumber's own PhoneNumberMatcher alone at each leniency over the same planted
phones and look-alikes (the figures the phone rules of labeler.privacy.phones were chosen on).
Prints one JSON document; ``--missed`` adds every value that was missed or only partly replaced.

    python tests/bench/bench_redaction.py [--seed 24] [--missed]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests import pii_planted  # noqa: E402


def matcher_alone(plants: list) -> dict:
    """PhoneNumberMatcher over each planted phone's sentence and each look-alike, trying the
    regions labeler tries: phones found whole, look-alikes in which it found any number."""
    import phonenumbers

    from labeler.privacy.phones import REGIONS

    def matches(text: str, leniency) -> list[str]:
        for region in REGIONS:
            found = [m.raw_string for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=leniency)]
            if found:
                return found
        return []

    phones = [p for p in plants if p.kind == "PHONE" and not p.form.startswith("disguise")]
    looks = [p for p in plants if p.kind == "NONE"]
    out = {}
    for name in ("POSSIBLE", "VALID", "STRICT_GROUPING", "EXACT_GROUPING"):
        leniency = getattr(phonenumbers.Leniency, name)
        found = sum(p.value in matches(p.before + p.value + p.after, leniency) for p in phones)
        taken = sum(bool(matches(p.value, leniency)) for p in looks)
        out[name] = {"phones_found": found, "phones": len(phones), "look_alikes_taken": taken,
                     "look_alikes": len(looks)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--missed", action="store_true", help="list what was missed and the look-alikes changed")
    args = ap.parse_args()
    os.environ.setdefault("LABELER_PRESIDIO", "0")  # the built-in detectors alone
    import labeler

    plants = pii_planted.planted(args.seed)
    with tempfile.TemporaryDirectory() as d:
        log = pii_planted.write_log(Path(d) / "planted.jsonl", plants)
        db = labeler.connect(Path(d) / "t.db")
        t = time.perf_counter()
        result = pii_planted.measure(db, log, plants)
        elapsed = time.perf_counter() - t
        db.close()
    if not args.missed:
        result.pop("missed")
        result.pop("look_alikes_changed")
    print(json.dumps({"benchmark": "redaction-recall", "seed": args.seed, "records": len(plants),
                      "ingest_s": round(elapsed, 2), **result, "phone_matcher_alone": matcher_alone(plants)},
                     indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
