"""Put a realistic mix of jobs into a store for the example worker (examples/shop.py).

    python examples/enqueue_demo.py --store sqlite:///shop.db -n 100
    headgate worker --app examples.shop:make_worker --store sqlite:///shop.db

It sets the ``smtp`` rate class (5 mails per second, burst 5) and enqueues, per round,
a report (some in the old schema version 1), a few emails (one to a bouncing address),
payments (some declined, some for cancelled orders; the gateway fails a quarter of the
time) and a thumbnail, spread over three tenants (partition keys) so fair admission
has something to do.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections import Counter

if __package__ in (None, ""):  # run as a script from anywhere: make `headgate` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import headgate
from headgate import Envelope

TENANTS = ["acme", "globex", "initech"]


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def demo_envelopes(rounds: int, rng: random.Random) -> list[Envelope]:
    envs: list[Envelope] = []
    for i in range(rounds):
        tenant = TENANTS[i % len(TENANTS)]
        if rng.random() < 0.3:  # an old producer still sends version 1
            envs.append(Envelope(kind="report.generate", queue="reports", partition_key=tenant,
                                 schema_version=1,
                                 payload=_json({"account": tenant, "month": "2026-10"})))
        else:
            envs.append(Envelope(kind="report.generate", queue="reports", partition_key=tenant,
                                 schema_version=2, payload=_json({
                                     "account_id": tenant, "rows": rng.choice([500, 2_000]),
                                     "period": {"from": "2026-11-01", "to": "2026-11-30"}})))
        for n in range(3):
            to = "nobody@bounce.invalid" if n == 2 and i % 4 == 0 else \
                f"customer{i}-{n}@{tenant}.example"
            envs.append(Envelope(kind="email.send", queue="email", partition_key=tenant,
                                 rate_class="smtp", payload=_json({
                                     "to": to, "subject": f"Your order #{1000 + i}"})))
        card = "4000000000000002" if i % 7 == 0 else "4242424242424242"
        envs.append(Envelope(kind="payment.capture", queue="payments", partition_key=tenant,
                             max_attempts=5, payload=_json({
                                 "order_id": 1000 + i, "amount_cents": rng.randint(500, 50_000),
                                 "card": card, "order_cancelled": i % 11 == 5})))
        envs.append(Envelope(kind="thumbnail.render", partition_key=tenant,
                             payload=_json({"sku": f"SKU-{i:05d}", "pixels": 300_000})))
    return envs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=None,
                    help="store URL; default from HG_STORE/HG_SQLITE/HG_PG")
    ap.add_argument("-n", "--rounds", type=int, default=20,
                    help="rounds of (report, 3 emails, payment, thumbnail)")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    from headgate.services.config import Settings

    settings = Settings.from_env()
    if args.store:
        settings = settings.with_store_url(args.store)
    store = headgate.open_store(settings.store_url())
    try:
        store.upsert_rate_class("smtp", limit=5, window_ms=1_000, burst=5)
        envs = demo_envelopes(args.rounds, random.Random(args.seed))
        headgate.Client(store).enqueue_many(envs)
    finally:
        store.close()
    kinds = Counter(e.kind for e in envs)
    print(f"enqueued {len(envs)} jobs: " + ", ".join(f"{n} {k}" for k, n in kinds.items()))
    print("run them with: headgate worker --app examples.shop:make_worker"
          + (f" --store {args.store}" if args.store else ""))


if __name__ == "__main__":
    main()
