"""Writes the bundled case file (``data/cases.jsonl``) from templates, deterministically.

``python -m producer.quality.generate_cases`` rewrites it; the same seed gives the same
file. Answers are kept short: the gate compares variants, and small models are slow.

The first 344 rows (groups ``cs`` to ``reply``, drawn from ``SEED``) are what earlier
gates were measured on, so they never change: later groups are appended after them,
each drawn from its own seed, never from the first generator's sequence.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from producer.quality.cases import BUNDLED_CASES, parse_cases

SEED = 15
POLICY_SEED = 16

FIRST = ["Maria", "James", "Aiko", "Omar", "Lena", "Carlos", "Priya", "Tom", "Sofia", "Ivan"]
LAST = ["Lopez", "Smith", "Tanaka", "Haddad", "Berg", "Silva", "Patel", "Moore", "Rossi", "Petrov"]
CITIES = ["Lyon", "Austin", "Osaka", "Porto", "Leeds", "Graz", "Denver", "Turin", "Malmo", "Cork"]
CARRIERS = ["UPS", "DHL", "FedEx", "USPS", "GLS"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
PRODUCTS = ["blender", "backpack", "desk lamp", "kettle", "headset", "jacket", "router", "mug"]

Row = dict[str, Any]


def customer_service(rng: random.Random) -> list[Row]:
    """A policy fact in the prompt, a customer question, the fact expected in the answer."""
    rows: list[Row] = []

    def add(context: str, question: str, expected: str | int) -> None:
        # A number must stand alone ("5" is not in "$50"); a word is a plain substring.
        numeric = isinstance(expected, int)
        rows.append(
            {
                "prompt": f"Store information: {context}\nCustomer: {question}\n"
                "Answer the customer in one short sentence.",
                "rule": "regex" if numeric else "contains",
                "expected": rf"(?<![\d.]){expected}(?!\d)" if numeric else expected,
                "max_tokens": 24,
                "tags": ["customer-service"],
            }
        )

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
            {
                "prompt": f"What is {a} {op} {b}? Reply with the number only.",
                "rule": "exact",
                "expected": str(value),
                "max_tokens": 8,
                "tags": ["arithmetic"],
            }
        )
    for _ in range(40):
        count, price = rng.randint(2, 9), rng.randint(2, 15)
        product = rng.choice(PRODUCTS)
        rows.append(
            {
                "prompt": f"A customer buys {count} of the {product} at ${price} each. "
                "What is the total in dollars? Reply with the number only.",
                "rule": "regex",
                "expected": rf"(?<![\d.]){count * price}(?![\d])",
                "max_tokens": 8,
                "tags": ["arithmetic", "word-problem"],
            }
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
                    {
                        "prompt": f'Classify the request "{text}" as {options}. {style}',
                        "rule": "choice",
                        "expected": letter,
                        "max_tokens": 4,
                        "tags": ["intent"],
                    }
                )
    for _ in range(16):
        a, b = rng.randint(10, 60), rng.randint(10, 60)
        if a == b:
            b += 1
        bigger = "A" if a > b else "B"
        rows.append(
            {
                "prompt": f"Which costs more? A) a plan at ${a} a month B) a plan at ${b} a "
                "month. Answer with the letter only.",
                "rule": "choice",
                "expected": bigger,
                "max_tokens": 4,
                "tags": ["comparison"],
            }
        )
    return rows


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
            {
                "prompt": f'Extract the customer name and order number from: "{message}" '
                'Reply with JSON only: {"name": string, "order": integer}.',
                "rule": "json_schema",
                "expected": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "pattern": last},
                        "order": {"const": order},
                    },
                    "required": ["name", "order"],
                },
                "max_tokens": 32,
                "tags": ["extraction"],
            }
        )
    for _ in range(20):
        product, count = rng.choice(PRODUCTS), rng.randint(1, 6)
        city = rng.choice(CITIES)
        rows.append(
            {
                "prompt": f'From "Please send {count} {product} to our office in {city}", '
                'reply with JSON only: {"product": string, "quantity": integer, "city": string}.',
                "rule": "json_schema",
                "expected": {
                    "type": "object",
                    "properties": {
                        "product": {"type": "string"},
                        "quantity": {"const": count},
                        "city": {"const": city},
                    },
                    "required": ["product", "quantity", "city"],
                },
                "max_tokens": 32,
                "tags": ["extraction"],
            }
        )
    return rows


def lookups(rng: random.Random) -> list[Row]:
    """Formatted facts (emails, codes, yes/no) checked by a pattern."""
    rows: list[Row] = []
    for _ in range(15):
        team = rng.choice(["help", "support", "billing", "care"])
        domain = rng.choice(["shop.example", "store.example", "acme.example"])
        rows.append(
            {
                "prompt": f"Our support address is {team}@{domain}. "
                "What email should I write to? Reply with the address only.",
                "rule": "regex",
                "expected": rf"\b{team}@{domain.replace('.', chr(92) + '.')}\b",
                "max_tokens": 12,
                "tags": ["customer-service", "lookup"],
            }
        )
    for _ in range(15):
        threshold = rng.choice([25, 40, 50, 60])
        total = rng.choice([threshold - 10, threshold + 15])
        answer = "yes" if total > threshold else "no"
        rows.append(
            {
                "prompt": f"Shipping is free for orders over ${threshold}. My order is ${total}. "
                "Is my shipping free? Answer yes or no.",
                "rule": "regex",
                "expected": rf"^\W*{answer}\b",
                "max_tokens": 4,
                "tags": ["customer-service", "reasoning"],
            }
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
                {
                    "prompt": f"{prefix}{question} Reply in one short sentence.",
                    "rule": "similarity",
                    "expected": reference,
                    "threshold": 0.5,
                    "max_tokens": 24,
                    "tags": ["customer-service", "reply"],
                }
            )
    return rows


@dataclass(frozen=True)
class Policy:
    """A store policy: ways to state it, ways a customer asks, and the values it takes.

    ``{v}`` in a fact is the value the answer must give; ``{item}`` (in a fact or a
    question) is one of ``items``, a detail that varies the case but is not the answer.
    """

    facts: tuple[str, ...]
    questions: tuple[str, ...]
    values: tuple[int | str, ...]
    count: int
    items: tuple[str, ...] = ("",)


ITEMS = (
    "blender",
    "backpack",
    "desk lamp",
    "kettle",
    "headset",
    "rain jacket",
    "router",
    "coffee grinder",
    "tent",
    "vacuum cleaner",
)
MONTHS = ("January", "March", "April", "June", "August", "September", "October", "November")
PICKUP_CITIES = ("Bristol", "Ghent", "Bergen", "Zurich", "Boise", "Tacoma", "Seville", "Krakow")
OPENERS = ("", "", "Hi! ", "Hello. ", "Good morning! ", "Hi there. ")
# Sentences with no figure and no answer word in them: they vary the store information
# without planting a second number for the model to confuse with the fact.
ASIDES = (
    "",
    "",
    "We ship to the United States and Europe.",
    "Prices include sales tax.",
    "Gift receipts are available at checkout.",
    "Our team answers in English and Spanish.",
    "Members get early access to new products.",
)

POLICIES: tuple[Policy, ...] = (
    Policy(
        facts=(
            "Every {item} comes with a {v}-month warranty.",
            "The {item} is covered by our warranty for {v} months from delivery.",
            "Our warranty on the {item} lasts {v} months.",
        ),
        questions=(
            "How long is the warranty on the {item}?",
            "How many months of warranty does the {item} have?",
            "My {item} stopped working. How long is it under warranty?",
        ),
        values=(6, 12, 18, 24, 36),
        items=ITEMS,
        count=15,
    ),
    Policy(
        facts=(
            "Our phone support is open from {item} am to {v} pm on weekdays.",
            "You can call us Monday to Friday from {item} am until {v} pm.",
        ),
        questions=(
            "Until what time can I call your support line?",
            "When does your phone support close?",
            "What time do your phone lines close on weekdays?",
        ),
        values=(5, 6, 7, 8, 9),
        items=("7", "8", "9", "10"),
        count=13,
    ),
    Policy(
        facts=(
            "Express shipping costs ${v} and {item}.",
            "For ${v}, express shipping {item}.",
        ),
        questions=(
            "How much does express shipping cost?",
            "What's the price of express delivery?",
            "I need my order fast. What does express shipping cost?",
        ),
        values=(12, 15, 18, 20, 25, 29),
        items=("arrives the next business day", "arrives in two business days", "is tracked"),
        count=13,
    ),
    Policy(
        facts=(
            "Standard delivery to {item} takes {v} business days.",
            "Orders to {item} usually arrive {v} business days after they ship.",
        ),
        questions=(
            "How many days does delivery to {item} take?",
            "I live in {item}. How long will my delivery take?",
            "How long does shipping to {item} take?",
        ),
        values=(2, 3, 4, 5, 6, 7, 8),
        items=("Chicago", "Toronto", "Madrid", "Dublin", "Oslo", "Phoenix", "Vienna"),
        count=13,
    ),
    Policy(
        facts=(
            "Customers can buy at most {v} of the {item} per order.",
            "There is a limit of {v} units of the {item} per order.",
        ),
        questions=(
            "How many of the {item} can I buy in one order?",
            "Is there a limit on how many of the {item} I can order?",
            "What's the maximum number of the {item} per order?",
        ),
        values=(2, 3, 4, 5, 6, 8, 10),
        items=ITEMS,
        count=13,
    ),
    Policy(
        facts=(
            "Loyalty members earn {v} points for every {item} they spend.",
            "Every {item} spent earns a member {v} loyalty points.",
        ),
        questions=(
            "How many points do I earn per {item}?",
            "How many loyalty points do I get for each {item} I spend?",
            "What is the points rate for each {item} spent?",
        ),
        values=(2, 3, 4, 5, 6, 8, 10),
        items=("dollar", "euro", "pound"),
        count=13,
    ),
    Policy(
        facts=(
            "This customer's account holds {v} loyalty points.",
            "The customer has {v} points in their loyalty account.",
        ),
        questions=(
            "How many points do I have?",
            "What's my loyalty points balance?",
            "Can you check how many reward points I have?",
        ),
        values=tuple(range(120, 990, 10)),
        count=13,
    ),
    Policy(
        facts=(
            "Gift wrapping costs ${v} per item.",
            "We gift-wrap any item for ${v}.",
        ),
        questions=(
            "How much is gift wrapping?",
            "Can you gift-wrap my order, and what does it cost?",
            "What do you charge to wrap a gift?",
        ),
        values=(2, 3, 4, 5, 6, 7, 8, 9),
        count=13,
    ),
    Policy(
        facts=(
            "Returns of {item} carry a {v}% restocking fee.",
            "We charge a {v}% restocking fee on returned {item}.",
        ),
        questions=(
            "Is there a restocking fee for {item}?",
            "How much is the restocking fee on {item}?",
            "What percentage do you keep if I return {item}?",
        ),
        values=(10, 15, 20, 25, 30),
        items=(
            "opened electronics",
            "large furniture",
            "special-order items",
            "opened appliances",
            "mattresses",
        ),
        count=13,
    ),
    Policy(
        facts=(
            "Orders can be cancelled within {v} minutes of being placed.",
            "You have {v} minutes after checkout to cancel an order online.",
        ),
        questions=(
            "How long do I have to cancel my order?",
            "I just placed an order. How long can I still cancel it?",
            "What's the time limit for cancelling an order?",
        ),
        values=(15, 20, 30, 45, 60, 90, 120),
        count=13,
    ),
    Policy(
        facts=(
            "Orders over ${v} ship free.",
            "Shipping is free on any order above ${v}; smaller orders pay a flat fee.",
        ),
        questions=(
            "How much do I need to spend to get free shipping?",
            "What's the minimum order for free delivery?",
            "When is shipping free?",
        ),
        values=(25, 35, 39, 49, 59, 65, 80, 99),
        count=13,
    ),
    Policy(
        facts=(
            "Our team answers every email within {v} hours.",
            "Expect a reply to your email within {v} hours.",
        ),
        questions=(
            "How soon will you answer my email?",
            "I sent you an email. When can I expect a reply?",
            "How long does it take to get an email response?",
        ),
        values=(4, 6, 8, 12, 24, 48, 72),
        count=13,
    ),
    Policy(
        facts=(
            "Customers must be {v} or older to open an account.",
            "You need to be at least {v} years old to create an account.",
        ),
        questions=(
            "How old do I need to be to open an account?",
            "Is there a minimum age to sign up?",
            "What's the age limit for creating an account?",
        ),
        values=(13, 16, 18, 21),
        count=13,
    ),
    Policy(
        facts=(
            "Gift cards are valid for {v} years from the date of purchase.",
            "Our gift cards expire {v} years after they are bought.",
        ),
        questions=(
            "When do gift cards expire?",
            "How long can I use a gift card?",
            "Is there an expiry date on your gift cards?",
        ),
        values=(2, 3, 4, 5),
        count=13,
    ),
    Policy(
        facts=(
            "Loyalty points expire {v} months after they are earned.",
            "Unused points expire {v} months after you earn them.",
        ),
        questions=(
            "Do my loyalty points expire?",
            "How long do I have to use my points?",
            "When will my reward points run out?",
        ),
        values=(6, 9, 12, 18, 24, 36),
        count=13,
    ),
    Policy(
        facts=(
            "Damaged items must be reported within {v} days of delivery.",
            "Report any damage within {v} days of delivery to get a replacement.",
        ),
        questions=(
            "My {item} arrived damaged. How long do I have to report it?",
            "How many days do I have to tell you about a damaged {item}?",
            "What's the deadline for reporting a broken {item}?",
        ),
        values=(2, 3, 5, 7, 10, 14),
        items=ITEMS,
        count=13,
    ),
    Policy(
        facts=(
            "At checkout you can split any order into {v} interest-free payments.",
            "Orders can be paid in {v} interest-free instalments.",
        ),
        questions=(
            "Can I pay in instalments? How many?",
            "How many payments can I split my order into?",
            "Do you offer payment plans?",
        ),
        values=(3, 4, 6, 10, 12),
        count=13,
    ),
    Policy(
        facts=(
            "We ship {item} with {v}.",
            "All {item} are delivered by {v}.",
        ),
        questions=(
            "Which carrier do you use for {item}?",
            "Who delivers {item}?",
            "What courier handles {item}?",
        ),
        values=("DHL", "FedEx", "DPD", "GLS", "Royal Mail", "Canada Post", "Evri"),
        items=("international orders", "orders to Canada", "heavy parcels", "express orders"),
        count=13,
    ),
    Policy(
        facts=(
            "Besides credit cards, we accept {v}.",
            "At checkout you can pay by card or with {v}.",
        ),
        questions=(
            "Can I pay without a credit card?",
            "What other payment options do you have?",
            "Do you take anything besides cards?",
        ),
        values=("PayPal", "Klarna", "Apple Pay", "Google Pay", "bank transfer"),
        count=13,
    ),
    Policy(
        facts=(
            "Orders can be picked up at our warehouse in {v}.",
            "Our click-and-collect point is in {v}.",
        ),
        questions=(
            "Where can I pick up my order?",
            "Is there somewhere I can collect my order in person?",
            "Which city is your pickup point in?",
        ),
        values=PICKUP_CITIES,
        count=13,
    ),
    Policy(
        facts=(
            "Our yearly clearance sale starts in {v}.",
            "The big annual sale begins every {v}.",
        ),
        questions=(
            "When is your next big sale?",
            "What month does your annual sale start?",
            "When do you have your clearance sale?",
        ),
        values=MONTHS,
        count=13,
    ),
    Policy(
        facts=(
            "Phone support is closed every {v}; chat is open all week.",
            "Our phone lines are closed on {v}s.",
        ),
        questions=(
            "Which day is your phone support closed?",
            "Is there a day I can't reach you by phone?",
            "On what day are your phone lines closed?",
        ),
        values=("Sunday", "Monday", "Wednesday", "Saturday"),
        count=13,
    ),
    Policy(
        facts=(
            "The {item} is sold only in {v}.",
            "We carry the {item} in one colour: {v}.",
        ),
        questions=(
            "What colours does the {item} come in?",
            "Can I get the {item} in a different colour?",
            "Which colour is the {item} available in?",
        ),
        values=("black", "navy", "olive", "charcoal", "burgundy", "white"),
        items=ITEMS,
        count=13,
    ),
)


def _occurrences(expected: str | int, text: str) -> int:
    if isinstance(expected, int):
        return len(re.findall(rf"(?<![\d.]){expected}(?!\d)", text))
    return text.lower().count(expected.lower())


def store_policies(rng: random.Random) -> list[Row]:
    """More customer-service cases: one store policy stated, a customer asks about it.

    Each policy's cases are drawn without replacement from its (value, item, wording,
    question) combinations, so no two state the same fact and ask the same way. The
    answer (a number that must stand alone, or a word) appears once in the prompt.
    """
    rows: list[Row] = []
    for policy in POLICIES:
        combos = [
            combo
            for combo in itertools.product(
                policy.values, policy.items, policy.facts, policy.questions
            )
            if str(combo[0]) != combo[1]  # an opening hour equal to the closing one
        ]
        for value, item, fact, question in rng.sample(combos, policy.count):
            aside, opener = rng.choice(ASIDES), rng.choice(OPENERS)
            context = " ".join(part for part in (fact.format(v=value, item=item), aside) if part)
            asked = opener + question.format(item=item)
            if _occurrences(value, f"{context} {asked}") != 1:
                raise ValueError(f"the answer {value!r} is not once in: {context} {asked}")
            numeric = isinstance(value, int)
            rows.append(
                {
                    "prompt": f"Store information: {context}\nCustomer: {asked}\n"
                    "Answer the customer in one short sentence.",
                    "rule": "regex" if numeric else "contains",
                    "expected": rf"(?<![\d.]){value}(?!\d)" if numeric else value,
                    "max_tokens": 24,
                    "tags": ["customer-service", "policy"],
                }
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
