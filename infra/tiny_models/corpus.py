"""Generated text for the tiny models: plain pretraining documents and chats.

Everything is templated from small word lists and driven by a `random.Random`, so the same
seed always yields the same text. The pretraining documents deliberately never contain the
ChatML markers: the base model must not learn where a turn ends, exactly like a real base model
whose end-of-turn token was never trained. The chats reuse the same facts, so SFT only has to
teach the *format* (answer, then stop), which a few hundred steps can do.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Style = Literal["plain", "markdown"]
Message = dict[str, str]

CATEGORIES: dict[str, list[str]] = {
    "animals": [
        "cat",
        "dog",
        "fox",
        "cow",
        "pig",
        "owl",
        "bee",
        "horse",
        "sheep",
        "duck",
        "frog",
        "bear",
        "wolf",
        "deer",
        "goat",
        "mouse",
        "rabbit",
        "lion",
    ],
    "fruits": [
        "apple",
        "pear",
        "plum",
        "banana",
        "orange",
        "grape",
        "lemon",
        "cherry",
        "peach",
        "melon",
    ],
    "colors": ["red", "blue", "green", "yellow", "white", "black", "brown", "pink", "gray"],
    "tools": ["hammer", "saw", "spoon", "knife", "brush", "rope", "ladder", "shovel"],
    "birds": ["owl", "duck", "crow", "robin", "swan", "eagle", "hen", "parrot"],
    "vegetables": ["carrot", "potato", "onion", "pea", "bean", "cabbage", "leek", "tomato"],
}

# Facts are (lead, key) pairs: plain style writes "lead key.", markdown style bolds the key.
TOPICS: dict[str, list[tuple[str, str]]] = {
    "the sun": [
        ("The sun is", "a star"),
        ("The sun is", "hot and bright"),
        ("The sun gives us", "light and heat"),
        ("The sun rises in", "the east"),
    ],
    "the moon": [
        ("The moon goes around", "the earth"),
        ("The moon is", "made of rock"),
        ("The moon shines at", "night"),
        ("The moon has", "no air"),
    ],
    "the sea": [
        ("The sea is", "salty"),
        ("The sea is", "very deep"),
        ("Many fish live in", "the sea"),
        ("The sea covers", "most of the earth"),
    ],
    "rain": [
        ("Rain is", "water from clouds"),
        ("Rain helps", "plants grow"),
        ("Rain falls when", "clouds are full"),
        ("After rain we may see", "a rainbow"),
    ],
    "trees": [
        ("Trees are", "tall plants"),
        ("Trees give us", "wood and shade"),
        ("Trees have", "roots and leaves"),
        ("Birds build nests in", "trees"),
    ],
    "bees": [
        ("Bees make", "honey"),
        ("Bees visit", "flowers"),
        ("Bees live in", "a hive"),
        ("Bees can", "fly and sting"),
    ],
    "snow": [
        ("Snow is", "cold and white"),
        ("Snow falls in", "winter"),
        ("Snow is made of", "tiny bits of ice"),
        ("Children like to play in", "the snow"),
    ],
    "fire": [
        ("Fire is", "hot"),
        ("Fire needs", "air and wood"),
        ("Fire gives", "light and heat"),
        ("Fire can be", "dangerous"),
    ],
    "water": [
        ("Water is", "wet"),
        ("We drink", "water every day"),
        ("Water freezes into", "ice"),
        ("Water boils when", "it is very hot"),
    ],
    "bread": [
        ("Bread is made from", "flour and water"),
        ("Bread is baked in", "an oven"),
        ("People eat bread", "every day"),
        ("Toast is", "warm bread"),
    ],
    "winter": [
        ("Winter is", "the coldest season"),
        ("In winter the days are", "short"),
        ("In winter people wear", "warm coats"),
        ("Winter comes after", "autumn"),
    ],
    "cats": [
        ("Cats are", "small animals"),
        ("Cats like to", "sleep a lot"),
        ("Cats can", "see at night"),
        ("A baby cat is called", "a kitten"),
    ],
    "dogs": [
        ("Dogs are", "loyal animals"),
        ("Dogs like to", "run and play"),
        ("Dogs can", "smell very well"),
        ("A baby dog is called", "a puppy"),
    ],
    "the earth": [
        ("The earth is", "our home"),
        ("The earth goes around", "the sun"),
        ("The earth has", "land and water"),
        ("The earth is", "round"),
    ],
}

COLOR_OF: dict[str, str] = {
    "the sky": "blue",
    "grass": "green",
    "snow": "white",
    "the sun": "yellow",
    "coal": "black",
    "a banana": "yellow",
    "milk": "white",
    "a cherry": "red",
    "the sea": "blue",
    "a crow": "black",
    "chocolate": "brown",
    "a leaf": "green",
    "a tomato": "red",
}

OPPOSITES: dict[str, str] = {
    "hot": "cold",
    "big": "small",
    "up": "down",
    "fast": "slow",
    "day": "night",
    "happy": "sad",
    "old": "new",
    "open": "closed",
    "light": "dark",
    "wet": "dry",
    "left": "right",
    "full": "empty",
    "hard": "soft",
    "early": "late",
}

HOW_TO: dict[str, list[str]] = {
    "make tea": ["Boil some water", "Put the tea in a cup", "Pour the water on the tea"],
    "plant a tree": ["Dig a hole", "Put the tree in the hole", "Fill the hole and water it"],
    "wash my hands": ["Wet your hands", "Rub them with soap", "Rinse and dry them"],
    "brush my teeth": ["Put paste on the brush", "Brush every tooth", "Rinse your mouth"],
    "make toast": ["Put bread in the toaster", "Wait until it is brown", "Add some butter"],
    "send a letter": ["Write the letter", "Put it in an envelope", "Take it to the post box"],
    "bake bread": ["Mix flour and water", "Let the dough rise", "Bake it in the oven"],
    "cook rice": ["Wash the rice", "Boil it in water", "Let it rest for a while"],
}

NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five"]
ADJECTIVES = ["small", "big", "happy", "sleepy", "brave", "quick", "old", "young", "kind"]
PLACES = ["forest", "field", "barn", "garden", "house", "river", "hill", "village"]
ACTIONS = ["played", "ran", "sang", "ate lunch", "looked at the sky", "went home"]
GREETINGS = ["Hello!", "Hi!", "Good morning!", "Hello there!", "Hey!"]


def _join(items: list[str]) -> str:
    """'a', 'a and b', 'a, b and c' — the list style used in both corpora."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _arith(rng: random.Random) -> tuple[int, str, int, int]:
    op = rng.choice(["plus", "plus", "minus", "times"])
    if op == "times":
        a, b = rng.randint(0, 5), rng.randint(0, 5)
        return a, op, b, a * b
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    if op == "minus":
        a, b = max(a, b), min(a, b)
        return a, op, b, a - b
    return a, op, b, a + b


