"""The offline training text: what the target itself writes for the training prompt pool (on-policy, as in
DistillSpec), generated with specjax, plus docstrings of the Python standard library (PSF-licensed text that
ships with every Python). Everything becomes fixed-length token sequences with a validity mask."""

import ast
import dataclasses
import functools
import json
import os
import sysconfig

import numpy as np
import tqdm

from specjax.benchmark.tasks import byte_ids
from specjax.generate import generate
from specjax.model import Model
from specjax.sampling import SamplingParams
from specjax.training import shards
from specjax.training.prompt_pool import training_prompts


FEATURE_GEMMS = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class CorpusConfig:
  """How much text to make; the fields (with the target) key the on-disk cache."""

  n_prompts: int = 64              # on-policy sequences, one per training prompt
  max_new_tokens: int = 128
  generate_batch: int = 16
  temperature: float = 0.0         # 0: the target's greedy continuations (what greedy decoding verifies)
  stdlib_sequences: int = 32       # sequences of standard-library docstrings
  seq_len: int = 256
  heldout_fraction: float = 0.1
  seed: int = 0
  text_corpus: str = ""            # a `scripts/build_corpus.py` output directory (its manifest.json) ...
  text_sequences: int = 0          # ... and how many seq_len-token sequences to take from it, spread over its kinds
  passage_prompts: int = 0         # on-policy answers to passage + instruction prompts (`specjax.training.passages`)
  task_prompts: int = 0            # ... and to prose, code and JSON/CSV tasks made from packaged text (`task_prompts`)
  everyday_prompts: int = 0        # ... and to everyday prose prompts (messages, questions, stories: `everyday`)
  self_prompts: int = 0            # ... and to requests the target writes itself (Magpie: `self_prompts`)
  # the target's answers to passages as long as the benchmark's long-context ones (`passages.long_passage_prompts`),
  # packed apart to long_seq_len tokens: `build_corpus` returns them as the corpus's `long` part (when long_seq_len
  # equals seq_len, they join the other rows)
  long_passage_prompts: int = 0
  long_seq_len: int = 832
  # "bfloat16": the feature pass's prefill-shaped products take bfloat16 operands (float32 accumulation), 2x on an
  # AMX CPU, features about 1% off the float32 target's (docs/results.md section 48)
  feature_gemm: str = "float32"

  def __post_init__(self):
    for field in ("passage_prompts", "task_prompts", "everyday_prompts", "self_prompts", "long_passage_prompts"):
      if getattr(self, field) < 0:
        raise ValueError(f"{field} must be >= 0, got {getattr(self, field)}")
    if self.feature_gemm not in FEATURE_GEMMS:
      raise ValueError(f"feature_gemm must be one of {list(FEATURE_GEMMS)}, got {self.feature_gemm!r}")
    if self.long_passage_prompts and self.long_seq_len < self.seq_len:
      raise ValueError(f"long_seq_len ({self.long_seq_len}) must be at least seq_len ({self.seq_len}): the long part "
                       "holds what does not fit a seq_len row")

  def parts(self) -> tuple["CorpusConfig", "CorpusConfig | None"]:
    """(the corpus of seq_len rows, the long part's: only the long passages' answers at long_seq_len, or None)."""
    if not self.long_passage_prompts or self.long_seq_len == self.seq_len:
      return self, None
    long = dataclasses.replace(self, seq_len=self.long_seq_len, n_prompts=0, stdlib_sequences=0, text_sequences=0,
                               passage_prompts=0, task_prompts=0, everyday_prompts=0, self_prompts=0)
    return dataclasses.replace(self, long_passage_prompts=0), long


# Fields added after corpus caches and training runs were first made: each keys a cache or describes a run only when
# set, so the older ones stay valid.
LATER_FIELDS = ("passage_prompts", "task_prompts", "everyday_prompts", "feature_gemm", "long_passage_prompts",
                "long_seq_len", "self_prompts")


def described(fields: dict) -> dict:
  """A corpus config's fields as caches and runs are keyed by: the `LATER_FIELDS` left out where at their default."""
  defaults = {f.name: f.default for f in dataclasses.fields(CorpusConfig)}
  return {k: v for k, v in fields.items() if k not in LATER_FIELDS or v != defaults[k]}


