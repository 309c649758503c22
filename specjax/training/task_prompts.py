"""Training prompts made from packaged text, thousands where the hand-written pool (`prompt_pool`) has 1,288, so the
target's own answers to them (on-policy, the way EAGLE's and DFlash's recipes regenerate responses) can be a large
share of a corpus: prose tasks about Wikipedia article titles, the standard library's functions to write, and JSON
and CSV tasks over records. Any prompt sharing an 8-word run with a benchmark prompt is dropped."""

import ast
import collections
import functools
import itertools
import re

import numpy as np

from specjax.training import holdout
from specjax.training.sources import python_code, wiki

PROSE_TEMPLATES = (
    "Write a paragraph about {}.",
    "Explain what {} is to a ten-year-old in simple words.",
    "Describe {} in three sentences.",
    "Write a short story of three sentences that mentions {}.",
    "Give three facts about {}, with one sentence each.",
    "Write a short news report about {}.",
    "Write a friendly email to a friend about {}.",
    "Summarize what most people should know about {}.",
    "Write a short poem about {}.",
    "Write a paragraph arguing that {} is worth learning about.",
    "Write a diary entry about a day spent learning about {}.",
    "Write a short speech that mentions {}.",
    # more genres and registers: a head trained on few templates learns their phrasing, not prose (section 52)
    "Write a letter to the editor of a local newspaper about {}.",
    "Write a short dialogue between a teacher and a student about {}.",
    "Write an encyclopedia entry of one paragraph on {}.",
    "Write a museum label for an exhibit on {}.",
    "Write a short quiz of three questions about {}, with the answers.",
    "Write a limerick about {}.",
    "Write a tweet announcing a talk about {}.",
    "Write an opening line for a documentary about {}.",
    "Write a persuasive paragraph for a school debate on {}.",
    "Write a short fairy tale in which {} plays a part.",
    "Describe {} as a tour guide would.",
    "Write a paragraph comparing {} with something from everyday life.",
    "Write a radio news bulletin of three sentences about {}.",
    "Write a short interview with an expert on {}.",
    "Write a text message to a sibling about {}.",
    "Explain why {} matters, in two sentences.",
    "Write a haiku about {}.",
    "Write the back-cover blurb of a novel set around {}.",
    "Write a short lesson plan for teaching children about {}.",
    "Write a paragraph on common misunderstandings about {}.",
    "Write a formal report summary on {}.",
    "Tell a joke about {} and explain why it is funny.",
    "Write a short motivational message inspired by {}.",
    "Write a story for young children that mentions {}.",
    "Write a paragraph on the history of {}.",
    "Write a short scene for a play about {}.",
    "Give one argument for and one against studying {}.",
    "Write a welcome message for visitors to an exhibition on {}.",
    "Write a short obituary-style tribute about a person who studied {}.",
    "Write a paragraph a student might write in an exam about {}.",
    "Write a short note inviting a friend to a talk about {}.",
    "Write a riddle whose answer is {}.",
    "Write a podcast introduction about {}.",
    "Write three questions a curious child might ask about {}, and answer them.",
    "Write a journal entry by a scientist who studies {}.",
    "Write a short review of a documentary about {}.",
    "Write instructions for a class project about {}.",
    "Describe {} in the style of a nature documentary narrator.",
    "Write a paragraph imagining {} one hundred years from now.",
    "Write a thank-you letter to a guide who showed you {}.",
    "Write a newsletter paragraph about {} for club members.",
    "Write an apology letter for missing a lecture on {}.",
    "Write a rhyming couplet about {}.",
    "Write a short mystery story in which {} is a clue.",
    "Summarize {} for a busy manager in three bullet points.",
    "Write a short reflection on what {} teaches us.",
    "Write an introduction for a school presentation on {}.",
    "Write a short children's song about {}.",
)
# (singular, plural, field names): records the structured tasks ask for, none of them the benchmark's own
RECORDS = (
    ("city", "cities", ("name", "country", "population", "mayor", "founded", "area_km2")),
    ("film", "films", ("title", "director", "year", "genre", "rating", "minutes")),
    ("song", "songs", ("title", "artist", "album", "year", "seconds", "genre")),
    ("car", "cars", ("make", "model", "year", "color", "price", "mileage")),
    ("recipe", "recipes", ("name", "cuisine", "minutes", "servings", "difficulty", "calories")),
    ("employee", "employees", ("name", "department", "salary", "start_date", "manager", "office")),
    ("planet", "planets", ("name", "moons", "rings", "diameter_km", "distance_au", "type")),
    ("restaurant", "restaurants", ("name", "city", "cuisine", "rating", "price_level", "open_late")),
    ("laptop", "laptops", ("brand", "model", "ram_gb", "storage_gb", "price", "weight_kg")),
    ("flight", "flights", ("number", "origin", "destination", "departure", "arrival", "gate")),
    ("animal", "animals", ("name", "species", "legs", "habitat", "diet", "lifespan_years")),
    ("student", "students", ("name", "grade", "subject", "score", "teacher", "year")),
    ("hotel", "hotels", ("name", "city", "stars", "rooms", "price_per_night", "pool")),
    ("order", "orders", ("id", "customer", "item", "quantity", "total", "status")),
    ("museum", "museums", ("name", "city", "founded", "visitors", "director", "free_entry")),
    ("sensor reading", "sensor readings", ("sensor", "time", "temperature", "humidity", "battery", "location")),
    ("country", "countries", ("name", "capital", "language", "currency", "population", "continent")),
    ("game", "games", ("title", "studio", "year", "platform", "players", "price")),
    ("ticket", "tickets", ("id", "title", "priority", "assignee", "status", "created")),
    ("tree", "trees", ("species", "height_m", "age_years", "park", "leaf_type", "planted")),
)
COUNTS = ("two", "three", "four", "five")
KIND_SHARES = (("prose", 2), ("code", 1), ("structured", 1))   # prompts of each kind per 4 taken
_TITLE = re.compile(r"^[A-Za-z][A-Za-z0-9 ,'\-]{1,40}$")
# imperative first words of docstring summaries that read as a task ("Return the sum" -> "returns the sum")
VERBS = frozenset((
    "Add", "Apply", "Build", "Calculate", "Check", "Clear", "Combine", "Compare", "Compute", "Construct", "Convert",
    "Copy", "Count", "Create", "Decode", "Delete", "Determine", "Encode", "Escape", "Extract", "Fill", "Find",
    "Format", "Generate", "Get", "Insert", "Join", "Load", "Make", "Merge", "Normalize", "Parse", "Print", "Produce",
    "Quote", "Read", "Remove", "Replace", "Return", "Returns", "Reverse", "Search", "Sort", "Split", "Strip", "Test",
    "Translate", "Unquote", "Update", "Validate", "Wrap", "Write"))
