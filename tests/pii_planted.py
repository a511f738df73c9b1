"""The planted personal-data set: a seeded generator of realistic log records, each carrying one
value of a known kind (EMAIL; PHONE in the international and national forms of thirteen countries;
CARD grouped in several ways; IBAN; IP, public and private IPv4 and IPv6 in log-line contexts;
NATIONAL_ID; SECRET) inside a sentence of a question or a chunk text, the same values again in
Unicode disguises (non-breaking and thin spaces, fullwidth characters, zero-width characters, soft
hyphens), and look-alikes that must survive (dates, times, versions, amounts, order numbers, SKUs,
ids, hashes). ``measure`` ingests them through ``labeler.ingest_logs`` and reads back what was
stored: a value counts as found when exactly its characters became one placeholder of its kind."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

KINDS = ("EMAIL", "PHONE", "CARD", "IBAN", "IP", "NATIONAL_ID", "SECRET")
SIZES = {"EMAIL": 60, "PHONE": 120, "CARD": 60, "IBAN": 40, "IP": 202, "NATIONAL_ID": 40, "SECRET": 48}


@dataclass(frozen=True)
class Plant:
    kind: str  # a KINDS type, or "NONE" for a look-alike
    value: str
    form: str  # how it is written ("GB mobile intl", "nbsp grouped", "date iso", ...)
    before: str  # the sentence around it
    after: str


# --- phones ----------------------------------------------------------------------------------------

def _d(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


def _phone(rng: random.Random, country: str) -> list[tuple[str, str]]:
    """(value, form) pairs for one subscriber of ``country``: its international and national forms."""
    if country == "GB":
        sub = f"7{rng.choice('45789')}{_d(rng, 2)}"
        rest = _d(rng, 6)
        london = f"{rng.choice('378')}{_d(rng, 3)} {_d(rng, 4)}"
        return [(f"+44 {sub} {rest}", "GB mobile intl"), (f"0{sub} {rest}", "GB mobile national"),
                (f"+44 (0)20 {london}", "GB London intl (0)"), (f"020 {london}", "GB London national")]
    if country == "DE":
        berlin = f"{rng.choice('2345789')}{_d(rng, 7)}"
        mobile = f"15{rng.choice('12579')} {_d(rng, 8)}"
        return [(f"+49 30 {berlin}", "DE Berlin intl"), (f"030 {berlin}", "DE Berlin national"),
                (f"+49 {mobile}", "DE mobile intl"), (f"0{mobile}", "DE mobile national")]
    if country == "FR":
        first = rng.choice("67")
        lead = (_d(rng, 1) if first == "6" else rng.choice("3456789")) + _d(rng, 1)  # 070-072 are not mobiles
        pairs = " ".join([lead, *(_d(rng, 2) for _ in range(3))])
        return [(f"+33 {first} {pairs}", "FR mobile intl"), (f"0{first} {pairs}", "FR mobile national"),
                (f"0{first}.{pairs.replace(' ', '.')}", "FR mobile dots"),
                (f"+33 1 {pairs}", "FR Paris intl"), (f"01 {pairs}", "FR Paris national")]
    if country == "IN":
        mobile = f"{rng.choice('6789')}{_d(rng, 4)} {_d(rng, 5)}"
        return [(f"+91 {mobile}", "IN mobile intl"), (f"+91-{mobile.replace(' ', '')}", "IN mobile intl compact"),
                (f"0{mobile}", "IN mobile national"), (mobile, "IN mobile national no 0")]
    if country == "US":
        area = rng.choice(["212", "415", "646", "312", "617", "206", "512", "303", "404", "702"])
        exch = f"{rng.choice('23456789')}{_d(rng, 2)}"
        line = _d(rng, 4)
        return [(f"({area}) {exch}-{line}", "US parens"), (f"{area}-{exch}-{line}", "US dashes"),
                (f"{area}.{exch}.{line}", "US dots"), (f"+1 {area} {exch} {line}", "US intl"),
                (f"+1 ({area}) {exch}-{line}", "US intl parens")]
    if country == "ES":
        mobile = f"6{_d(rng, 2)} {_d(rng, 3)} {_d(rng, 3)}"
        return [(f"+34 {mobile}", "ES mobile intl"), (mobile, "ES mobile national")]
    if country == "IT":
        mobile = f"3{rng.choice('2456789')}{_d(rng, 1)} {_d(rng, 3)} {_d(rng, 4)}"
        rome = f"06 {_d(rng, 4)} {_d(rng, 4)}"
        return [(f"+39 {mobile}", "IT mobile intl"), (f"+39 {rome}", "IT Rome intl"), (rome, "IT Rome national")]
    if country == "NL":
        mobile = f"6 {rng.choice('12345')}{_d(rng, 7)}"
        return [(f"+31 {mobile}", "NL mobile intl"), (f"0{mobile}", "NL mobile national")]
    if country == "BR":
        mobile = f"11 9{_d(rng, 4)}-{_d(rng, 4)}"
        return [(f"+55 {mobile}", "BR mobile intl"), (f"({mobile[:2]}) {mobile[3:]}", "BR mobile national")]
    if country == "AU":
        mobile = f"4{_d(rng, 2)} {_d(rng, 3)} {_d(rng, 3)}"
        sydney = f"{rng.choice('89')}{_d(rng, 3)} {_d(rng, 4)}"
        return [(f"+61 {mobile}", "AU mobile intl"), (f"0{mobile}", "AU mobile national"),
                (f"(02) {sydney}", "AU Sydney national")]
    if country == "JP":
        mobile = f"90-{_d(rng, 4)}-{_d(rng, 4)}"
        return [(f"+81 {mobile}", "JP mobile intl"), (f"0{mobile}", "JP mobile national"),
                (f"03-{_d(rng, 4)}-{_d(rng, 4)}", "JP Tokyo national")]
    if country == "CN":
        mobile = f"1{rng.choice('358')}{_d(rng, 1)} {_d(rng, 4)} {_d(rng, 4)}"
        return [(f"+86 {mobile}", "CN mobile intl"), (mobile, "CN mobile national")]
    if country == "MX":
        return [(f"+52 55 {_d(rng, 4)} {_d(rng, 4)}", "MX Mexico City intl")]
    raise ValueError(country)


COUNTRIES = ("GB", "DE", "FR", "IN", "US", "ES", "IT", "NL", "BR", "AU", "JP", "CN", "MX")


def phones(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    while len(out) < n:
        for country in COUNTRIES:
            out.extend(_phone(rng, country))
    rng.shuffle(out)
    return out[:n]


# --- the other kinds -------------------------------------------------------------------------------

def _luhn_complete(rng: random.Random, prefix: str, length: int) -> str:
    body = prefix + _d(rng, length - len(prefix) - 1)
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d = d * 2 - 9 if d * 2 > 9 else d * 2
        total += d
    return body + str((10 - total % 10) % 10)


def cards(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        brand = ("4", 16), ("51", 16), ("55", 16), ("37", 15), ("6011", 16)
        prefix, length = brand[i % len(brand)]
        digits = _luhn_complete(rng, prefix, length)
        style = i % 3
        if length == 15:
            grouped = f"{digits[:4]}{' -'[style % 2]}{digits[4:10]}{' -'[style % 2]}{digits[10:]}"
        else:
            sep = " -"[style % 2]
            grouped = sep.join(digits[j:j + 4] for j in range(0, 16, 4))
        out.append((grouped if style < 2 else digits, f"card {['spaces', 'dashes', 'compact'][style]}"))
    return out


def _iban(rng: random.Random, country: str, bban: str) -> str:
    moved = bban + country + "00"
    check = 98 - int("".join(str(int(c, 36)) for c in moved)) % 97
    return f"{country}{check:02d}{bban}"


def ibans(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        country, bban = [("DE", _d(rng, 18)), ("FR", _d(rng, 10) + "A" + _d(rng, 12)),
                         ("GB", "WEST" + _d(rng, 14)), ("NL", "ABNA" + _d(rng, 10)),
                         ("ES", _d(rng, 20))][i % 5]
        compact = _iban(rng, country, bban)
        grouped = " ".join(compact[j:j + 4] for j in range(0, len(compact), 4))
        out.append((grouped, "iban grouped") if i % 2 else (compact, "iban compact"))
    return out


def ips(rng: random.Random, n: int) -> list[tuple[str, str]]:
    def b() -> int:
        return rng.randint(1, 254)

    shapes = [
        (lambda: f"10.{b()}.{b()}.{b()}", "ipv4 10/8"),
        (lambda: f"172.{rng.randint(16, 31)}.{b()}.{b()}", "ipv4 172.16/12"),
        (lambda: f"192.168.{rng.randint(0, 255)}.{b()}", "ipv4 192.168/16"),
        (lambda: f"169.254.{b()}.{b()}", "ipv4 link-local"),
        (lambda: f"100.{rng.randint(64, 127)}.{b()}.{b()}", "ipv4 100.64/10"),
        (lambda: f"{rng.choice([23, 34, 52, 81, 91, 151, 185, 203])}.{b()}.{b()}.{b()}", "ipv4 public"),
        (lambda: f"fe80::{rng.randint(1, 0xffff):x}:{rng.randint(1, 0xffff):x}:{rng.randint(1, 0xffff):x}:"
                 f"{rng.randint(1, 0xffff):x}", "ipv6 link-local"),
        (lambda: f"fd{rng.randint(0, 255):02x}:{rng.randint(1, 0xffff):x}:{rng.randint(1, 0xffff):x}::"
                 f"{rng.randint(1, 0xffff):x}", "ipv6 unique local"),
        (lambda: f"2001:db8:{rng.randint(1, 0xffff):x}::{rng.randint(1, 0xffff):x}", "ipv6 global"),
        (lambda: f"2a00:1450:{rng.randint(1, 0xffff):x}:{rng.randint(1, 0xffff):x}::{rng.randint(1, 0xff):x}",
         "ipv6 global"),
        (lambda: f"::ffff:192.168.{rng.randint(0, 255)}.{b()}", "ipv6 mapped ipv4"),
    ]
    return [(make(), form) for make, form in (shapes[i % len(shapes)] for i in range(n))]


_SSN_AREAS = [f"{a:03d}" for a in range(1, 900) if a != 666]
_NINO_FIRST = "ABCEGHJKLMNOPRSTWXYZ"
_NINO_SECOND = "ABCEGHJKLMNPRSTWXYZ"


def national_ids(rng: random.Random, n: int) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        if i % 2:
            ssn = f"{rng.choice(_SSN_AREAS)}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"
            out.append((ssn, "US SSN"))
        else:
            while True:
                prefix = rng.choice(_NINO_FIRST) + rng.choice(_NINO_SECOND)
                if prefix not in ("BG", "GB", "KN", "NK", "NT", "TN", "ZZ"):
                    break
            body = f"{_d(rng, 2)} {_d(rng, 2)} {_d(rng, 2)}"
            out.append((f"{prefix} {body} {rng.choice('ABCD')}", "UK NINO"))
    return out


def _alnum(rng: random.Random, n: int, alphabet: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def secrets(rng: random.Random, n: int) -> list[tuple[str, str]]:
    makers = [
        (lambda: f"sk-proj-{_alnum(rng, 40)}", "openai"),
        (lambda: f"AKIA{_alnum(rng, 16, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567')}", "aws"),
        (lambda: f"ghp_{_alnum(rng, 36)}", "github"),
        (lambda: f"xoxb-{_d(rng, 12)}-{_d(rng, 13)}-{_alnum(rng, 24)}", "slack"),
        (lambda: f"AIza{_alnum(rng, 35)}", "google"),
        (lambda: f"sk_live_{_alnum(rng, 24)}", "stripe"),
    ]
    return [(make(), form) for make, form in (makers[i % len(makers)] for i in range(n))]


def emails(rng: random.Random, n: int) -> list[tuple[str, str]]:
    first = ["maria", "jan", "li", "priya", "tom", "sofia", "ahmed", "yuki", "olga", "diego"]
    last = ["rossi", "novak", "wei", "sharma", "baker", "garcia", "hassan", "tanaka", "ivanova", "lopez"]
    hosts = ["example.com", "mail.example.org", "corp.example.co.uk", "example.de", "uni-example.edu"]
    out = []
    for i in range(n):
        local = [f"{rng.choice(first)}.{rng.choice(last)}", f"{rng.choice(first)}{rng.randint(1, 99)}",
                 f"{rng.choice(first)}+support@", f"{rng.choice(last)}_{rng.choice(first)}"][i % 4].rstrip("@")
        out.append((f"{local}@{rng.choice(hosts)}", "email"))
    return out


# --- sentences -------------------------------------------------------------------------------------

CONTEXTS = {
    "PHONE": [("Please call me back on ", " after 5pm."), ("Customer phone: ", ", prefers SMS."),
              ("My number is ", "."), ("ticket 4821 (2026-11-03): reach the user at ", " or by mail."),
              ("rückruf an ", " bitte"), ("Tel. ", " - ask for accounts.")],
    "IP": [("2026-11-01 10:32:07 INFO login from ", " ok"), ("request from ", " was rate limited"),
           ("[2026-11-01T10:32:07Z] 403 ", " GET /admin"), ("client=", " status=200 bytes=5120"),
           ("the VPN gave me ", " and nothing loads"), ("peer [", "]:443 closed")],
    "EMAIL": [("Send the invoice to ", " please."), ("my login is ", ", reset it"), ("<", "> wrote:")],
    "CARD": [("I paid with ", " and was charged twice."), ("card number: ", "; exp 09/27"),
             ("charge on ", " failed")],
    "IBAN": [("Refund to IBAN ", ", thanks."), ("account ", " (business)")],
    "NATIONAL_ID": [("my SSN is ", " for the tax form"), ("NI number ", ", payroll asked")],
    "SECRET": [("I set OPENAI key ", " in the env"), ("token=", " expired?"), ("config has ", " inline")],
}

LOOK_ALIKES = [
    ("date iso", "released 2026-11-01 at 12:30:45"), ("date dots", "on 01.02.2026 the plan changed"),
    ("date slashes", "invoice of 11/03/2026 is missing"), ("datetime", "at 2026-11-01 10:32:07.123 UTC"),
    ("version", "version 1.2.3 and v3.11.7"), ("version long", "upgrade to 14.2.1023 fixed it"),
    ("build", "build 20261101 is live"), ("order", "order 12345678 shipped"), ("ticket", "ticket #482913 reopened"),
    ("id", "id r1234567890 not found"), ("amount spaces", "costs 1 000 000 EUR"), ("ratio", "ratio 0.5"),
    ("port", "port 8080 and 8443"), ("sku", "SKU-2026-0001 out of stock"), ("isbn", "isbn 978-3-16-148410-0"),
    ("random 16", "random 1234567812345678"), ("ssn-shaped", "ssn-shaped 000-12-3456"),
    ("ni-shaped", "NI-shaped GB 12 34 56 A"), ("cpp", "std::vector and Foo::bar"),
    ("loopback", "http://127.0.0.1:8501/data"), ("loopback6", "[::1]:80"), ("sha1", "sha1:0123456789abcdef"),
    ("short key", "sk-short"), ("aws short", "AKIA123"), ("amount commas", "refund of $12,345,678.90 approved"),
    ("amount dots", "Summe 1.234.567,89 EUR"), ("duration", "took 00:01:23.456 in total"),
    ("order dashes", "order 100-2345-6789 is late"), ("order slashes", "case 2026/11/00412 closed"),
    ("uuid", "trace 3f2a9c1e-77b4-4c1d-9e8f-0a1b2c3d4e5f"), ("git", "commit 3f2a9c1e77b4 merged"),
    ("coords", "at 51.5074, -0.1278 (London)"), ("counts", "12,345 users, 1,234,567 events"),
    ("invoice no", "invoice INV-2026-000123 paid"), ("percent", "99.95% uptime in 2026"),
    ("time range", "open 09:00-17:30 Mon-Fri"), ("page range", "see pages 120-135 and 140-152"),
    ("semver list", "tested on 3.9.18, 3.10.13, 3.11.7 and 3.12.1"), ("bytes", "wrote 104857600 bytes"),
    ("rate", "1500 requests/s at p99 230 ms"), ("year range", "from 2019 to 2026"),
    ("phone-length id", "ticket 20261101-0042 is open"), ("mac", "device 00:1a:2b:3c:4d:5e joined"),
    ("timestamp ms", "ts=1764585127123"), ("zip", "ZIP 94103-1234"), ("model", "RTX 4090 and A100 80GB"),
]


def planted(seed: int = 24) -> list[Plant]:
    """Every planted value with its sentence, then the disguised copies, then the look-alikes."""
    rng = random.Random(seed)
    makers = {"EMAIL": emails, "PHONE": phones, "CARD": cards, "IBAN": ibans, "IP": ips,
              "NATIONAL_ID": national_ids, "SECRET": secrets}
    out: list[Plant] = []
    for kind in KINDS:
        for i, (value, form) in enumerate(makers[kind](rng, SIZES[kind])):
            before, after = CONTEXTS[kind][i % len(CONTEXTS[kind])]
            out.append(Plant(kind, value, form, before, after))
    out.extend(disguised(rng, out))
    out.extend(Plant("NONE", text, form, "", "") for form, text in LOOK_ALIKES)
    return out


ZERO_WIDTH = ("\u200b", "\u200c", "\u200d", "\u2060", "\u00ad")
SPACES = ("\u00a0", "\u2009", "\u202f", "\u3000")


def _fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def disguised(rng: random.Random, plants: list[Plant]) -> list[Plant]:
    """Copies of some plain values written so that a naive pattern misses them."""
    out = []
    by_kind: dict[str, list[Plant]] = {}
    for p in plants:
        by_kind.setdefault(p.kind, []).append(p)
    for p in by_kind["CARD"][:12]:
        if " " in p.value:
            out.append(Plant("CARD", p.value.replace(" ", rng.choice(SPACES)), "disguise odd spaces", p.before, p.after))
        out.append(Plant("CARD", _fullwidth(p.value), "disguise fullwidth digits", p.before, p.after))
    for p in by_kind["EMAIL"][:12]:
        out.append(Plant("EMAIL", p.value.replace("@", "\uff20"), "disguise fullwidth @", p.before, p.after))
        cut = rng.randint(1, p.value.index("@") - 1) if p.value.index("@") > 1 else 1
        out.append(Plant("EMAIL", p.value[:cut] + rng.choice(ZERO_WIDTH) + p.value[cut:], "disguise zero-width",
                         p.before, p.after))
    for p in by_kind["PHONE"][:12]:
        if " " in p.value:
            out.append(Plant("PHONE", p.value.replace(" ", "\u00a0"), "disguise nbsp", p.before, p.after))
        digits = [i for i, c in enumerate(p.value) if c.isdigit()]
        cut = digits[len(digits) // 2]
        out.append(Plant("PHONE", p.value[:cut] + "\u200b" + p.value[cut:], "disguise zero-width", p.before, p.after))
    for p in by_kind["IP"][:12]:
        out.append(Plant("IP", _fullwidth(p.value), "disguise fullwidth", p.before, p.after))
    for p in by_kind["IBAN"][:6]:
        out.append(Plant("IBAN", p.value.replace(" ", "\u2009") if " " in p.value else _fullwidth(p.value),
                         "disguise thin space or fullwidth", p.before, p.after))
    for p in by_kind["SECRET"][:6]:
        cut = len(p.value) // 2
        out.append(Plant("SECRET", p.value[:cut] + "\u00ad" + p.value[cut:], "disguise soft hyphen",
                         p.before, p.after))
    return out


# --- logs and measurement --------------------------------------------------------------------------

def write_log(path: Path, plants: list[Plant]) -> Path:
    """One query per plant: even ones in the question, odd ones in the first chunk's text."""
    with open(path, "w", encoding="utf-8") as f:
        for i, p in enumerate(plants):
            text = p.before + p.value + p.after
            rec = {"query_id": f"p{i:04d}", "question": text if i % 2 == 0 else f"question {i}",
                   "retrieved": [{"id": f"c{i:04d}", "text": text if i % 2 else f"chunk {i}", "score": 0.9}]}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    return path