def on_policy_ids(target: Model, prompts: list[str], config: CorpusConfig) -> list[list[int]]:
  """prompt + the target's own continuation, token ids per prompt (chat template when there is a tokenizer; without
  one, bytes, of which a prompt too long for the target's context with the answer keeps its end)."""
  chat = target.tokenizer is not None
  if not chat:
    room = max(target.config.max_seq_len - config.max_new_tokens, 1)
    prompts = [byte_ids(p, target.config.vocab_size, 0)[-room:] for p in prompts]
  sequences = []
  sampling = SamplingParams(temperature=config.temperature)
  for start in tqdm.trange(0, len(prompts), config.generate_batch, desc="on-policy text", leave=False):
    batch = prompts[start:start + config.generate_batch]
    result = generate(target, batch, max_new_tokens=config.max_new_tokens, sampling=sampling, chat=chat,
                      seed=config.seed + start)
    sequences += [p + t for p, t in zip(result.prompt_tokens, result.tokens)]
  return sequences


@functools.lru_cache(maxsize=4)
def stdlib_docstrings(max_chars: int) -> str:
  """Module, class and function docstrings of the standard library's top-level modules, in file-name order."""
  root = sysconfig.get_paths()["stdlib"]
  pieces, total = [], 0
  for name in sorted(os.listdir(root)):
    if not name.endswith(".py") or name.startswith("_"):
      continue
    try:
      with open(os.path.join(root, name), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    except (SyntaxError, UnicodeDecodeError, OSError):
      continue
    for node in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]:
      doc = ast.get_docstring(node)
      if doc and len(doc) > 80:
        pieces.append(doc)
        total += len(doc) + 2
        if total >= max_chars:
          return "\n\n".join(pieces)
  return "\n\n".join(pieces)


def stdlib_ids(target: Model, n_sequences: int, seq_len: int) -> list[list[int]]:
  """n_sequences windows of seq_len tokens of standard-library docstrings."""
  if n_sequences == 0:
    return []
  text = stdlib_docstrings(max_chars=n_sequences * seq_len * 6)
  ids = (target.tokenizer.encode(text) if target.tokenizer is not None
         else byte_ids(text, target.config.vocab_size, 0))
  return [ids[i:i + seq_len] for i in range(0, len(ids) - seq_len + 1, seq_len)][:n_sequences]


@functools.lru_cache(maxsize=4)
def text_token_counts(target: Model, max_chars: int = 2_000_000) -> np.ndarray:
  """Token frequencies [V] in a broad text (standard-library docstrings), tokenized only: no target pass."""
  text = stdlib_docstrings(max_chars)
  ids = target.tokenizer.encode(text) if target.tokenizer is not None else byte_ids(text, target.config.vocab_size, 0)
  return np.bincount(np.asarray(ids, np.int64), minlength=target.config.vocab_size)


