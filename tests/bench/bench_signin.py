"""Benchmark: what a password sign-in costs at the scrypt cost in use, and the throttle under parallel guesses.

Times one scrypt hash at the old cost (N=2**14, r=8, p=1, the baseline measured in this run) and at
the current one (``labeler.accounts.SCRYPT_COST``, OWASP's N=2**17, r=8, p=1), one successful
``authenticate`` (a file database, the real path: claim, hash, clear), and then ``--threads``
sessions (threads, each with its own connection, as Streamlit runs one thread per session)
guessing one account's password at the same instant: how many attempts were checked (hashed),
how many were refused with the wait message, and the wall time. Prints one JSON document.

    python tests/bench/bench_signin.py [--repeat 5] [--threads 40]
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import statistics
import tempfile
import threading
import time
from pathlib import Path

import labeler
from labeler import accounts
from labeler.accounts import manage

OLD_COST = {"n": 2 ** 14, "r": 8, "p": 1}


def hash_ms(cost: dict[str, int], repeat: int) -> float:
    saved = manage.SCRYPT_COST
    manage.SCRYPT_COST = cost
    try:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            manage.hash_password(secrets.token_hex(8))
            times.append((time.perf_counter() - start) * 1000)
    finally:
        manage.SCRYPT_COST = saved
    return statistics.median(times)


def sign_in_ms(path: Path, repeat: int) -> float:
    db = labeler.connect(path)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        accounts.authenticate(db, "lena", "lena-password")
        times.append((time.perf_counter() - start) * 1000)
    db.close()
    return statistics.median(times)


def parallel_guesses(path: Path, n: int) -> dict[str, float | int]:
    barrier, results, lock = threading.Barrier(n + 1), [], threading.Lock()

    def guess() -> None:
        db = labeler.connect(path, migrate=False)
        barrier.wait()
        try:
            accounts.authenticate(db, "bob", "a guess")
            outcome = "signed in"
        except accounts.SignInError as e:
            outcome = "refused" if str(e).startswith("too many failed sign-ins") else "checked"
        finally:
            db.close()
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=guess) for _ in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    db = labeler.connect(path)
    counted = db.execute("SELECT failures FROM signin_failures WHERE name = 'bob'").fetchone()[0]
    db.close()
    return {"attempts": n, "checked": results.count("checked"), "refused": results.count("refused"),
            "signed_in": results.count("signed in"), "failures_counted": counted, "wall_s": round(wall, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=40)
    args = parser.parse_args()
    logging.getLogger("labeler").setLevel(logging.ERROR)  # the throttle logs each refused guess
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "signin.db"
        db = labeler.connect(path)
        accounts.add_user(db, "lena", "lead", password="lena-password")
        accounts.add_user(db, "bob", password="bob-password")
        db.close()
        old = hash_ms(OLD_COST, args.repeat)
        new = hash_ms(manage.SCRYPT_COST, args.repeat)
        sign_in = sign_in_ms(path, args.repeat)
        throttle = parallel_guesses(path, args.threads)
    print(json.dumps({
        "scrypt_cost": manage.SCRYPT_COST,
        "scrypt_ms_old_cost_n16384": round(old, 1),
        "scrypt_ms_current_cost": round(new, 1),
        "current_vs_old": round(new / old, 2),
        "sign_in_ms": round(sign_in, 1),
        "free_failures": accounts.FREE_FAILURES,
        "parallel_wrong_guesses": throttle,
        "parallel_wall_vs_one_sign_in": round(throttle["wall_s"] * 1000 / sign_in, 2),
    }, indent=2))


if __name__ == "__main__":
    main()
