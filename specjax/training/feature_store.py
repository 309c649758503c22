"""The target's features on disk as row shards of `.npy` files, read memory-mapped: a corpus larger than memory
trains from it (a batch reads only its own rows), the pass that writes it holds one shard at a time, and a pass that
stops resumes after its last whole shard."""

import dataclasses
import glob
import json
import os
import time

import numpy as np
import tqdm

from specjax.training.files import write_json

_META = "meta.json"


@dataclasses.dataclass(frozen=True)
class StoreLayout:
  """What a store holds: `rows` sequences of `seq_len` tokens, the residual streams of `layer_ids`, in shards of
  `shard_rows` rows."""
  rows: int
  seq_len: int
  layer_ids: tuple
  shard_rows: int

  @property
  def n_shards(self) -> int:
    return -(-self.rows // self.shard_rows)

  def shard_range(self, index: int) -> tuple[int, int]:
    return index * self.shard_rows, min((index + 1) * self.shard_rows, self.rows)


class RowShards:
  """Rows spread over several arrays (memory-mapped shards) read as one: `x[rows]` gathers those rows only."""

  def __init__(self, shards: list):
    self.shards = shards
    self.offsets = np.cumsum([0] + [len(s) for s in shards])
    self.shape = (int(self.offsets[-1]),) + tuple(shards[0].shape[1:])
    self.dtype = shards[0].dtype

  def __len__(self) -> int:
    return self.shape[0]

  def __getitem__(self, rows) -> np.ndarray:
    rows = np.arange(len(self))[rows] if isinstance(rows, slice) else np.asarray(rows)
    if rows.ndim != 1:
      raise IndexError(f"RowShards takes a slice or a 1-D array of rows, got shape {rows.shape}")
    rows = np.where(rows < 0, rows + len(self), rows)
    if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
      raise IndexError(f"rows out of range for {len(self)} rows")
    shard = np.searchsorted(self.offsets, rows, side="right") - 1
    out = np.empty((rows.size,) + self.shape[1:], self.dtype)
    for s in np.unique(shard):
      picked = np.flatnonzero(shard == s)
      out[picked] = self.shards[s][rows[picked] - self.offsets[s]]
    return out

  def __array__(self, dtype=None, copy=None):
    whole = self[:]
    return whole if dtype is None else whole.astype(dtype)


def _shard_paths(directory: str, index: int) -> tuple[str, str]:
  return os.path.join(directory, f"layers-{index:05d}.npy"), os.path.join(directory, f"hidden-{index:05d}.npy")


def _save_npy(path: str, array: np.ndarray) -> None:
  partial = path + ".partial.npy"
  np.save(partial, array)
  os.replace(partial, path)


def read_layout(directory: str) -> StoreLayout | None:
  path = os.path.join(directory, _META)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    meta = json.load(f)
  return StoreLayout(rows=meta["rows"], seq_len=meta["seq_len"], layer_ids=tuple(meta["layer_ids"]),
                     shard_rows=meta["shard_rows"])


def whole_shards(directory: str, layout: StoreLayout) -> int:
  """How many leading shards are on disk whole (a shard's hidden file is renamed into place last)."""
  n = 0
  while n < layout.n_shards and os.path.exists(_shard_paths(directory, n)[1]):
    n += 1
  return n


def open_store(directory: str) -> tuple[StoreLayout, RowShards, RowShards] | None:
  """(layout, hidden [N, T, D], layers [N, T, L, D]) memory-mapped, or None when the store is missing or partial."""
  layout = read_layout(directory)
  if layout is None or whole_shards(directory, layout) < layout.n_shards:
    return None
  layers, hidden = zip(*[[np.load(p, mmap_mode="r") for p in _shard_paths(directory, i)]
                         for i in range(layout.n_shards)])
  return layout, RowShards(list(hidden)), RowShards(list(layers))


def forward_rows(forward, tokens_NxT: np.ndarray, batch_size: int, done=lambda n: None) -> tuple:
  """`forward(tokens_BxT) -> (hidden, layers)` over every row in batches of `batch_size` (the last one padded);
  `done(n)` after each batch of n real rows. Returns (hidden [N, ...], layers [N, ...]) as numpy arrays."""
  n = len(tokens_NxT)
  tokens = np.concatenate([tokens_NxT, np.zeros((-n % batch_size,) + tokens_NxT.shape[1:], tokens_NxT.dtype)])
  hidden, layers = [], []
  for start in range(0, len(tokens), batch_size):
    h, l = forward(tokens[start:start + batch_size])
    hidden.append(np.asarray(h))
    layers.append(np.asarray(l))
    done(min(batch_size, n - start))
  return np.concatenate(hidden)[:n], np.concatenate(layers)[:n]


def write_store(directory: str, tokens_NxT: np.ndarray, layer_ids: tuple, forward, shard_rows: int = 512,
                batch_size: int = 8) -> None:
  """Runs `forward(tokens_BxT) -> (hidden, layers)` (float16 arrays) over every row in batches of `batch_size`,
  writing shards of `shard_rows` rows; resumes a store begun with the same rows and layers."""
  layout = StoreLayout(rows=len(tokens_NxT), seq_len=int(tokens_NxT.shape[1]),
                       layer_ids=tuple(int(i) for i in layer_ids), shard_rows=int(shard_rows))
  found = read_layout(directory)
  if found is not None and dataclasses.replace(found, shard_rows=shard_rows) != layout:
    raise ValueError(f"{directory} holds features of {found}, not of {layout}: remove it or use another directory")
  layout = found or layout
  os.makedirs(directory, exist_ok=True)
  if found is None:
    write_json(os.path.join(directory, _META), dataclasses.asdict(layout))
  first = whole_shards(directory, layout)
  todo = sum(b - a for a, b in map(layout.shard_range, range(first, layout.n_shards))) * layout.seq_len
  bar = tqdm.tqdm(total=todo, unit="tok", unit_scale=True, desc="target features", disable=not todo)
  began = time.perf_counter()
  for index in range(first, layout.n_shards):
    start, stop = layout.shard_range(index)
    hidden, layers = forward_rows(forward, tokens_NxT[start:stop], batch_size,
                                  lambda n: bar.update(n * layout.seq_len))
    layers_path, hidden_path = _shard_paths(directory, index)
    _save_npy(layers_path, layers)
    _save_npy(hidden_path, hidden)
  bar.close()
  if todo:
    report_rate(todo, time.perf_counter() - began, batch_size, layout.seq_len,
                f", shards {first}-{layout.n_shards - 1} of {directory}")


def report_rate(tokens: int, seconds: float, batch_size: int, seq_len: int, where: str = "") -> None:
  """Prints the feature pass's tokens a minute (the figure issue 21's corpus target is stated in)."""
  print(f"target features: {tokens} tokens in {seconds:.0f} s ({60 * tokens / max(seconds, 1e-9):.0f} tokens a "
        f"minute, batches of {batch_size} x {seq_len}{where})", flush=True)


def stores_of(cache_dir: str, key: str) -> list[str]:
  """The feature store directories made for token set `key`, whole or not."""
  return sorted(d for d in glob.glob(os.path.join(cache_dir, f"features-{key}-layers-*")) if os.path.isdir(d))


def store_dir(cache_dir: str, key: str, layer_ids: tuple) -> str:
  return os.path.join(cache_dir, f"features-{key}-layers-{'-'.join(map(str, layer_ids))}")