def pack(sequences: list[list[int]], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
  """tokens [N, seq_len] (each sequence cut to seq_len, zero padded) and the mask of real tokens."""
  tokens_NxT = np.zeros((len(sequences), seq_len), np.int32)
  mask_NxT = np.zeros((len(sequences), seq_len), bool)
  for row, ids in enumerate(sequences):
    ids = ids[:seq_len]
    tokens_NxT[row, :len(ids)] = ids
    mask_NxT[row, :len(ids)] = True
  return tokens_NxT, mask_NxT


def text_corpus_sequences(directory: str, n: int, seq_len: int, seed: int) -> list[list[int]]:
  """n sequences of seq_len tokens from a built text corpus (`specjax.training.text_corpus`): an equal share per
  kind (chat, prose, code, structured), split among that kind's sources by their tokens; each source's documents
  cut into consecutive seq_len windows and the windows drawn at random (seeded): every sequence is one document's
  text."""
  path = os.path.join(directory, "manifest.json")
  if not os.path.exists(path):
    raise FileNotFoundError(f"no text corpus at {directory!r} (its manifest.json is missing); build one with "
                            "python scripts/build_corpus.py --config=configs/build_corpus.py")
  with open(path) as f:
    manifest = json.load(f)
  rng = np.random.default_rng(seed)
  kinds = sorted(manifest["tokens_by_kind"])
  sequences = []
  for kind_index, kind in enumerate(kinds):
    sources = [e for e in manifest["sources"] if e["kind"] == kind]
    share = n // len(kinds) + (kind_index < n % len(kinds))
    counts = [share * e["tokens"] // sum(e["tokens"] for e in sources) for e in sources]
    counts[0] += share - sum(counts)
    for entry, wanted in zip(sources, counts):
      windows = []
      for shard in shards.existing_shards(os.path.join(directory, entry["directory"])):
        for document in shards.read_documents(shard["path"]):
          windows += [document[s:s + seq_len] for s in range(0, len(document) - seq_len // 4, seq_len)]
      if len(windows) < wanted:
        raise ValueError(f"the text corpus's source {entry['name']!r} holds {len(windows)} windows of {seq_len} "
                         f"tokens, fewer than the {wanted} asked of it")
      sequences += [windows[j].astype(np.int64).tolist() for j in rng.choice(len(windows), wanted, replace=False)]
  return sequences


# The fields the on-policy text depends on (with the target and the prompts): the rest of the corpus can change
# without regenerating it.
GENERATION_FIELDS = ("n_prompts", "max_new_tokens", "generate_batch", "temperature", "seed", "seq_len")


def pool_prompts(config: CorpusConfig) -> list[str]:
  """The first n_prompts of the training prompt pool."""
  prompts = training_prompts()
  if config.n_prompts > len(prompts):
    raise ValueError(f"n_prompts={config.n_prompts} but the training prompt pool has {len(prompts)} prompts")
  return prompts[:config.n_prompts]


def generated_tokens(target: Model, config: CorpusConfig, prompts: list[str] | None = None) -> dict:
  """{"tokens", "mask"} of the target's answers to `prompts` (default: `pool_prompts`) alone, packed to seq_len."""
  prompts = pool_prompts(config) if prompts is None else prompts
  sequences = on_policy_ids(target, prompts, config) if prompts else []
  tokens, mask = pack(sequences, config.seq_len)
  return {"tokens": tokens, "mask": mask}


def answer_sets(config: CorpusConfig, target: Model, self_prompts_path: str = "") -> list[tuple[str, list[str]]]:
  """The prompt sets the target answers (on-policy rows), in corpus order, each named for its cache file: the pool,
  then `passage_prompts` (`specjax.training.passages`), then `task_prompts` (`specjax.training.task_prompts`), then
  `everyday_prompts` (`specjax.training.everyday`), then `self_prompts` (the target's own requests, written once
  into self_prompts_path), then `long_passage_prompts` (in the long part only, `CorpusConfig.parts`)."""
  from specjax.training.everyday import everyday_prompts
  from specjax.training.passages import long_passage_prompts, passage_prompts  # passages.py reads this module
  from specjax.training.self_prompts import self_prompts
  from specjax.training.task_prompts import task_prompts
  sets = [("generated", pool_prompts(config))]
  if config.passage_prompts:
    sets.append(("passages", passage_prompts(config.passage_prompts, config.seed)))
  if config.task_prompts:
    sets.append(("tasks", task_prompts(config.task_prompts, config.seed)))
  if config.everyday_prompts:
    sets.append(("everyday", everyday_prompts(config.everyday_prompts, config.seed)))
  if config.self_prompts:
    sets.append(("self", self_prompts(target, config.self_prompts, config.seed, self_prompts_path)))
  if config.long_passage_prompts:
    sets.append(("long-passages", long_passage_prompts(config.long_passage_prompts, config.seed)))
  return sets


def corpus_tokens(target: Model, config: CorpusConfig, answers: list[dict] | None = None) -> dict:
  """{"tokens", "mask", "on_policy"} arrays over all sequences (on-policy first, `answer_sets` in order; then standard
  library, then the text corpus); `answers` are `generated_tokens`' outputs for `answer_sets` when made before."""
  if answers is None:
    answers = [generated_tokens(target, config, prompts) for _, prompts in answer_sets(config, target)]
  generated = {name: np.concatenate([a[name] for a in answers]) for name in ("tokens", "mask")}
  library = stdlib_ids(target, config.stdlib_sequences, config.seq_len)
  if config.text_sequences:
    library += text_corpus_sequences(config.text_corpus, config.text_sequences, config.seq_len, config.seed)
  library_tokens, library_mask = pack(library, config.seq_len)
  tokens = np.concatenate([generated["tokens"].astype(np.int32), library_tokens])
  mask = np.concatenate([generated["mask"].astype(bool), library_mask])
  on_policy = np.arange(len(tokens)) < len(generated["tokens"])
  return {"tokens": tokens, "mask": mask, "on_policy": on_policy}
