"""Everyday prose prompts, written for training: messages to people, why-and-how questions, stories, tips, product
copy and arguments about ordinary life, beside the 60 task templates over everyday subjects. Wikipedia's titles
(`task_prompts`) are encyclopedic; the benchmark's prose, and what users ask, is mostly everyday, and a head
trained on few phrasings learns them rather than prose (docs/results.md section 52). None of these subjects is the
benchmark's or the generalization check's; any prompt sharing an 8-word run with a benchmark prompt is dropped."""

import functools
import itertools

from specjax.training import holdout
from specjax.training.task_prompts import PROSE_TEMPLATES, take_in_turns

SUBJECTS = (
    "a leaking kitchen tap", "a neighbourhood yard sale", "a forgotten umbrella on a bus", "a first driving lesson",
    "a surprise visit from an old friend", "a lost set of keys", "a cold cup of tea", "a crowded supermarket",
    "a dog that will not stop barking", "a new pair of glasses", "a rainy weekend indoors", "a long queue at the bank",
    "a homemade pizza", "a flat tyre on the way to work", "a quiet Sunday morning", "a noisy washing machine",
    "a child's first lost tooth", "a late train", "a burnt piece of toast", "a walk in the park after rain",
    "a jigsaw puzzle with a missing piece", "a garden shed full of tools", "an alarm clock that did not ring",
    "a picnic interrupted by wasps", "a power bank that ran flat", "a neighbour's apple tree", "a wedding speech",
    "a school reunion", "a tidy desk", "a messy bedroom", "a street food stall", "a pot of soup for a sick friend",
    "a box of old photographs", "a board game night", "a sleepy cat on a windowsill", "a job interview",
    "the last day of summer holidays", "a broken phone screen", "a trip to the dentist", "a snow day off school",
    "a bowl of porridge", "a new haircut", "a slow internet connection", "a long walk home", "a carpool to work",
    "a birthday cake that collapsed", "a borrowed book returned late", "a hospital waiting room", "a fridge magnet",
    "a pair of muddy wellington boots", "a goldfish bowl", "a charity fun run", "a first day at a new school",
    "a lemonade stand", "a weekly shopping list", "a shared flat", "a tired nurse after a night shift",
    "a baby's first steps", "a squeaky door", "a hot summer night", "a fruit bowl", "a missed phone call",
    "a reading lamp", "a power nap", "a handwritten letter", "a grocery delivery", "a laundry day",
    "a kettle boiling", "a weekend market in town", "a car wash", "a thrift shop find", "a cooking class",
    "a chess game with a grandparent", "a house with a red door", "a rooftop at night", "a broken shoelace",
    "a spider in the bathtub", "a scarf knitted by hand", "a family road trip", "a puppy's first walk",
    "a plate of pancakes", "a lunch box", "a train station cafe", "a pen that ran out of ink", "a windy afternoon",
    "a school play", "a neighbour moving away", "a stubborn jar lid", "a fire in the fireplace",
    "a phone left at home", "a bus stop in the rain", "a fresh loaf of bread", "a vegetable patch", "a tennis match",
    "a half-finished painting", "a bakery's morning queue", "a paper airplane", "an overdue library book",
    "a swimming pool on a hot day", "a pile of autumn leaves", "a hammock between two trees", "a stuck zipper",
    "a camping stove", "a homework assignment", "a lost glove", "a recipe from a grandparent", "a flower shop",
    "a marching band", "a parking ticket", "a sunrise over a field", "a pair of old jeans", "a board meeting",
    "a shop that closes early", "a wrong number", "a bag of marbles", "a delayed flight", "a bowl of cherries",
    "a quiet library corner", "a new bookshelf", "a noisy restaurant", "a houseplant that keeps dying",
)
RECIPIENTS = (
    "a neighbour", "your manager", "a teacher", "a cousin", "your landlord", "a coworker", "an old school friend",
    "your grandmother", "a shop owner", "a new colleague", "your team", "a customer", "your sister", "a coach",
    "the head of a club", "a volunteer",
)
PURPOSES = (
    "asking to borrow a ladder", "thanking them for a birthday present", "inviting them to a barbecue",
    "apologising for a missed meeting", "asking to move a meeting to Friday", "sharing news of a new job",
    "asking for advice about a used car", "thanking them for looking after your plants",
    "reminding them about a shared bill", "congratulating them on a graduation", "asking them to turn the music down",
    "inviting them to a board game evening", "asking for a recipe", "saying goodbye before a long trip",
    "offering help with a garden", "asking to swap a work shift", "explaining why a parcel is late",
    "welcoming them to the street", "cancelling a dinner plan", "asking for a reference letter",
    "thanking them for a lift to the airport", "proposing a weekly walk together", "reporting a broken heater",
    "asking to return a borrowed drill", "suggesting a new time for practice", "sharing photos from a holiday",
    "asking about a lost package", "thanking them for a kind review", "planning a surprise party",
    "asking for a day off", "wishing them a quick recovery", "announcing a change of address",
)
MESSAGE_FORMS = (
    "Write a friendly email to {} {}.", "Write a short note to {} {}.", "Write a polite message to {} {}.",
    "Write a text message to {} {}.", "Write a formal letter to {} {}.", "Write a warm voicemail script for {} {}.",
)
QUESTIONS = (
    "why bread goes stale", "why ice floats on water", "how a refrigerator keeps food cold",
    "why onions make people cry", "how a microwave oven heats food", "why cats purr", "how soap removes dirt",
    "why leaves change colour in autumn", "how a compass finds north", "why we get hiccups",
    "how a thermometer works", "why the sea is salty", "how bees make honey", "why metal feels cold to touch",
    "how an umbrella keeps you dry", "why popcorn pops", "how a zip fastener works", "why people yawn",
    "how a battery stores energy", "why dough rises", "how a lock and key work", "why some birds fly south",
    "how recycling turns bottles into new things", "why we need sleep", "how a bicycle pump works",
    "why milk goes sour", "how glasses help people see", "why stars twinkle", "how a kettle knows when to stop",
    "why dogs wag their tails", "how plants drink water", "why the moon changes shape", "how a camera takes a photo",
    "why coffee keeps people awake", "how a fridge magnet sticks", "why rubber bounces", "how a lift works",
    "why we see lightning before thunder", "how a candle burns", "why cheese has holes",
    "how snowflakes form", "why some people are left-handed", "how a phone charges", "why apples turn brown",
    "how a sponge holds water", "why fish do not drown", "how traffic lights are timed", "why salt melts ice",
    "how yoghurt is made", "why hot air rises", "how a calculator adds numbers", "why we have fingerprints",
    "how a vaccine trains the body", "why the wind blows", "how a dam makes electricity", "why babies cry",
    "how glue sticks things together", "why some foods are spicy", "how a parachute slows a fall",
    "why the grass is green", "how a clock keeps time", "why the kettle whistles",
)
QUESTION_FORMS = (
    "Explain {}.", "Explain in simple words {}.", "In two sentences, explain {}.", "Tell a curious child {}.",
    "Write a short paragraph explaining {}.", "Describe step by step {}.", "Explain to a grandparent {}.",
)
PLOTS = (
    "a shy boy joins a choir", "two rivals must share a market stall", "a grandmother learns to use a smartphone",
    "a dog finds its way home across a city", "a nurse helps a stranger on a night train",
    "a family's car breaks down in a small town", "a girl builds a raft for a river race",
    "an old postman delivers his last letter", "a cook loses her sense of taste", "a boy trades his bike for a kite",
    "a teacher's class plants a hundred trees", "a fox and a crow share a winter", "a town loses its only bridge",
    "a student finds a wallet full of foreign coins", "a clockmaker builds a clock that runs backwards",
    "a farmer's scarecrow comes to life", "a retired pilot teaches a child to fly a model plane",
    "a band plays its first concert to an empty hall", "a neighbour's cat keeps visiting the wrong house",
    "a small shop competes with a supermarket", "a family swaps houses for a summer",
    "two friends get lost on a mountain trail", "a painter can only paint in blue", "a robot vacuum escapes",
    "a child writes letters to the moon", "an old sailor teaches knots to a class", "a cyclist finds a lost puppy",
    "a choir sings to save its church hall", "a girl opens a lemonade stand to buy a telescope",
    "a grandfather and grandson fix an old radio",
)
STORY_FORMS = (
    "Write a short story in which {}.", "Tell a story for children in which {}.",
    "Write the opening of a novel in which {}.", "Outline a short film in which {}.",
)
ACTIVITIES = (
    "keeping houseplants alive", "packing for a weekend trip", "saving money on groceries",
    "starting to run in the mornings", "learning to cook rice well", "keeping a tidy desk", "sleeping better",
    "learning a new language", "making friends in a new city", "writing a good cover letter",
    "training a puppy to sit", "choosing a ripe melon", "cutting down on screen time", "studying for an exam",
    "speaking in public without fear", "planning a child's birthday party", "keeping a garden watered in summer",
    "cleaning a cast iron pan", "taking better photos with a phone", "staying warm in winter",
    "organising a small kitchen", "walking a dog in hot weather", "remembering people's names",
    "learning to play the guitar", "reading more books", "packing a healthy lunch", "running a club meeting",
    "preparing for a long flight", "fixing a squeaky hinge", "starting a vegetable garden on a balcony",
)
ADVICE_FORMS = (
    "Give three practical tips for {}.", "Write a short guide to {}.", "List five steps for {}.",
    "Write advice for a beginner on {}.", "Explain the most common mistakes in {}.",
)
PRODUCTS = (
    "a folding camping chair", "a solar phone charger", "a reusable water bottle", "a pair of noise-cancelling "
    "headphones", "a slow cooker", "a child's first tablet", "a standing desk", "an electric toothbrush",
    "a wool winter hat", "a set of kitchen knives", "a smart doorbell", "a travel pillow", "a bread maker",
    "a pair of running shoes", "a garden hose that never tangles", "a desk lamp with a timer", "a board game for "
    "families", "a pet water fountain", "a lightweight tent", "a coffee grinder", "a bird feeder", "a yoga mat",
)
PRODUCT_FORMS = (
    "Write a product description for {}.", "Write an online review of {}.", "Write a short advert for {}.",
)
CLAIMS = (
    "every school should teach cooking", "cities should have more trees", "children should learn to swim early",
    "people should walk more", "shops should close on Sundays", "homework should be shorter",
    "every town needs a swimming pool", "breakfast is the most important meal", "board games beat video games",
    "people should repair things instead of replacing them", "parks should stay open at night",
    "trains are better than planes for short trips", "everyone should learn first aid",
    "museums should be free", "pets make people happier", "handwriting still matters",
    "working four days a week is better", "school uniforms are a good idea", "cooking at home saves money",
    "towns should hold a street party every summer",
)
CLAIM_FORMS = (
    "Write a paragraph arguing that {}.", "Give one reason for and one against the idea that {}.",
    "Write a short opinion piece claiming that {}.",
)


