"""The ``policy`` group of the quality gate's cases: one store policy stated, a customer
asks about it, and the answer (a number or a word) appears once in the prompt.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


def case(
    prompt: str,
    rule: str,
    expected: object,
    *,
    max_tokens: int,
    tags: list[str],
    threshold: float | None = None,
) -> Row:
    """One case file row, its keys in the file's order (``threshold`` only where the
    rule takes one)."""
    row: Row = {"prompt": prompt, "rule": rule, "expected": expected}
    if threshold is not None:
        row["threshold"] = threshold
    return row | {"max_tokens": max_tokens, "tags": tags}


def customer_case(context: str, question: str, expected: int | str, *, tags: list[str]) -> Row:
    """A customer-service case: the store information, the customer's question, and the
    fact the short answer must give. A number must stand alone ("5" is not in "$50"); a
    word is a plain substring."""
    numeric = isinstance(expected, int)
    return case(
        f"Store information: {context}\nCustomer: {question}\n"
        "Answer the customer in one short sentence.",
        "regex" if numeric else "contains",
        rf"(?<![\d.]){expected}(?!\d)" if numeric else expected,
        max_tokens=24,
        tags=tags,
    )


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
            rows.append(customer_case(context, asked, value, tags=["customer-service", "policy"]))
    return rows