def stored_texts(db, plants: list[Plant]) -> list[str]:
    """What the database kept of each plant's sentence (read back as a user of the store would)."""
    questions = dict(db.execute("SELECT query_id, question FROM queries").fetchall())
    chunks = dict(db.execute("SELECT doc_id, text FROM documents").fetchall())
    return [questions[f"p{i:04d}"] if i % 2 == 0 else chunks[f"c{i:04d}"] for i in range(len(plants))]


def redacted_whole(p: Plant, stored: str) -> bool:
    """The value became exactly one placeholder of its kind and the rest of the sentence survived."""
    return re.fullmatch(re.escape(p.before) + rf"\[{p.kind}_\d+\]" + re.escape(p.after), stored) is not None


def measure(db, log: Path, plants: list[Plant]) -> dict:
    """Ingest ``log`` into ``db`` and score every plant; per kind (plain and disguised apart) the
    planted and found counts and recall, the look-alikes changed, and what was missed."""
    import labeler

    labeler.ingest_logs(db, log)
    stored = stored_texts(db, plants)
    plain: dict[str, dict] = {k: {"planted": 0, "found": 0} for k in KINDS}
    hidden: dict[str, dict] = {}
    missed: list[dict] = []
    changed: list[dict] = []
    for p, s in zip(plants, stored, strict=True):
        if p.kind == "NONE":
            if s != p.value:
                changed.append({"form": p.form, "stored": s})
            continue
        row = hidden.setdefault(p.kind, {"planted": 0, "found": 0}) if p.form.startswith("disguise") else plain[p.kind]
        row["planted"] += 1
        if redacted_whole(p, s):
            row["found"] += 1
        else:
            missed.append({"kind": p.kind, "form": p.form, "value": p.value, "stored": s})
    for row in (*plain.values(), *hidden.values()):
        row["recall"] = round(row["found"] / row["planted"], 3) if row["planted"] else None
    looks = sum(p.kind == "NONE" for p in plants)
    return {"kinds": plain, "disguised": hidden, "look_alikes": {"n": looks, "changed": len(changed)},
            "look_alikes_changed": changed, "missed": missed}