@functools.lru_cache(maxsize=1)
def _families() -> tuple[tuple[str, ...], ...]:
  """Each kind of prompt, every combination of its forms and fillers, benchmark overlaps dropped."""
  held_out = holdout.benchmark_shingles()
  families = (
      [t.format(s) for t, s in itertools.product(PROSE_TEMPLATES, SUBJECTS)],
      [f.format(r, p) for f, r, p in itertools.product(MESSAGE_FORMS, RECIPIENTS, PURPOSES)],
      [f.format(q) for f, q in itertools.product(QUESTION_FORMS, QUESTIONS)],
      [f.format(p) for f, p in itertools.product(STORY_FORMS, PLOTS)],
      [f.format(a) for f, a in itertools.product(ADVICE_FORMS, ACTIVITIES)],
      [f.format(p) for f, p in itertools.product(PRODUCT_FORMS, PRODUCTS)],
      [f.format(c) for f, c in itertools.product(CLAIM_FORMS, CLAIMS)],
  )
  return tuple(tuple(p for p in family if not holdout.overlaps(p, held_out)) for family in families)


def everyday_prompts(n: int, seed: int = 0) -> list[str]:
  """n prompts, the kinds taken in turn (`_families`), each kind seeded-shuffled; a kind that runs out leaves its
  turns to the others."""
  if n < 0:
    raise ValueError(f"everyday_prompts: n must be >= 0, got {n}")
  families = _families()
  if n > sum(map(len, families)):
    raise ValueError(f"everyday_prompts: asked for {n} prompts, the lists give {sum(map(len, families))}")
  return take_in_turns(families, [1] * len(families), n, seed)