_SUMMARY = re.compile(r"^[A-Z][a-z]+ [A-Za-z0-9 ,;'`\"\-()\[\]=.*/+<>]{8,160}$")
_SENTENCE = re.compile(r"(?<=\.)\s")


def _quoted(names) -> str:
  names = [f'"{n}"' for n in names]
  return ", ".join(names[:-1]) + f" and {names[-1]}"


def _article(noun: str) -> str:
  return "an" if noun[0] in "aeiou" else "a"


def prose_prompts(wiki_root: str = "") -> list[str]:
  """A prose task per Wikipedia article whose lead names its subject (`_subject`), templates turning over them."""
  subjects = [s for s in map(_subject, wiki.read(wiki_root)) if s]
  return [PROSE_TEMPLATES[i % len(PROSE_TEMPLATES)].format(s) for i, s in enumerate(subjects)]


def _subject(doc) -> str | None:
  """How the article names its subject: 'a lawn mower' (its lead says "A lawn mower is"), 'Nigeria', 'okra' (the
  title lower-cased where the lead writes it so); None for titles the lead does not open with."""
  title, _, lead = doc.text.partition("\n\n")
  if not _TITLE.match(title):
    return None
  article = re.match(r"(A|An|The) (" + re.escape(title) + r")\b", lead, re.I)
  if article:
    return f"{article.group(1).lower()} {article.group(2)}"
  if not lead.startswith(title):
    return None
  lower = title[0].lower() + title[1:]
  return lower if lower in lead[len(title):] else title


def _third_person(summary: str) -> str:
  """'Return the sum.' -> 'returns the sum': a docstring's imperative first sentence, as the benchmark words tasks."""
  verb, rest = summary.rstrip(".").split(" ", 1)
  verb = verb.lower()
  if not verb.endswith("s"):
    verb = (verb[:-1] + "ies" if verb.endswith("y") and verb[-2] not in "aeiou"
            else verb + ("es" if verb.endswith(("sh", "ch", "x")) else "s"))
  return f"{verb} {rest}"