# --- pretraining documents -------------------------------------------------------------------


def _doc_facts(rng: random.Random) -> str:
    topic = rng.choice(list(TOPICS))
    facts = rng.sample(TOPICS[topic], k=rng.randint(2, 4))
    return " ".join(f"{lead} {key}." for lead, key in facts)


def _doc_story(rng: random.Random) -> str:
    a, b = rng.sample(CATEGORIES["animals"], k=2)
    adj, place = rng.choice(ADJECTIVES), rng.choice(PLACES)
    acts = rng.sample(ACTIONS, k=2)
    return (
        f"Once upon a time, there was a {adj} {a}. The {a} lived in a {place}. "
        f"One day, the {a} met a {b}. They {acts[0]} and {acts[1]}. The end."
    )


def _doc_arithmetic(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(2, 4)):
        a, op, b, c = _arith(rng)
        out.append(f"{a} {op} {b} is {c}.")
    return " ".join(out)


def _doc_list(rng: random.Random) -> str:
    cat = rng.choice(list(CATEGORIES))
    n = rng.randint(2, 4)
    items = rng.sample(CATEGORIES[cat], k=n)
    return rng.choice(
        [f"Here are {NUMBER_WORDS[n]} {cat}: {_join(items)}.", f"Some {cat} are {_join(items)}."]
    )


