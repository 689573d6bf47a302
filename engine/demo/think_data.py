"""Synthetic conversations for the reasoning demo model: every reply thinks, then answers.

Small tasks whose reasoning can be written out step by step (adding, comparing, parity, spelling
backwards, counting letters), plus greetings, questions about things the model cannot know and
messages that are not questions at all, so that any prompt gets a `<think>` block, a closing tag,
an answer and the end-of-sequence token. Everything comes from a seeded random.Random: the same
seed gives the same data on every machine.
"""

from __future__ import annotations

import random

from .think_chat import assistant_turn

WORDS = (
    "apple", "table", "river", "garden", "window", "yellow", "planet", "orange", "silver",
    "pencil", "rabbit", "little", "bottle", "candle", "forest", "summer", "winter", "number",
    "letter", "simple", "python", "engine", "kernel", "memory", "tensor", "cloud", "water",
    "stone", "paper", "music", "light", "green", "purple", "market", "bridge", "rocket", "castle",
    "dragon", "mirror", "pocket", "button", "circle", "square", "ticket", "violin", "jacket",
    "monkey", "turtle", "spider", "cat", "dog", "sun", "map", "cup", "hat", "box", "pen", "key",
    "egg", "owl", "fox", "bee", "ant", "car", "bus", "red", "sky", "sea", "ice",
)

TOPICS = (
    "the moon", "volcanoes", "the ocean", "music", "history", "Paris", "chemistry", "poetry",
    "the weather", "football", "computers", "dinosaurs", "the stock market", "painting",
    "quantum physics", "cooking", "gravity", "the brain", "language", "money", "sleep",
    "electricity", "birds", "mountains", "the internet", "time", "the stars", "trees",
)

SYSTEM_PROMPTS = (
    "You are a helpful assistant.", "Think step by step.", "You are a tiny reasoning model.",
    "Answer briefly.", "You are a careful assistant. Reason before you answer.",
)

ABILITIES = "I can add numbers, compare them, tell odd from even, and spell words backwards."

_PARITY = ("even", "odd", "even", "odd", "even", "odd", "even", "odd", "even", "odd")