def _function_task(node: ast.FunctionDef) -> str | None:
  doc = ast.get_docstring(node)
  args = node.args
  if not doc or node.name.startswith("_") or args.vararg or args.kwarg or args.kwonlyargs:
    return None
  summary = _SENTENCE.split(" ".join(doc.split("\n\n", 1)[0].split()), 1)[0]
  names = [a.arg for a in args.posonlyargs + args.args if a.arg not in ("self", "cls")]
  if not _SUMMARY.match(summary) or summary.split(" ", 1)[0] not in VERBS or not 1 <= len(names) <= 4:
    return None
  return (f"Write a Python function `{node.name}({', '.join(names)})` that {_third_person(summary)}. "
          "Reply with only the code.")


def code_prompts(root: str = "") -> list[str]:
  """A task per public function or method (of a top-level class) of the standard library (or `root`) whose
  docstring opens with an imperative one-sentence summary (`VERBS`), in file order."""
  found, seen = [], set()
  for path, _ in python_code.source_paths(root):
    try:
      with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
      continue
    nodes = tree.body + [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body]
    for node in nodes:
      task = _function_task(node) if isinstance(node, ast.FunctionDef) else None
      if task and task not in seen:
        seen.add(task)
        found.append(task)
  return found


def structured_prompts() -> list[str]:
  """JSON objects, JSON arrays and CSV tables over every three- and four-field choice of each record's fields."""
  found = []
  for (one, many, fields), size in itertools.product(RECORDS, (3, 4)):
    for i, chosen in enumerate(itertools.combinations(fields, size)):
      count = COUNTS[i % len(COUNTS)]
      found += [
          f"Return a JSON object describing {_article(one)} {one} with the keys {_quoted(chosen)}. "
          "Reply with only the JSON.",
          f"Return a JSON array of {count} objects, each with the keys {_quoted(chosen)}, for {count} {many}. "
          "Reply with only the JSON.",
          f"Write a CSV table with the header row {','.join(chosen)} and {count} rows of {many}. "
          "Reply with only the CSV.",
      ]
  return found


@functools.lru_cache(maxsize=2)
def _pools(wiki_root: str, code_root: str) -> dict[str, tuple[str, ...]]:
  held_out = holdout.benchmark_shingles()
  pools = {"prose": prose_prompts(wiki_root), "code": code_prompts(code_root), "structured": structured_prompts()}
  return {kind: tuple(p for p in prompts if not holdout.overlaps(p, held_out)) for kind, prompts in pools.items()}


def take_in_turns(pools, shares, n: int, seed: int) -> list[str]:
  """n items, pool i taking shares[i] of every sum(shares) turns, each pool seeded-shuffled (one generator, pools in
  order); a pool that runs out leaves its turns to the others."""
  if n > sum(map(len, pools)):  # callers name their pools in their own error; this guards the loop below
    raise ValueError(f"take_in_turns: asked for {n} items, the pools hold {sum(map(len, pools))}")
  rng = np.random.default_rng(seed)
  queues = [collections.deque(pool[i] for i in rng.permutation(len(pool))) for pool in pools]
  turns = [i for i, share in enumerate(shares) for _ in range(share)]
  taken = []
  for turn in itertools.cycle(turns):
    if len(taken) == n:
      return taken
    if queues[turn]:
      taken.append(queues[turn].popleft())


def task_prompts(n: int, seed: int = 0, wiki_root: str = "", code_root: str = "") -> list[str]:
  """n prompts, prose, code and structured interleaved 2:1:1 (`KIND_SHARES`), each kind seeded-shuffled; a kind
  that runs out leaves its turns to the others."""
  if n < 0:
    raise ValueError(f"task_prompts: n must be >= 0, got {n}")
  if n == 0:
    return []
  pools = [_pools(wiki_root, code_root)[kind] for kind, _ in KIND_SHARES]
  if n > sum(map(len, pools)):
    raise ValueError(f"task_prompts: asked for {n} prompts, the packaged text gives {sum(map(len, pools))} "
                     f"({', '.join(f'{kind} {len(pool)}' for (kind, _), pool in zip(KIND_SHARES, pools))})")
  return take_in_turns(pools, [share for _, share in KIND_SHARES], n, seed)
