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


# The "varied" set: kinds of requests the templates above never make (the bundled SmolLM2 draft, trained on those,
# agreed with its target on 0.55 of held-out template prompts' tokens and on 0.42 of FREE_PROMPTS', below).
VARIED_TEMPLATES = {
    "advice": ["How can I {goal}?", "I want to {goal}. Where should I start?", "What are some simple ways to {goal}?",
               "Any advice for someone who wants to {goal}?", "What mistakes should I avoid if I want to {goal}?",
               "I keep failing to {goal}. What can I do differently?"],
    "compare": ["What is the difference between {pair}?", "Compare {pair}.", "How are {pair} alike, and how do they "
                "differ?", "Which should {person} choose between {pair}?", "Explain the difference between {pair} "
                "with an example."],
    "write": ["Write a short {doc} for {occasion}.", "Help me write a {doc} about {occasion}.",
              "Draft a {doc} for {occasion}, in a friendly tone.",
              "Can you write a {doc} for {occasion}? Keep it under 100 words."],
    "fix": ["What can I do if {problem}?", "I have a problem: {problem}. How can I fix it?",
            "What usually causes this: {problem}?", "Give me step-by-step help: {problem}."],
    "recommend": ["Can you recommend {item} for {person}?", "What are some good {item}?",
                  "Suggest three {item} and say why.", "I'm looking for {item}. Any ideas?"],
    "calculate": ["Calculate {calc} and show the steps.", "What is {calc}?", "Can you work out {calc}? Explain how.",
                  "Help me with my homework: find {calc}."],
    "decide": ["Is it a good idea to {choice}?", "Should I {choice}? Give me both sides.",
               "Why do some people {choice}?", "My friend wants to {choice}. What should they think about first?"],
    "describe": ["Describe {scene} in a few vivid sentences.", "Write a paragraph describing {scene}.",
                 "Imagine {scene}. What would you see, hear and smell?"],
    "why": ["Why {why}?", "Quick question: why {why}?", "I've always wondered: why {why}?"],
    "define": ["What does '{word}' mean?", "Define '{word}' and use it in a sentence.",
               "Explain the term '{word}' with an example.", "How would you explain '{word}' to {person}?"],
    "plan": ["Help me plan {event}.", "Make a schedule for {event}.", "What do I need to organise {event}?",
             "Give me a simple plan for {event}, with a budget."],
    "concept": ["Explain {concept} in {lang} with a short example.", "When should I use {concept} in {lang}?",
                "What are {concept} in {lang}, and why are they useful?"],
    "command": ["Write a {tool} to {op}.", "What {tool} would {op}?", "Give me a {tool} to {op}, and explain it."],
    "roleplay": ["You are {role}. Introduce yourself in a few sentences.", "Act as {role} and give me one piece of "
                 "advice.", "Pretend you are {role}. What does a normal day look like for you?"],
}
VARIED_FIELDS = {
    "goal": ["save more money each month", "sleep better", "get fit without a gym", "learn to cook",
             "make new friends in a new city", "speak in public with confidence", "stay focused while studying",
             "eat healthier", "keep my houseplants alive", "write a novel", "improve my handwriting",
             "become a better listener", "reduce my screen time", "run five kilometres", "organise my closet",
             "learn to draw", "negotiate a higher salary", "wake up earlier", "keep a journal",
             "grow herbs on a balcony", "get better grades", "learn to swim", "be more patient",
             "pay off my credit card", "memorise things faster"],
    "pair": ["a laptop and a tablet", "weather and climate", "a crocodile and an alligator", "HTTP and HTTPS",
             "a list and a tuple in Python", "baking soda and baking powder", "speed and velocity",
             "an email and a letter", "running and swimming", "SQL and NoSQL databases",
             "a credit card and a debit card", "mitosis and meiosis", "empathy and sympathy",
             "a hurricane and a tornado", "stocks and bonds", "frogs and toads", "RAM and storage",
             "a simile and a metaphor", "butter and margarine", "TCP and UDP", "an introvert and an extrovert",
             "a lake and a pond", "a democracy and a republic", "a comet and an asteroid", "Java and JavaScript"],
    "doc": ["text message", "speech", "toast", "invitation", "apology note", "newsletter paragraph",
            "social media post", "birthday card message", "announcement", "short bio", "welcome message",
            "reminder", "slogan", "limerick", "poster text"],
    "occasion": ["a friend's birthday", "a team's product launch", "a school bake sale", "a retirement party",
                 "a new neighbour moving in", "a charity fun run", "a missed deadline", "a community garden opening",
                 "a graduation", "a farewell to a coworker", "a book club meeting", "a store's summer sale",
                 "a wedding anniversary", "a volunteer day at the park", "a local concert", "a science fair",
                 "a company picnic", "a library's reopening", "a neighbourhood clean-up", "a chess tournament"],
    "problem": ["my laptop is running very slowly", "my phone battery drains too fast", "the Wi-Fi keeps disconnecting",
                "my bike chain keeps falling off", "my bread does not rise", "my Python code raises a KeyError",
                "git says I have merge conflicts", "my kitchen sink drains slowly", "my dog barks at night",
                "my car squeaks when I brake", "my printer says it is offline", "my headphones only play on one side",
                "my website loads slowly", "my cat will not use the litter box", "my shower has low water pressure",
                "I cannot fall asleep at night", "my spreadsheet formula returns an error", "my zipper is stuck",
                "my email goes to spam", "my houseplant is dropping leaves"],
    "item": ["books about space", "podcasts about history", "gift ideas for a coworker", "weekend activities for a "
             "rainy day", "healthy snacks for work", "beginner programming projects", "movies for a family night",
             "names for a pet cat", "hobbies to try this year", "songs for a road trip", "ways to celebrate a "
             "birthday at home", "indoor plants that need little light", "vegetarian dinner recipes",
             "apps for learning languages", "exercises to do at a desk", "card games for two players",
             "documentaries about nature", "ideas for a first date", "easy desserts without an oven",
             "places to visit in Japan"],
    "calc": ["15% of 80", "the area of a circle with a radius of 3 cm", "how many minutes are in a week",
             "the average of 4, 8, 15 and 23", "5 kilometres in miles", "the square root of 144",
             "the interest on $1,000 at 5% a year for 3 years", "a 20% tip on a $45 bill",
             "how long it takes to drive 150 km at 60 km/h", "12 times 17", "the perimeter of a 4 by 7 rectangle",
             "half of three quarters", "how many seconds are in a day", "the price after a 30% discount on $60",
             "the volume of a 2 by 3 by 4 box", "the next number in 2, 4, 8, 16", "3 to the power of 4",
             "how many weeks are in 100 days", "the speed of a runner who covers 10 km in 50 minutes",
             "the total of 3 items at $4.99 each"],
    "choice": ["learn two languages at once", "quit social media", "buy an electric bike", "take a gap year",
               "work four days a week", "adopt a dog while living in an apartment", "switch careers at forty",
               "move to the countryside", "study late at night", "use a standing desk",
               "start investing with a small amount", "learn to code as an adult", "live without a car",
               "go vegetarian", "read the news every morning", "keep a to-do list", "buy a used phone",
               "travel alone", "rent furniture", "take cold showers"],
    "scene": ["a busy train station at rush hour", "a quiet beach at sunrise", "a forest after the rain",
              "a crowded night market", "an old library", "a thunderstorm over the city", "a snowy mountain village",
              "a desert at night", "a kitchen on a holiday morning", "a stadium before a big match",
              "a small harbour at dusk", "a classroom on the first day of school", "a field of sunflowers",
              "an airport at midnight", "a rainy street in autumn", "a bakery at dawn", "a coral reef",
              "a farm in early spring", "a city rooftop at night", "a hospital waiting room"],
    "why": ["is the sky blue", "do we yawn", "does ice float on water", "do onions make us cry",
            "do airplanes leave white trails", "does bread go stale", "do we have leap years", "is the ocean salty",
            "do cats purr", "does the moon change shape", "do we get goosebumps", "do some people snore",
            "do leaves change colour in autumn", "do we dream", "does metal feel colder than wood",
            "do birds fly south in winter", "is the number zero important", "do we need vitamins",
            "does a compass point north", "do bubbles look round"],
    "word": ["serendipity", "ubiquitous", "opportunity cost", "API", "metadata", "irony", "bandwidth", "nostalgia",
             "latency", "empathy", "sustainability", "resilience", "algorithm", "placebo", "encryption",
             "biodiversity", "mindfulness", "recession", "compiler", "paradox"],
    "event": ["a weekend camping trip", "a surprise birthday party", "a study week before exams",
              "a small garden wedding", "a team-building afternoon", "a move to a new apartment",
              "a two-day visit to London", "a family reunion", "a picnic for ten people", "a charity quiz night",
              "a road trip along the coast", "a kid's science project", "a dinner party for six",
              "a first week at a new job", "a home office setup", "a spring cleaning day", "a baby shower",
              "a weekly meal prep", "a day at a theme park", "a language exchange meetup"],
    "concept": ["list comprehensions", "closures", "async functions", "classes", "exceptions", "dictionaries",
                "pointers", "generics", "decorators", "unit tests", "regular expressions", "string formatting",
                "interfaces", "lambda functions", "iterators", "enums", "modules", "type hints", "threads",
                "sets"],
    "tool": ["SQL query", "bash command", "regular expression", "spreadsheet formula", "git command",
             "Docker command", "Python one-liner", "cron line", "find command", "CSS rule"],
    "op": ["count the rows in a table", "find all files larger than 100 MB", "match an email address",
           "sum a column when another column says 'paid'", "undo the last commit", "list running containers",
           "print every line that contains an error", "run a script every Monday at 9", "rename many files at once",
           "center a box on the page", "remove duplicate rows", "show the ten largest folders",
           "check which process uses a port", "extract the year from a date", "compress a folder",
           "split a string on commas", "sort a list of names", "show the last 20 lines of a log",
           "find the average price per category", "delete a branch"],
    "role": ["a friendly librarian", "a personal trainer", "a chef in a busy restaurant", "a museum guide",
             "a ship's captain", "a detective", "a beekeeper", "a lighthouse keeper", "a kindergarten teacher",
             "an astronaut", "a bus driver", "a park ranger", "a jazz pianist", "a customer support agent",
             "a medieval knight", "a gardener", "a news reporter", "a travel agent", "a robot butler",
             "a mountain guide"],
}
# Written by hand, in forms none of the templates uses (and subjects their lists avoid): never training data; the
# bench's chat-free category and the measure of how far a draft trained on templates carries to other chat.
FREE_PROMPTS = [
    "I have a job interview tomorrow for a marketing role. What questions should I expect?",
    "My tomato plants have yellow leaves. What could be wrong?",
    "Can you help me plan a three-day trip to Rome on a budget?",
    "What's the difference between a virus and a bacterium?",
    "Suggest a name for a bakery that specializes in sourdough bread.",
    "Write a haiku about the first snow of winter.",
    "Is it better to rent or buy a house? Give me both sides.",
    "How do I politely decline an invitation to a wedding?",
    "Explain recursion to me like I'm five years old.",
    "What should I cook for dinner tonight if I only have eggs, rice and spinach?",
    "Write a SQL query that finds the ten customers with the highest total orders.",
    "Why does my bash script say 'permission denied' when I run it?",
    "Compare Python and Go for writing a web server.",
    "Give me a motivational message for someone starting their first marathon training.",
    "What are some good board games for a family with young kids?",
    "Draft a short thank-you note to my colleague who covered my shift.",
    "How many hours of sleep does a teenager need, and why?",
    "Describe the taste of a mango to someone who has never had one.",
    "What is a good way to start learning to play the piano as an adult?",
    "Convert 72 degrees Fahrenheit to Celsius and show the steps.",
    "Write a product description for a waterproof hiking backpack.",
    "What happened during the fall of the Berlin Wall?",
    "Help me write a tweet announcing our new coffee shop opening on Saturday.",
    "How can I stop procrastinating when I work from home?",
]


