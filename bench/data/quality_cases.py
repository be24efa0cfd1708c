"""Writes the quality gate's bundled case file (``producer/quality/data/cases.jsonl``)
from templates, deterministically.

``python -m bench.data.quality_cases`` rewrites it; the same seed gives the same file.
Answers are kept short: the gate compares variants, and small models are slow.

The first 344 rows (groups ``cs`` to ``reply``, drawn from ``SEED``) are what earlier
gates were measured on, so they never change: later groups are appended after them,
each drawn from its own seed, never from the first generator's sequence
(:mod:`bench.data.store_policies`).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from bench.data.store_policies import Row, case, customer_case, store_policies
from producer.quality.cases import BUNDLED_CASES, parse_cases

SEED = 15
POLICY_SEED = 16

FIRST = ["Maria", "James", "Aiko", "Omar", "Lena", "Carlos", "Priya", "Tom", "Sofia", "Ivan"]
LAST = ["Lopez", "Smith", "Tanaka", "Haddad", "Berg", "Silva", "Patel", "Moore", "Rossi", "Petrov"]
CITIES = ["Lyon", "Austin", "Osaka", "Porto", "Leeds", "Graz", "Denver", "Turin", "Malmo", "Cork"]
CARRIERS = ["UPS", "DHL", "FedEx", "USPS", "GLS"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
PRODUCTS = ["blender", "backpack", "desk lamp", "kettle", "headset", "jacket", "router", "mug"]


def customer_service(rng: random.Random) -> list[Row]:
    """A policy fact in the prompt, a customer question, the fact expected in the answer."""
    rows: list[Row] = []

    def add(context: str, question: str, expected: str | int) -> None:
        rows.append(customer_case(context, question, expected, tags=["customer-service"]))

    for _ in range(14):
        opens, closes = rng.randint(7, 10), rng.randint(4, 6)
        add(
            f"We are open from {opens} am to {closes} pm, Monday to Saturday.",
            rng.choice(["What time do you open?", "When do you open in the morning?"]),
            opens,
        )
    for _ in range(14):
        days = rng.choice([14, 30, 45, 60, 90])
        add(
            f"Items can be returned within {days} days of delivery for a full refund.",
            rng.choice(["How long do I have to return something?", "What is your return window?"]),
            days,
        )
    for _ in range(14):
        cost, free = rng.choice([3, 4, 5, 7, 9]), rng.choice([35, 50, 75, 100])
        add(
            f"Standard shipping costs ${cost}. Orders over ${free} ship free.",
            rng.choice(["How much is shipping?", "What does standard shipping cost?"]),
            cost,
        )
    for _ in range(14):
        order, carrier, day = rng.randint(10000, 99999), rng.choice(CARRIERS), rng.choice(DAYS)
        add(
            f"Order {order} shipped on {day} with {carrier}.",
            f"Which carrier is delivering my order {order}?",
            carrier,
        )
    for _ in range(12):
        order, day = rng.randint(10000, 99999), rng.choice(DAYS)
        add(
            f"Order {order} was shipped and will arrive on {day}.",
            rng.choice([f"When will order {order} arrive?", f"What day does {order} arrive?"]),
            day,
        )
    for _ in range(12):
        hours = rng.choice([1, 2, 12, 24, 48])
        add(
            f"Password reset links expire after {hours} hours.",
            "How long is my password reset link valid?",
            hours,
        )
    for _ in range(12):
        refund_days = rng.choice([3, 5, 7, 10])
        add(
            f"Refunds reach your card within {refund_days} business days.",
            rng.choice(["When will I get my refund?", "How long does a refund take?"]),
            refund_days,
        )
    for _ in range(12):
        city = rng.choice(CITIES)
        add(
            f"Our only physical store is in {city}.",
            "Where is your store?",
            city,
        )
    return rows


def arithmetic(rng: random.Random) -> list[Row]:
    """Exact numeric answers: plain sums and products, and short word problems."""
    rows: list[Row] = []
    for _ in range(40):
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        op = rng.choice(["+", "-", "*"])
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        rows.append(
            case(
                f"What is {a} {op} {b}? Reply with the number only.",
                "exact",
                str(value),
                max_tokens=8,
                tags=["arithmetic"],
            )
        )
    for _ in range(40):
        count, price = rng.randint(2, 9), rng.randint(2, 15)
        product = rng.choice(PRODUCTS)
        rows.append(
            case(
                f"A customer buys {count} of the {product} at ${price} each. "
                "What is the total in dollars? Reply with the number only.",
                "regex",
                rf"(?<![\d.]){count * price}(?![\d])",
                max_tokens=8,
                tags=["arithmetic", "word-problem"],
            )
        )
    return rows


INTENTS = {
    "A": ["Where is my parcel?", "My order has not arrived yet.", "Can you track order 5521?"],
    "B": ["I forgot my password.", "I cannot log in to my account.", "Reset my password please."],
    "C": ["I was charged twice.", "Why is there an extra fee on my bill?", "My invoice is wrong."],
    "D": ["Cancel my subscription.", "I want to stop my plan.", "Please close my account."],
}


def choice(rng: random.Random) -> list[Row]:
    """Intent classification as a multiple-choice question, answered with a letter."""
    rows: list[Row] = []
    options = "A) order status B) password reset C) billing D) cancellation"
    for letter, texts in INTENTS.items():
        for text in texts:
            for style in ("Answer with the letter only.", "Reply with one letter."):
                rows.append(
                    case(
                        f'Classify the request "{text}" as {options}. {style}',
                        "choice",
                        letter,
                        max_tokens=4,
                        tags=["intent"],
                    )
                )
    for _ in range(16):
        a, b = rng.randint(10, 60), rng.randint(10, 60)
        if a == b:
            b += 1
        bigger = "A" if a > b else "B"
        rows.append(
            case(
                f"Which costs more? A) a plan at ${a} a month B) a plan at ${b} a "
                "month. Answer with the letter only.",
                "choice",
                bigger,
                max_tokens=4,
                tags=["comparison"],
            )
        )
    return rows


def extraction_case(prompt: str, **properties: object) -> Row:
    """An extraction case: the answer is a JSON object with every one of ``properties``,
    each matching its schema."""
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return case(prompt, "json_schema", schema, max_tokens=32, tags=["extraction"])


def extraction(rng: random.Random) -> list[Row]:
    """Extraction to JSON, checked by a schema that pins the extracted values."""
    rows: list[Row] = []
    for _ in range(30):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        order = rng.randint(10000, 99999)
        message = rng.choice(
            [
                f"Hi, this is {first} {last}. My order {order} has not arrived.",
                f"Order {order} is damaged. Regards, {first} {last}",
                f"{first} {last} here, I need to change the address on order {order}.",
            ]
        )
        rows.append(
            extraction_case(
                f'Extract the customer name and order number from: "{message}" '
                'Reply with JSON only: {"name": string, "order": integer}.',
                name={"type": "string", "pattern": last},
                order={"const": order},
            )
        )
    for _ in range(20):
        product, count = rng.choice(PRODUCTS), rng.randint(1, 6)
        city = rng.choice(CITIES)
        rows.append(
            extraction_case(
                f'From "Please send {count} {product} to our office in {city}", '
                'reply with JSON only: {"product": string, "quantity": integer, "city": string}.',
                product={"type": "string"},
                quantity={"const": count},
                city={"const": city},
            )
        )
    return rows


def lookups(rng: random.Random) -> list[Row]:
    """Formatted facts (emails, codes, yes/no) checked by a pattern."""
    rows: list[Row] = []
    for _ in range(15):
        team = rng.choice(["help", "support", "billing", "care"])
        domain = rng.choice(["shop.example", "store.example", "acme.example"])
        rows.append(
            case(
                f"Our support address is {team}@{domain}. "
                "What email should I write to? Reply with the address only.",
                "regex",
                rf"\b{team}@{domain.replace('.', chr(92) + '.')}\b",
                max_tokens=12,
                tags=["customer-service", "lookup"],
            )
        )
    for _ in range(15):
        threshold = rng.choice([25, 40, 50, 60])
        total = rng.choice([threshold - 10, threshold + 15])
        answer = "yes" if total > threshold else "no"
        rows.append(
            case(
                f"Shipping is free for orders over ${threshold}. My order is ${total}. "
                "Is my shipping free? Answer yes or no.",
                "regex",
                rf"^\W*{answer}\b",
                max_tokens=4,
                tags=["customer-service", "reasoning"],
            )
        )
    return rows


REPLIES = [
    ("Thanks a lot for your help!", "You're welcome! Happy to help."),
    ("Hello there!", "Hello! How can I help you today?"),
    ("Good morning", "Good morning! How can I help you?"),
    ("Goodbye, have a nice day.", "Goodbye, have a nice day too!"),
    ("How do I reset my password?", "Click 'Forgot password' on the login page."),
    ("How can I track my order?", "Use the tracking link in your shipping confirmation email."),
    ("Can I change my delivery address?", "Yes, you can change it before the order ships."),
    ("How do I cancel my order?", "You can cancel the order from your account's order page."),
    ("Do you ship internationally?", "Yes, we ship to most countries worldwide."),
    ("Can I pay with PayPal?", "Yes, we accept PayPal at checkout."),
    ("My item arrived broken.", "Sorry about that! We will send a replacement or refund."),
    ("Is this jacket waterproof?", "Yes, the jacket is waterproof."),
    ("How do I contact support?", "You can contact support by email or phone."),
    ("Where can I find my invoice?", "Your invoice is in your account under Orders."),
    ("Can I get a discount?", "Sign up for our newsletter to get a discount code."),
    ("I was charged twice.", "Sorry! We will refund the duplicate charge."),
    ("Do you have gift cards?", "Yes, we sell gift cards on our website."),
    ("What sizes do you have?", "We have sizes from small to extra large."),
    ("Can I return a sale item?", "Yes, sale items can be returned within the return window."),
    ("How do I delete my account?", "You can delete your account in the account settings."),
]


def replies(rng: random.Random) -> list[Row]:
    """Short support replies compared with a reference answer by embedding similarity."""
    rows: list[Row] = []
    prefixes = ["", "Hi, ", "Quick question: "]
    for question, reference in REPLIES:
        for prefix in rng.sample(prefixes, 2):
            rows.append(
                case(
                    f"{prefix}{question} Reply in one short sentence.",
                    "similarity",
                    reference,
                    max_tokens=24,
                    tags=["customer-service", "reply"],
                    threshold=0.5,
                )
            )
    return rows


def generate(seed: int = SEED, policy_seed: int = POLICY_SEED) -> list[Row]:
    """Every case, with ids ``<group>-<nnn>``."""
    rng = random.Random(seed)
    groups = {
        "cs": customer_service(rng),
        "math": arithmetic(rng),
        "choice": choice(rng),
        "json": extraction(rng),
        "lookup": lookups(rng),
        "reply": replies(rng),
        # Appended: its own generator, so the rows above stay as they were measured.
        "policy": store_policies(random.Random(policy_seed)),
    }
    rows: list[Row] = []
    for group, items in groups.items():
        for index, item in enumerate(items, start=1):
            rows.append({"id": f"{group}-{index:03d}", **item})
    return rows


def main(path: Path = BUNDLED_CASES) -> int:
    lines = [json.dumps(row, ensure_ascii=False) for row in generate()]
    parse_cases(lines, source=str(path))  # the file must load before it is written
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} cases to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