def _add(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    q = rng.choice(("What is {a} + {b}?", "Add {a} and {b}.", "Compute {a} plus {b}.",
                    "How much is {a} + {b}?", "what is {a}+{b}")).format(a=a, b=b)
    ones = a % 10 + b % 10
    carry = ones // 10
    steps = [f"I need {a} + {b}.",
             f"Ones: {a % 10} + {b % 10} = {ones}" + (f", write {ones % 10} and carry 1."
                                                     if carry else ".")]
    tens = a // 10 + b // 10 + carry
    plus = " + 1" if carry else ""
    steps.append(f"Tens: {a // 10} + {b // 10}{plus} = {tens}.")
    steps.append(f"So the sum is {a + b}.")
    return q, "\n".join(steps), f"{a} + {b} = {a + b}."


def _compare(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.sample(range(1, 100), 2)
    q = rng.choice(("Which is larger, {a} or {b}?", "Is {a} bigger than {b}?",
                    "Which number is greater: {a} or {b}?")).format(a=a, b=b)
    big, small = max(a, b), min(a, b)
    if a // 10 != b // 10:
        why = f"The tens digits are {a // 10} and {b // 10}, and {big // 10} is larger."
    else:
        why = (f"The tens digits are both {a // 10}. The ones digits are {a % 10} and "
               f"{b % 10}, and {big % 10} is larger.")
    reasoning = f"I compare {a} and {b}.\n{why}\nSo {big} is the larger number."
    return q, reasoning, f"{big} is larger than {small}."


def _parity(rng: random.Random) -> tuple[str, str, str]:
    n = rng.randint(1, 999)
    q = rng.choice(("Is {n} even or odd?", "Is {n} an odd number?", "Is {n} even?")).format(n=n)
    d = n % 10
    kind = _PARITY[d]
    reasoning = f"The last digit of {n} is {d}.\n{d} is {kind}, so {n} is {kind}."
    return q, reasoning, f"{n} is {kind}."


def _letters(word: str) -> str:
    return ", ".join(word)


def _reverse(rng: random.Random) -> tuple[str, str, str]:
    w = rng.choice(WORDS)
    q = rng.choice(("Spell {w} backwards.", "Reverse the word {w}.",
                    "What is {w} spelled backwards?")).format(w=w)
    rev = w[::-1]
    reasoning = (f"The letters of {w} are {_letters(w)}.\nFrom the last to the first: "
                 f"{_letters(rev)}.\nJoined together that is {rev}.")
    return q, reasoning, f"{w} backwards is {rev}."


def _count(rng: random.Random) -> tuple[str, str, str]:
    w = rng.choice(WORDS)
    q = rng.choice(("How many letters are in {w}?", "Count the letters of {w}.",
                    "How long is the word {w}?")).format(w=w)
    reasoning = f"I spell it out: {_letters(w)}.\nCounting them gives {len(w)}."
    return q, reasoning, f"{w} has {len(w)} letters."


def _greeting(rng: random.Random) -> tuple[str, str, str]:
    q = rng.choice(("Hello", "Hi!", "Hey there", "Good morning", "Who are you?", "hello?",
                    "What can you do?", "Hi, how are you?"))
    reasoning = ("The user greets me or asks who I am.\nI should say hello and tell them what "
                 "I can do.")
    return q, reasoning, f"Hello! I am a tiny model that thinks before it answers. {ABILITIES}"


def _topic(rng: random.Random) -> tuple[str, str, str]:
    t = rng.choice(TOPICS)
    q = rng.choice(("Tell me about {t}.", "What do you know about {t}?", "Explain {t}.",
                    "Why is {t} important?", "Can you describe {t}?")).format(t=t)
    reasoning = (f"The user asks about {t}.\nI am a very small model and know little about it."
                 "\nA short, honest answer is best.")
    return q, reasoning, (f"I know very little about {t}. I am a tiny demo model. "
                          f"{ABILITIES}")


def _noise(rng: random.Random) -> tuple[str, str, str]:
    pool = list(WORDS) + [t.split()[-1] for t in TOPICS]
    q = " ".join(rng.choice(pool) for _ in range(rng.randint(1, 8)))
    if rng.random() < 0.5:
        q = q.capitalize() + rng.choice((".", "?", "!", ""))
    reasoning = ("This message is not a task I know.\nI will say so and list what I can do.")
    return q, reasoning, f"I am not sure what you mean. {ABILITIES}"


TASKS = ((_add, 4), (_compare, 2), (_parity, 2), (_reverse, 3), (_count, 2), (_greeting, 1),
         (_topic, 2), (_noise, 2))


def sample_task(rng: random.Random) -> tuple[str, str, str]:
    """(question, reasoning, answer) of one task, drawn by the weights in TASKS."""
    fns, weights = zip(*TASKS)
    return rng.choices(fns, weights=weights)[0](rng)


def conversation(rng: random.Random) -> list[dict[str, str]]:
    """One training conversation: sometimes a system prompt, sometimes an earlier exchange."""
    messages = []
    if rng.random() < 0.25:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    if rng.random() < 0.25:
        q, r, a = sample_task(rng)
        messages += [{"role": "user", "content": q},
                     {"role": "assistant", "content": assistant_turn(r, a)}]
    q, r, a = sample_task(rng)
    messages += [{"role": "user", "content": q},
                 {"role": "assistant", "content": assistant_turn(r, a)}]
    return messages


def conversations(n: int, seed: int) -> list[list[dict[str, str]]]:
    rng = random.Random(seed)
    return [conversation(rng) for _ in range(n)]


FREE = ("Write a poem about the sea.", "What is the capital of France?",
        "How do I sort a list in Python?", "Summarize the plot of Hamlet.",
        "Translate 'good night' into German.", "What is 123456 * 789?",
        "Give me three tips for sleeping better.", "Why do cats purr?",
        "Is it going to rain tomorrow?", "Explain how an NPU differs from a GPU.")
FREE_NOUNS = ("banana", "keyboard", "airport", "elephant", "calendar", "teacher", "bicycle",
              "kitchen", "island", "printer")
FREE_FORMS = ("Write a poem about a {x}.", "How do I clean a {x}?", "What is the history of the {x}?",
              "Describe a {x} in one sentence.", "Can a {x} fly?", "Where can I buy a {x}?")


def eval_prompts(n: int, seed: int) -> list[str]:
    """User messages for the greedy check: half drawn like the training tasks (another seed),
    half free text in forms the model never saw (FREE, FREE_FORMS x FREE_NOUNS)."""
    rng = random.Random(seed)
    free = list(FREE) + [f.format(x=x) for f in FREE_FORMS for x in FREE_NOUNS]
    rng.shuffle(free)
    out = []
    for i in range(n):
        out.append(free[i // 2 % len(free)] if i % 2 else sample_task(rng)[0])
    return out
