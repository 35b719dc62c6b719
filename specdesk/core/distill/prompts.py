"""Chat prompts for the target to answer: written here from templates, never downloaded.

Training data for a draft is the target's own replies (DistillSpec, Zhou et al. 2023), so the prompts only
need to look like what people ask a chat model: code, rewriting, explaining, lists, questions and answers.
Each template takes a subject; every fifth subject of each list is held out, so the held-out prompts share
no subject with the training prompts (the split is fixed, the order is a seeded shuffle).
"""

from __future__ import annotations

import random

TOPICS = [
    "photosynthesis", "the water cycle", "black holes", "inflation", "compound interest", "vaccines",
    "the French Revolution", "plate tectonics", "machine learning", "the stock market", "climate change",
    "the immune system", "electric cars", "the internet", "democracy", "gravity", "the Roman Empire",
    "recycling", "sleep", "coffee", "volcanoes", "the moon", "bees", "rainbows", "earthquakes", "DNA",
    "solar panels", "the printing press", "antibiotics", "blockchain", "the human heart", "tides",
    "supply and demand", "the Renaissance", "nuclear energy", "meditation", "the Olympic Games", "bread baking",
    "time zones", "batteries", "the Great Wall of China", "evolution", "cloud computing", "jazz music",
    "the ozone layer", "chess", "public libraries", "honey", "submarines", "the Amazon rainforest",
]
TASKS = [
    "reverse a string", "check whether a number is prime", "count the words in a sentence",
    "find the largest number in a list", "compute the factorial of n", "remove duplicates from a list",
    "read a text file and print its lines", "convert Celsius to Fahrenheit", "check whether a word is a palindrome",
    "sum the even numbers in a list", "merge two sorted lists", "compute the average of a list of numbers",
    "count how often each character appears in a string", "flatten a nested list", "return the n-th Fibonacci number",
    "sort a list of dictionaries by a key", "validate an email address", "find the second smallest number",
    "capitalize every word in a sentence", "compute the greatest common divisor of two numbers",
    "convert a list of strings to integers", "check whether two strings are anagrams", "transpose a matrix",
    "find all the vowels in a string", "generate the first n square numbers",
]
LANGUAGES = ["Python", "JavaScript", "Python", "C", "Python", "Java", "Python", "Rust", "Go", "Python"]
SENTENCES = [
    "The meeting has been moved to next Tuesday because many people are on holiday.",
    "Our new product helps small teams keep track of their tasks and deadlines.",
    "I am writing to ask whether the job is still open.",
    "The weather was bad, so we stayed at home and watched films all day.",
    "Please remember to bring your own lunch to the trip on Friday.",
    "The report shows that sales grew by ten percent in the last quarter.",
    "He was late for work because his train broke down in the tunnel.",
    "We are very sorry for the delay in shipping your order.",
    "The city plans to build a new park near the river next year.",
    "She learned to play the piano when she was seven years old.",
    "The software update fixes several bugs and makes the app faster.",
    "Thank you for coming to the party, it was great to see you.",
    "The museum is closed on Mondays but open late on Thursdays.",
    "Drinking enough water every day is important for your health.",
    "The team won the final match after a long and difficult season.",
]
THINGS = [
    "a good night's sleep", "learning a new language", "starting a small business", "a healthy breakfast",
    "saving money", "studying for an exam", "a job interview", "a first trip abroad", "working from home",
    "a birthday party", "a vegetable garden", "running a marathon", "a tidy kitchen", "writing a novel",
    "a family picnic", "staying focused", "a camping trip", "learning to code", "public speaking",
    "keeping a houseplant alive",
]
PEOPLE = [
    "a child", "a teenager", "a grandparent", "a new employee", "a beginner", "a student", "a tourist",
    "a friend", "a customer", "a scientist",
]

TEMPLATES = {
    "explain": ["Explain {topic} in simple terms.", "What is {topic}?", "Can you explain {topic} to {person}?",
                "Why is {topic} important?", "Give me a short summary of {topic}.",
                "Tell me three interesting facts about {topic}.", "How does {topic} work?"],
    "code": ["Write a {lang} function to {task}.", "How do I {task} in {lang}?",
             "Write a short {lang} program that can {task}, with a comment.",
             "Show me an example in {lang} of how to {task}."],
    "rewrite": ["Rewrite this sentence to be more formal: {sentence}", "Make this sentence shorter: {sentence}",
                "Translate this sentence into French: {sentence}", "Fix the grammar and improve this: {sentence}",
                "Rewrite this sentence for {person}: {sentence}", "Summarize in a few words: {sentence}"],
    "list": ["List five tips for {thing}.", "Give me a list of things I need for {thing}.",
             "What are the steps for {thing}?", "List some common mistakes in {thing}.",
             "Give three pros and three cons of {thing}.", "How can {person} get better at {thing}?",
             "Make a checklist for {thing} for {person}."],
    "qa": ["What are the main causes of {topic}?", "Who discovered or invented {topic}?",
           "Write a short poem about {topic}.", "Write an email to {person} about {thing}.",
           "What should {person} know about {topic}?", "Write a short story about {person} and {thing}."],
}
FIELDS = {"topic": TOPICS, "task": TASKS, "lang": LANGUAGES, "sentence": SENTENCES, "thing": THINGS,
          "person": PEOPLE}
HELD_OUT_EVERY = 5  # subjects i with i % 5 == 4 are held out (language and person lists are shared)
SHARED_FIELDS = ("lang", "person")


def _pool(field: str, held_out: bool) -> list[str]:
    items = FIELDS[field]
    if field in SHARED_FIELDS:
        return items
    return [s for i, s in enumerate(items) if (i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1) == held_out]


def chat_prompts(n: int, *, held_out: bool = False, seed: int = 0) -> list[str]:
    """``n`` distinct user messages (fewer if the templates run out), training or held-out, reproducibly."""
    rng = random.Random(seed + (1_000_003 if held_out else 0))
    pools = {f: _pool(f, held_out) for f in FIELDS}
    kinds = sorted(TEMPLATES)
    out: list[str] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        kind = rng.choice(kinds)
        text = rng.choice(TEMPLATES[kind])
        fill = {f: rng.choice(p) for f, p in pools.items()}
        prompt = text.format(**fill)
        if prompt not in seen:
            seen.add(prompt)
            out.append(prompt)
    return out