def _doc_colors(rng: random.Random) -> str:
    things = rng.sample(list(COLOR_OF), k=rng.randint(2, 4))
    return " ".join(f"{_cap(t)} is {COLOR_OF[t]}." for t in things)


def _doc_opposites(rng: random.Random) -> str:
    words = rng.sample(list(OPPOSITES), k=rng.randint(2, 3))
    return " ".join(f"The opposite of {w} is {OPPOSITES[w]}." for w in words)


def _doc_how_to(rng: random.Random) -> str:
    task = rng.choice(list(HOW_TO))
    s = [x[0].lower() + x[1:] for x in HOW_TO[task]]
    return f"To {task.replace('my ', 'your ')}, first {s[0]}. Then {s[1]}. Finally, {s[2]}."


def _doc_counting(rng: random.Random) -> str:
    n = rng.randint(3, 9)
    return ", ".join(str(i) for i in range(1, n + 1)) + "."


def _doc_markdown_note(rng: random.Random) -> str:
    # Real base models have seen plenty of markdown; a little here gives the markdown SFT a
    # head start without the base corpus ever looking like a chat.
    if rng.random() < 0.5:
        topic = rng.choice(list(TOPICS))
        facts = rng.sample(TOPICS[topic], k=3)
        return f"## {_cap(topic)}\n\n" + "\n".join(f"- {lead} **{key}**." for lead, key in facts)
    task = rng.choice(list(HOW_TO))
    steps = "\n".join(f"{i}. {s}." for i, s in enumerate(HOW_TO[task], 1))
    return f"## How to {task.replace('my ', 'your ')}\n\n{steps}"


def _doc_quiz(rng: random.Random) -> str:
    # Question/answer text as found on web pages teaches the base model to copy the operands
    # and subject of a question, so SFT only has to add the turn format and the stop token.
    return "\n".join(f"Q: {qa.question}\nA: {qa.plain}" for qa in qa_pairs(rng, rng.randint(2, 3)))


_DOC_KINDS: list[tuple[Callable[[random.Random], str], int]] = [
    (_doc_facts, 4),
    (_doc_story, 3),
    (_doc_arithmetic, 3),
    (_doc_list, 2),
    (_doc_colors, 2),
    (_doc_opposites, 2),
    (_doc_how_to, 2),
    (_doc_counting, 1),
    (_doc_markdown_note, 2),
    (_doc_quiz, 3),
]


def pretrain_documents(rng: random.Random, n: int) -> list[str]:
    """`n` short plain-text documents (no chat markers, no special tokens)."""
    makers = [f for f, _ in _DOC_KINDS]
    weights = [w for _, w in _DOC_KINDS]
    return [rng.choices(makers, weights)[0](rng) for _ in range(n)]


# --- chats -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QA:
    """One question with both answer styles, so the two SFT variants see the same prompts."""

    question: str
    plain: str
    markdown: str

    def answer(self, style: Style) -> str:
        return self.plain if style == "plain" else self.markdown


def _qa_arithmetic(rng: random.Random) -> QA:
    a, op, b, c = _arith(rng)
    q = rng.choice(
        [f"What is {a} {op} {b}?", f"What's {a} {op} {b}?", f"How much is {a} {op} {b}?"]
    )
    return QA(q, f"{a} {op} {b} is {c}.", f"## Answer\n\n**{a} {op} {b}** is **{c}**.")


def _qa_list(rng: random.Random) -> QA:
    cat = rng.choice(list(CATEGORIES))
    n = rng.randint(2, 4)
    items = rng.sample(CATEGORIES[cat], k=n)
    q = rng.choice(
        [
            f"Name {NUMBER_WORDS[n]} {cat}.",
            f"List {NUMBER_WORDS[n]} {cat}.",
            f"Give me {NUMBER_WORDS[n]} {cat}.",
        ]
    )
    md = f"## {_cap(NUMBER_WORDS[n])} {cat}\n\n" + "\n".join(f"- **{_cap(i)}**" for i in items)
    return QA(q, f"Here are {NUMBER_WORDS[n]} {cat}: {_join(items)}.", md)


