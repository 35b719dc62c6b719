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
    "the Silk Road", "glaciers", "the periodic table", "viruses", "the Industrial Revolution", "wind turbines",
    "the Pythagorean theorem", "coral reefs", "credit scores", "the nervous system", "artificial intelligence",
    "hurricanes", "the Cold War", "bridges", "quantum computing", "the Egyptian pyramids", "taxes",
    "the human brain", "fermentation", "the speed of light", "migration of birds", "operating systems",
    "the Moon landing", "mortgages", "the digestive system", "electricity", "the Big Bang", "social media",
    "the Mediterranean diet", "deserts", "the Declaration of Independence", "magnets", "password security",
    "lighthouses", "cacti", "the theory of relativity", "allergies", "oil prices",
    "the Vikings", "3D printing", "the Inca Empire", "microplastics", "the Apollo program", "cryptography",
    "the human skeleton", "wildfires", "the Beatles", "unemployment", "genetic engineering", "the Sahara desert",
    "search engines", "paper making", "yoga", "the Mona Lisa", "fossil fuels", "the euro",
    "neural networks", "the Pacific Ocean", "chocolate", "the metric system", "the Titanic", "smartphones",
    "the circulatory system", "hydroelectric dams", "ancient Greece", "the carbon cycle", "video games",
    "the harp", "open source software", "cholesterol", "the Eiffel Tower", "tea", "avalanches",
    "the Milky Way", "interest rates", "robots", "the Mayan civilization", "wolves", "the human eye",
    "electric guitars", "pottery", "World War One", "cheese making", "Mars",
    "the gig economy", "lightning", "the Great Barrier Reef", "penicillin", "database indexes", "Shakespeare",
    "the rule of law", "bicycles", "the Arctic", "whales", "spreadsheets", "origami",
    "the Ottoman Empire", "noise pollution", "the seasons", "minimum wage", "satellites", "the violin",
    "GPS", "the nitrogen cycle", "sharks", "the Internet of Things", "ice ages",
    "the Statue of Liberty", "insulin", "email", "the history of money", "comets", "photography",
    "the lungs", "dinosaurs", "trains", "trade tariffs", "rivers", "the telephone",
    "elephants", "the scientific method", "public transport", "the Sun", "octopuses", "the Aztecs",
    "mushrooms", "the Richter scale", "windmills", "tsunamis", "the Nile", "vitamins", "clocks",
    "the Moon's phases", "mountain climbing", "the Enlightenment", "volunteering", "owls",
    "ants", "the camera", "wine making", "the first computers", "dolphins", "the blood types", "pandas",
    "the human genome", "the kidneys", "sound waves", "the Stone Age", "rice farming", "penguins",
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
    "count the lines in a file", "reverse the words in a sentence", "find the median of a list",
    "check whether a year is a leap year", "convert a number to binary", "find the longest word in a sentence",
    "rotate a list by k places", "check whether a list is sorted", "compute the power of a number",
    "remove the spaces from a string", "find the common elements of two lists", "count the vowels in a string",
    "compute the sum of the digits of a number", "convert a string to title case", "find the index of an item in a list",
    "split a list into chunks of size n", "check whether a string contains only digits",
    "compute the area of a circle", "convert kilometers to miles", "find the smallest number in a list",
    "shuffle a list", "compute the product of a list of numbers", "replace every vowel with a star",
    "check whether a number is even", "print a multiplication table", "convert a dictionary to a list of pairs",
    "find the most common word in a text", "compute the length of a string without len",
    "remove the last item of a list", "check whether a number is a perfect square", "count the digits of a number",
    "find the difference between two dates", "reverse a list in place", "compute the mean and standard deviation",
    "check whether a string starts with a capital letter", "join a list of strings with commas",
    "compute simple interest", "find the prime factors of a number", "generate a random password",
    "check whether brackets in a string are balanced", "convert hours to minutes", "sort a list of words by length",
    "count the uppercase letters in a string", "find duplicates in a list", "compute the sum of a list with a loop",
    "binary search a sorted list", "convert a list to a set", "check whether a number is positive",
    "compute the cube of each number in a list", "read a CSV file", "swap two variables",
    "find the maximum of three numbers", "compute the distance between two points", "print the numbers from 1 to 100",
    "check whether a character is a letter", "count the zeros in a list", "build a dictionary from two lists",
    "strip punctuation from a string", "compute the n-th triangular number", "check whether a list is empty",
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
    "The train to the airport leaves every twenty minutes from platform four.",
    "I think we should try the new restaurant on the corner this weekend.",
    "Our office will be closed for the holidays from December 24 to January 2.",
    "The children built a huge sandcastle on the beach yesterday afternoon.",
    "Can you send me the slides from this morning's presentation?",
    "The price of the tickets went up again this year.",
    "My laptop stopped working after I spilled coffee on the keyboard.",
    "The library has a great collection of old maps and books about sailing.",
    "We need more volunteers to help clean the park on Saturday.",
    "The doctor said I should walk for thirty minutes every day.",
    "The new bridge will make the trip to the city much shorter.",
    "Sorry, I forgot to reply to your message last week.",
    "The concert was cancelled because the singer was ill.",
    "Our garden is full of tomatoes and beans this summer.",
    "The company is looking for someone who can speak Spanish and English.",
    "The road is closed because of the snow, so the bus will be late.",
    "I have been learning to cook Italian food during the winter.",
    "The hotel room was clean, but the walls were very thin.",
    "Please fill in the form and return it before the end of the month.",
    "The cat sleeps on the windowsill every afternoon in the sun.",
    "The students asked for more time to finish their projects.",
    "This phone has a bigger screen and a better camera than the old one.",
    "We walked along the river until it got dark.",
    "The bank will charge a small fee for each transfer.",
    "My brother is moving to Canada for a new job in the spring.",
]
THINGS = [
    "a good night's sleep", "learning a new language", "starting a small business", "a healthy breakfast",
    "saving money", "studying for an exam", "a job interview", "a first trip abroad", "working from home",
    "a birthday party", "a vegetable garden", "running a marathon", "a tidy kitchen", "writing a novel",
    "a family picnic", "staying focused", "a camping trip", "learning to code", "public speaking",
    "keeping a houseplant alive",
    "learning to swim", "a road trip", "moving to a new city", "cooking for a crowd", "a wedding speech",
    "a home workout", "planning a budget", "reading more books", "a science fair project", "caring for a dog",
    "a team meeting", "buying a used car", "a long flight", "learning to draw", "a job application",
    "a dinner party", "painting a room", "a hiking trip", "making new friends", "a school presentation",
    "learning the guitar", "cleaning out a garage", "a rainy day at home", "a volunteer project",
    "writing a cover letter", "baking a cake", "starting a podcast", "a beach holiday", "a surprise party",
    "taking better photos", "learning to cook", "a good morning routine", "fixing a bike", "a museum visit",
    "writing a blog", "a picnic in the park", "packing for a trip", "a game night", "learning chess",
    "growing tomatoes",
]
PEOPLE = [
    "a child", "a teenager", "a grandparent", "a new employee", "a beginner", "a student", "a tourist",
    "a friend", "a customer", "a scientist",
    "a teacher", "a parent", "a manager", "a nurse", "a neighbour", "an engineer", "a farmer",
    "a musician", "a landlord", "a coach",
]

