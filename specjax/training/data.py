"""The training corpus with the target's view of it: token sequences, the target's final hidden states (its
distribution at every position, through its head) and residual streams of chosen layers, stored in float16 and
cached on disk (the features memory-mapped, specjax.training.feature_store); and the deterministic batch order (a
function of the step, so a resumed run sees the same data)."""

import dataclasses
import hashlib
import json
import os
import shutil
import time

import jax.numpy as jnp
import numpy as np
import tqdm

from specjax.engine import features_program
from specjax.model import Model
from specjax.spec import TargetSpec
from specjax.training.corpus import (GENERATION_FIELDS, CorpusConfig, answer_sets, corpus_tokens, described,
                                     generated_tokens, pool_prompts)
from specjax.training.feature_store import (Donor, forward_rows, open_store, read_layout, report_rate, store_dir,
                                            store_key, stores_of, write_store)


@dataclasses.dataclass
class Corpus:
  tokens: np.ndarray        # [N, T] int32
  mask: np.ndarray          # [N, T] bool, real tokens
  hidden: np.ndarray        # [N, T, D] float16, the target's final-normed hidden states (or memory-mapped RowShards)
  layers: np.ndarray        # [N, T, L, D] float16, residual stream after each of layer_ids (likewise)
  layer_ids: tuple
  heldout: np.ndarray       # [N] bool
  on_policy: np.ndarray     # [N] bool, text the target generated (else standard-library text)
  long: "Corpus | None" = None  # rows of a longer length (`CorpusConfig.long_passage_prompts`), batched apart

  @property
  def train_rows(self) -> np.ndarray:
    return np.flatnonzero(~self.heldout)

  def epoch_rows(self, on_policy_repeats: int = 1) -> np.ndarray:
    """The training rows one epoch reads, each on-policy row `on_policy_repeats` times (the target's own answers
    weighted up against the text)."""
    rows = self.train_rows
    return np.concatenate([rows] + [rows[self.on_policy[rows]]] * (on_policy_repeats - 1))

  @property
  def heldout_rows(self) -> np.ndarray:
    return np.flatnonzero(self.heldout)

  def batch(self, rows, layer_ids=()) -> dict:
    """Device arrays for these rows; `layers` holds only `layer_ids`, in that order."""
    missing = sorted(set(layer_ids) - set(self.layer_ids))
    if missing:
      raise ValueError(f"the corpus holds target layers {self.layer_ids}, not {missing}")
    rows = np.asarray(rows)
    index = [self.layer_ids.index(i) for i in layer_ids]
    return {"tokens": jnp.asarray(self.tokens[rows]), "mask": jnp.asarray(self.mask[rows]),
            "hidden": jnp.asarray(self.hidden[rows]), "layers": jnp.asarray(self.layers[rows][:, :, index])}


def _target_forward(target: Model, tokens_BxT, layer_ids, bf16_gemm: bool = False):
  """Final hidden states and the layers' residual streams of these sequences, float16 (the corpus's storage);
  `bf16_gemm`: the products with bfloat16 operands (`CorpusConfig.feature_gemm`)."""
  features = features_program(target.params, tokens_BxT, spec=TargetSpec(graphdef=target.graphdef, bf16_gemm=bf16_gemm),
                              layer_ids=tuple(layer_ids))
  return features.hidden_BxTxD.astype(jnp.float16), features.layers_BxTxLxD.astype(jnp.float16)


def target_pass(target: Model, tokens_NxT: np.ndarray, layer_ids: tuple, batch_size: int = 8,
                bf16_gemm: bool = False):
  """The target over every sequence (teacher forcing), in memory: hidden [N, T, D] and layers [N, T, L, D],
  float16."""
  start_time = time.perf_counter()
  with tqdm.tqdm(total=tokens_NxT.size, unit="tok", unit_scale=True, desc="target features", leave=False) as bar:
    hidden, layers = forward_rows(lambda t: _target_forward(target, jnp.asarray(t), layer_ids, bf16_gemm), tokens_NxT,
                                  batch_size, lambda n: bar.update(n * tokens_NxT.shape[1]))
  report_rate(tokens_NxT.size, time.perf_counter() - start_time, batch_size, tokens_NxT.shape[1])
  return hidden, layers


def target_fingerprint(target: Model) -> str:
  """Config and a digest of the embedding: a cache made with another checkpoint of the same shape is not reused."""
  embed = np.asarray(target.flat_params()["embed"][:256], np.float32)
  digest = hashlib.sha256(embed.tobytes()).hexdigest()[:16]
  return json.dumps({"config": target.config.to_dict(), "embed": digest}, sort_keys=True)


def _load(path: str) -> dict | None:
  if not os.path.exists(path):
    return None
  with np.load(path) as f:
    return {k: f[k] for k in f.files}


