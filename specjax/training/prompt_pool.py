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
    "Write a diary entry about {}.",
    "Tell a short fable about {} that ends with a moral.",
    "Write the opening paragraph of a novel about {}.",
    "Write a short news report about {}.",
    "Write a product description that features {}.",
    "Describe a day in the life of someone who loves {}.",
    "Write a thank-you note to a teacher that mentions {}.",
    "List the good and bad sides of {} in a short paragraph.",
    "Write a short poem about {}.",
    "Write a review of a book about {}.",
    "Explain {} to a ten-year-old in simple words.",
    "Write a postcard to a friend about {}.",
)
PROSE_SUBJECTS = (
    "a fisherman who finds a map", "a lost cat in a big city", "the first snow of winter", "a rainy market day",
    "a volcano", "the water cycle", "a solar eclipse", "a bakery at dawn", "learning to swim", "a school garden",
    "bees and flowers", "a train journey across mountains", "the moon landing", "planting a tree", "a thunderstorm",
    "a village festival", "recycling at home", "an old clock tower", "a chess tournament", "the ocean tides",
    "a robot that learns to paint", "saving money", "a camping trip", "the history of bread", "a museum visit",
    "morning exercise", "a kite on a windy beach", "a library card", "autumn leaves", "a lighthouse in fog",
    "a hot air balloon ride", "a farmers' market", "the first day at a new job", "a broken umbrella",
    "a family picnic", "migrating birds", "a small island", "a violin lesson", "building a sandcastle",
    "a snowy mountain village", "an old bookshop", "a football match", "the night sky", "a bicycle repair shop",
    "growing tomatoes", "a desert journey", "a friendly dragon", "a science fair", "a coffee shop",
    "a quiet afternoon at home", "the invention of the telephone", "a marathon runner", "a kitten's first week",
    "a power cut in winter", "a river in spring", "a street musician", "a fire drill at school",
    "a new playground", "an electric car", "a vegetable soup", "a lost wallet", "a birthday surprise",
)
CODE_TASKS = (
    ("reverse_words(s)", "returns the words of the string s in reverse order"),
    ("count_char(s, c)", "returns how many times the character c occurs in the string s"),
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
    ("smallest_index(xs)", "returns the index of the smallest number in the list xs"),
    ("digits_sum(n)", "returns the sum of the decimal digits of n"),
    ("rotate(xs, k)", "rotates the list xs to the right by k places"),
    ("is_anagram(a, b)", "returns True if the strings a and b are anagrams of each other"),
    ("average(xs)", "returns the mean of the numbers in xs, or 0 for an empty list"),
    ("remove_duplicates(s)", "removes repeated characters from the string s, keeping the first of each"),
    ("title_case(s)", "returns s with the first letter of each word upper-cased and the rest lower-cased"),
    ("count_words(s)", "returns the number of words in the string s"),
    ("power_set(xs)", "returns every subset of the list xs as a list of lists"),
    ("binary_search(xs, x)", "returns the index of x in the sorted list xs, or -1 if it is absent"),
    ("transpose(matrix)", "returns the transpose of a matrix given as a list of rows"),
    ("running_total(xs)", "returns the list of running sums of xs"),
    ("longest_word(s)", "returns the longest word in the string s"),
    ("is_leap_year(y)", "returns True if the year y is a leap year"),
    ("dedent_lines(lines)", "strips leading spaces from every string in the list lines"),
    ("invert_dict(d)", "returns a dict that maps each value of d to its key"),
    ("clamp(x, lo, hi)", "limits the number x to the range lo to hi"),
    ("pairwise_sums(xs)", "returns the sums of each pair of neighbouring items in xs"),
    ("caesar_shift(s, n)", "shifts every letter of s by n places in the alphabet"),
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
    'Return a JSON object describing a pet with the keys "name", "species", "age" and "owner". '
    "Reply with only the JSON.",
    "Write a CSV table with the header row country,capital,language for five countries. Reply with only the CSV.",
    'Return a JSON object for an event with the keys "title", "date", "location" and "guests" (a list). '
    "Reply with only the JSON.",
    "Write a CSV table with the header row employee,department,salary and four rows. Reply with only the CSV.",
    'Return a JSON array of three objects with the keys "song" and "artist". Reply with only the JSON.',
    "Write a CSV table with the header row month,sales,returns for the first six months. Reply with only the CSV.",
    'Return a JSON object describing a laptop with the keys "brand", "ram_gb", "storage_gb" and "price". '
    "Reply with only the JSON.",
    "Write a CSV table with the header row animal,legs,habitat for five animals. Reply with only the CSV.",
)


def prose_prompts() -> list[str]:
  """Every prose prompt (template x subject), in the order the pool takes them."""
  prose = [t.format(s) for s, t in itertools.product(PROSE_SUBJECTS, PROSE_TEMPLATES)]
  return prose[::3] + prose[1::3] + prose[2::3]  # spread templates and subjects over the order


def training_prompts() -> list[str]:
  """Every training prompt, interleaving prose, code and structured ones so any prefix mixes all three."""
  prose = prose_prompts()
  code = [f"Write a Python function `{sig}` that {what}. Reply with only the code." for sig, what in CODE_TASKS]
  structured = list(STRUCTURED_TASKS)
  mixed = []
  for i, prompt in enumerate(prose):
    mixed.append(prompt)
    if i % 8 == 1 and code:
      mixed.append(code.pop(0))
    if i % 16 == 3 and structured:
      mixed.append(structured.pop(0))
  return mixed + code + structured