TEMPLATE_SETS = ("templates", "varied")  # "varied": TEMPLATES and VARIED_TEMPLATES together, every kind alike
# "self": messages the target writes itself (distill/selfprompts.py), no templates
PROMPT_SETS = TEMPLATE_SETS + ("self",)


def templates_of(prompt_set: str) -> tuple[dict, dict]:
    """(templates by kind, fields) of a template prompt set; another name is a BadSetting."""
    if prompt_set == "templates":
        return TEMPLATES, FIELDS
    if prompt_set == "varied":
        return {**TEMPLATES, **VARIED_TEMPLATES}, {**FIELDS, **VARIED_FIELDS}
    from specdesk.core.errors import BadSetting

    if prompt_set == "self":
        raise BadSetting("the prompt set self has no templates: the target writes its prompts (distill.selfprompts)")
    raise BadSetting(f"unknown prompt set {prompt_set!r}: use {', '.join(PROMPT_SETS)}")


def check(prompt_set: str) -> None:
    """An unknown prompt set's name is a BadSetting."""
    if prompt_set not in PROMPT_SETS:
        templates_of(prompt_set)


def fingerprint(prompt_set: str = "templates") -> str:
    """A short hash of the templates and subjects: which prompt list a seed gives (a resumed run that asks for more
    prompts must extend the list it began with)."""
    import hashlib

    if prompt_set == "self":
        from specdesk.core.distill.selfprompts import VERSION

        return hashlib.sha256(VERSION.encode()).hexdigest()[:16]
    templates, fields = templates_of(prompt_set)
    text = repr((sorted(templates.items()), sorted(fields.items()), HELD_OUT_EVERY, SHARED_FIELDS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pool(fields: dict, field: str, held_out: bool) -> list[str]:
    items = fields[field]
    if field in SHARED_FIELDS:
        return items
    return [s for i, s in enumerate(items) if (i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1) == held_out]


def all_prompts(prompt_set: str = "templates", *, held_out: bool = False) -> set[str]:
    """Every distinct message a prompt set can write (training or held-out): each template filled with every
    combination of the subjects its fields draw from. What :func:`chat_prompts` draws from, enumerated whole."""
    import itertools
    import string

    templates, fields = templates_of(prompt_set)
    pools = {f: _pool(fields, f, held_out) for f in fields}
    out: set[str] = set()
    for texts in templates.values():
        for text in texts:
            used = sorted({name for _, name, _, _ in string.Formatter().parse(text) if name})
            for values in itertools.product(*(pools[f] for f in used)):
                out.add(text.format(**dict(zip(used, values))))
    return out


def chat_prompts(n: int, *, held_out: bool = False, seed: int = 0, prompt_set: str = "templates") -> list[str]:
    """``n`` distinct user messages (fewer if the templates run out), training or held-out, reproducibly. Each set
    draws its own sequence ("templates" the same as before "varied" existed)."""
    templates, fields = templates_of(prompt_set)
    rng = random.Random(seed + (1_000_003 if held_out else 0))
    pools = {f: _pool(fields, f, held_out) for f in fields}
    kinds = sorted(templates)
    out: list[str] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n and tries < 50 * n:
        tries += 1
        kind = rng.choice(kinds)
        text = rng.choice(templates[kind])
        fill = {f: rng.choice(p) for f, p in pools.items()}
        prompt = text.format(**fill)
        if prompt not in seen:
            seen.add(prompt)
            out.append(prompt)
    return out