def _save(path: str, arrays: dict) -> dict:
  """np.savez written to a temporary name, then renamed: a crash never leaves a partial cache file."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  partial = path + ".partial.npz"
  np.savez(partial, **arrays)
  os.replace(partial, path)
  return arrays


def _key(*parts) -> str:
  return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def target_digest(target: Model) -> str:
  return hashlib.sha256(target_fingerprint(target).encode()).hexdigest()[:16]


def _donors(cache_dir: str, key: str, layer_ids: tuple, digest: str, seq_len: int) -> list:
  """The whole stores of other token sets in `cache_dir` made by this target with every layer wanted: rows they
  share with the new set are copied, not computed again."""
  donors = []
  for directory in stores_of(cache_dir, "*"):
    layout = read_layout(directory)
    tokens_path = os.path.join(cache_dir, f"tokens-{store_key(directory)}.npz")
    if (store_key(directory) == key or layout is None or not layout.gives_rows_to(digest, seq_len, layer_ids)
        or not os.path.exists(tokens_path)):
      continue
    store = open_store(directory)
    if store is not None:
      donors.append(Donor(_load(tokens_path)["tokens"], *store))
  return donors


def _features(target: Model, tokens_NxT: np.ndarray, layer_ids: tuple, cache_dir: str, key: str,
              bf16_gemm: bool = False) -> tuple:
  """(layer ids held, hidden, layers): the target pass, memory-mapped from a whole store in `cache_dir` that holds
  every wanted layer, else written there (resuming a partial one, copying the rows other stores of this target
  hold) with the union of the wanted layers and those of the stores it then replaces, so alternating configs do not
  recompute each other's."""
  if not cache_dir:
    return (layer_ids, *target_pass(target, tokens_NxT, layer_ids, bf16_gemm=bf16_gemm))
  mine = [(d, read_layout(d), open_store(d)) for d in stores_of(cache_dir, key)]
  for _, layout, store in mine:
    if store is not None and set(layer_ids) <= set(layout.layer_ids):
      return layout.layer_ids, store[1], store[2]
  wanted = tuple(sorted(set(layer_ids).union(*[layout.layer_ids for _, layout, _ in mine if layout is not None])))
  directory = store_dir(cache_dir, key, wanted)
  digest = target_digest(target) + ("-bf16-gemm" if bf16_gemm else "")  # donors only of the same precision
  write_store(directory, tokens_NxT, wanted, lambda t: _target_forward(target, jnp.asarray(t), wanted, bf16_gemm),
              target=digest, donors=_donors(cache_dir, key, wanted, digest, tokens_NxT.shape[1]))
  for superseded, _, _ in mine:
    if superseded != directory:
      shutil.rmtree(superseded)
  layout, hidden, layers = open_store(directory)
  return layout.layer_ids, hidden, layers


def _generation(target: Model, config: CorpusConfig, name: str, prompts: list[str], cache_dir: str) -> dict:
  """The target's answers to `prompts` (`generated_tokens`), from `cache_dir`/{name}-{key}.npz when made before."""
  # n_prompts counts the pool's prompts: it keys the pool's answers only
  fields = {f: getattr(config, f) for f in GENERATION_FIELDS if f != "n_prompts" or name == "generated"}
  key = _key(target_fingerprint(target), fields, prompts)
  path = os.path.join(cache_dir, f"{name}-{key}.npz") if cache_dir else ""
  made = (_load(path) if path else None) or generated_tokens(target, config, prompts)
  if path and not os.path.exists(path):
    _save(path, made)
  return made


def build_corpus(target: Model, config: CorpusConfig, layer_ids=(), cache_dir: str = "") -> Corpus:
  """The corpus for `target`, from `cache_dir` when it was made before (the generated text, the whole token set and
  the target's features are cached apart: a config that changes only the other text does not regenerate); with
  long passages, their rows are its `long` corpus, cached as a corpus of their own."""
  main, long = config.parts()
  if long is not None:
    return dataclasses.replace(build_corpus(target, main, layer_ids, cache_dir),
                               long=build_corpus(target, long, layer_ids, cache_dir))
  layer_ids = tuple(sorted(set(layer_ids)))
  fields = described(dataclasses.asdict(config))
  pool = pool_prompts(config)
  tokens_key = _key(target_fingerprint(target), fields, pool)
  tokens_path = os.path.join(cache_dir, f"tokens-{tokens_key}.npz") if cache_dir else ""
  text = _load(tokens_path) if tokens_path else None
  if text is None:
    written = os.path.join(cache_dir, f"self-prompts-{target_digest(target)}-{config.seed}.json") if cache_dir else ""
    answers = [_generation(target, config, name, prompts, cache_dir)
               for name, prompts in answer_sets(config, target, written)]
    text = corpus_tokens(target, config, answers)
  if tokens_path and not os.path.exists(tokens_path):
    _save(tokens_path, text)
  held_ids, hidden, layers = _features(target, text["tokens"], layer_ids, cache_dir, tokens_key,
                                       bf16_gemm=config.feature_gemm == "bfloat16")
  n = len(text["tokens"])
  order = np.random.default_rng(config.seed).permutation(n)
  heldout = np.zeros(n, bool)
  heldout[order[:int(round(n * config.heldout_fraction))]] = True
  return Corpus(tokens=text["tokens"], mask=text["mask"].astype(bool), hidden=hidden, layers=layers,
                layer_ids=tuple(held_ids), heldout=heldout,
                on_policy=text["on_policy"].astype(bool))


def step_rows(rows: np.ndarray, batch_size: int, step: int, seed: int) -> np.ndarray:
  """The rows of training step `step`: epochs of seeded permutations of `rows`, read in order."""
  n = len(rows)
  positions = step * batch_size + np.arange(batch_size)
  epochs, offsets = np.divmod(positions, n)
  perms = {e: np.random.default_rng([seed, int(e)]).permutation(n) for e in np.unique(epochs)}
  return rows[np.array([perms[e][o] for e, o in zip(epochs, offsets)])]
