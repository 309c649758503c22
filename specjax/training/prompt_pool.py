"""Training prompts in the style of the benchmark suite (prose, code, structured output), written for training so
that the benchmark's own prompts stay held out. Templates x subjects, in a fixed interleaved order."""

import itertools

PROSE_TEMPLATES = (
    "Write a short story of three sentences about {}.",
    "Explain in one paragraph how {} works.",
    "Describe {} to someone who has never seen it.",
    "Write a friendly email to a neighbour about {}.",
    "Give three practical tips about {}, with one sentence each.",
    "Write a paragraph arguing that {} matters today.",
    "Summarize what a child should know about {}.",
    "Write a short speech that mentions {}.",
)
PROSE_SUBJECTS = (
    "a fisherman who finds a map", "a lost cat in a big city", "the first snow of winter", "a rainy market day",
    "a volcano", "the water cycle", "a solar eclipse", "a bakery at dawn", "learning to swim", "a school garden",
    "bees and flowers", "a train journey across mountains", "the moon landing", "planting a tree", "a thunderstorm",
    "a village festival", "recycling at home", "an old clock tower", "a chess tournament", "the ocean tides",
    "a robot that learns to paint", "saving money", "a camping trip", "the history of bread", "a museum visit",
    "morning exercise", "a kite on a windy beach", "a library card", "autumn leaves", "a lighthouse in fog",
)
CODE_TASKS = (
    ("reverse_words(s)", "returns the words of the string s in reverse order"),
    ("count_vowels(s)", "returns the number of vowels in the string s"),
    ("is_prime(n)", "returns True if n is a prime number"),
    ("fibonacci(n)", "returns the n-th Fibonacci number"),
    ("flatten(xs)", "flattens a list of lists into one list"),
    ("unique(xs)", "returns the distinct items of xs in their first order"),
    ("word_count(text)", "returns a dict from each word in text to its count"),
    ("celsius_to_fahrenheit(c)", "converts a temperature from Celsius to Fahrenheit"),
    ("max_of_three(a, b, c)", "returns the largest of three numbers"),
    ("chunk(xs, n)", "splits the list xs into lists of length n"),
    ("capitalize_words(s)", "capitalizes the first letter of every word in s"),
    ("gcd(a, b)", "returns the greatest common divisor of a and b"),
    ("is_sorted(xs)", "returns True if the list xs is sorted ascending"),
    ("second_largest(xs)", "returns the second largest distinct number in xs"),
    ("digits_sum(n)", "returns the sum of the decimal digits of n"),
    ("rotate(xs, k)", "rotates the list xs to the right by k places"),
)
STRUCTURED_TASKS = (
    'Return a JSON object describing a city with the keys "name", "country" and "population". '
    "Reply with only the JSON.",
    'Return a JSON array of three objects with the keys "title" and "year" for three fictional films. '
    "Reply with only the JSON.",
    "Write a CSV table with the header row city,temperature,rain and four rows of weather. Reply with only the CSV.",
    'Return a JSON object for a recipe with the keys "name", "ingredients" (a list) and "minutes". '
    "Reply with only the JSON.",
    "Write a CSV table with the header row student,subject,grade and three rows. Reply with only the CSV.",
    'Return a JSON object describing a car with the keys "make", "model", "year" and "color". '
    "Reply with only the JSON.",
    "Write a CSV table with the header row planet,moons,rings for four planets. Reply with only the CSV.",
    'Return a JSON array of four objects with the keys "item" and "price" for a shopping list. '
    "Reply with only the JSON.",
)


def training_prompts() -> list[str]:
  """Every training prompt, interleaving prose, code and structured ones so any prefix mixes all three."""
  prose = [t.format(s) for s, t in itertools.product(PROSE_SUBJECTS, PROSE_TEMPLATES)]
  prose = prose[::3] + prose[1::3] + prose[2::3]  # spread templates and subjects over the order
  code = [f"Write a Python function `{sig}` that {what}. Reply with only the code." for sig, what in CODE_TASKS]
  structured = list(STRUCTURED_TASKS)
  mixed = []
  for i, prompt in enumerate(prose):
    mixed.append(prompt)
    if i % 4 == 1 and code:
      mixed.append(code.pop(0))
    if i % 8 == 3 and structured:
      mixed.append(structured.pop(0))
  return mixed + code + structured