def _qa_topic(rng: random.Random) -> QA:
    topic = rng.choice(list(TOPICS))
    picked = sorted(rng.sample(range(4), k=2))  # keep the facts in their canonical order
    facts = [TOPICS[topic][i] for i in picked]
    q = rng.choice([f"Tell me about {topic}.", f"What do you know about {topic}?"])
    plain = " ".join(f"{lead} {key}." for lead, key in facts)
    md = f"## {_cap(topic)}\n\n" + "\n".join(f"- {lead} **{key}**." for lead, key in facts)
    return QA(q, plain, md)


def _qa_color(rng: random.Random) -> QA:
    thing = rng.choice(list(COLOR_OF))
    color = COLOR_OF[thing]
    return QA(
        f"What color is {thing}?",
        f"{_cap(thing)} is {color}.",
        f"## Color\n\n{_cap(thing)} is **{color}**.",
    )


def _qa_opposite(rng: random.Random) -> QA:
    w = rng.choice(list(OPPOSITES))
    o = OPPOSITES[w]
    return QA(
        f"What is the opposite of {w}?",
        f"The opposite of {w} is {o}.",
        f"## Opposite\n\nThe opposite of **{w}** is **{o}**.",
    )


def _qa_how_to(rng: random.Random) -> QA:
    task = rng.choice(list(HOW_TO))
    s = HOW_TO[task]
    plain = f"First, {s[0].lower()}. Then, {s[1].lower()}. Finally, {s[2].lower()}."
    md = f"## How to {task.replace('my ', 'your ')}\n\n" + "\n".join(
        f"{i}. **{x}**." for i, x in enumerate(s, 1)
    )
    return QA(f"How do I {task}?", plain, md)


def _qa_count(rng: random.Random) -> QA:
    n = rng.randint(3, 9)
    nums = ", ".join(str(i) for i in range(1, n + 1))
    return QA(f"Count to {n}.", f"{nums}.", f"## Counting to {n}\n\n**{nums}**")


def _qa_greeting(rng: random.Random) -> QA:
    return QA(
        rng.choice(GREETINGS),
        "Hello! How can I help you today?",
        "## Hello!\n\nHow can I **help** you today?",
    )


_QA_KINDS: list[tuple[Callable[[random.Random], QA], int]] = [
    (_qa_arithmetic, 4),
    (_qa_list, 3),
    (_qa_topic, 4),
    (_qa_color, 2),
    (_qa_opposite, 2),
    (_qa_how_to, 2),
    (_qa_count, 1),
    (_qa_greeting, 1),
]

SYSTEM_PROMPT = "You are a helpful assistant."


def qa_pairs(rng: random.Random, n: int) -> list[QA]:
    makers = [f for f, _ in _QA_KINDS]
    weights = [w for _, w in _QA_KINDS]
    return [rng.choices(makers, weights)[0](rng) for _ in range(n)]


def chats(rng: random.Random, n: int) -> list[list[QA | str]]:
    """`n` conversations as [optional system prompt, QA, QA...], style-independent.

    Most are one turn; some carry a system prompt or a second turn so the loss mask is
    exercised on multi-turn input, as real chat data would.
    """
    out: list[list[QA | str]] = []
    for _ in range(n):
        conv: list[QA | str] = [SYSTEM_PROMPT] if rng.random() < 0.2 else []
        conv.extend(qa_pairs(rng, 2 if rng.random() < 0.15 else 1))
        out.append(conv)
    return out


def to_messages(conv: list[QA | str], style: Style) -> list[Message]:
    msgs: list[Message] = []
    for part in conv:
        if isinstance(part, str):
            msgs.append({"role": "system", "content": part})
        else:
            msgs.append({"role": "user", "content": part.question})
            msgs.append({"role": "assistant", "content": part.answer(style)})
    return msgs