TEMPLATES = {
    "explain": ["Explain {topic} in simple terms.", "What is {topic}?", "Can you explain {topic} to {person}?",
                "Why is {topic} important?", "Give me a short summary of {topic}.",
                "Tell me three interesting facts about {topic}.", "How does {topic} work?",
                "Describe {topic} in two short paragraphs.", "What would the world be like without {topic}?"],
    "code": ["Write a {lang} function to {task}.", "How do I {task} in {lang}?",
             "Write a short {lang} program that can {task}, with a comment.",
             "Show me an example in {lang} of how to {task}.",
             "Write a {lang} function to {task}, and a test for it.", "I am new to {lang}. How can I {task}?"],
    "rewrite": ["Rewrite this sentence to be more formal: {sentence}", "Make this sentence shorter: {sentence}",
                "Translate this sentence into French: {sentence}", "Fix the grammar and improve this: {sentence}",
                "Rewrite this sentence for {person}: {sentence}", "Summarize in a few words: {sentence}",
                "Make this sentence sound friendlier: {sentence}", "Turn this into a polite request: {sentence}"],
    "list": ["List five tips for {thing}.", "Give me a list of things I need for {thing}.",
             "What are the steps for {thing}?", "List some common mistakes in {thing}.",
             "Give three pros and three cons of {thing}.", "How can {person} get better at {thing}?",
             "Make a checklist for {thing} for {person}.",
             "What is the best way to prepare for {thing}?", "Give me a one-week plan for {thing}."],
    "qa": ["What are the main causes of {topic}?", "Who discovered or invented {topic}?",
           "Write a short poem about {topic}.", "Write an email to {person} about {thing}.",
           "What should {person} know about {topic}?", "Write a short story about {person} and {thing}.",
           "What is the history of {topic}?", "What are common myths about {topic}?"],
}
FIELDS = {"topic": TOPICS, "task": TASKS, "lang": LANGUAGES, "sentence": SENTENCES, "thing": THINGS,
          "person": PEOPLE}
HELD_OUT_EVERY = 5  # subjects i with i % 5 == 4 are held out (language and person lists are shared)
SHARED_FIELDS = ("lang", "person")


def fingerprint() -> str:
    """A short hash of the templates and subjects: which prompt list a seed gives (a resumed run that asks for more
    prompts must extend the list it began with)."""
    import hashlib

    text = repr((sorted(TEMPLATES.items()), sorted(FIELDS.items()), HELD_OUT_EVERY, SHARED_FIELDS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
