"""The target's features on disk as row shards of `.npy` files, read memory-mapped: a corpus larger than memory
trains from it (a batch reads only its own rows), the pass that writes it holds one shard at a time, a pass that
stops resumes after its last whole shard, and rows another store of the same target already holds are copied from
it instead of computed again."""

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
  `shard_rows` rows, made by the target `target` names (a digest; "" for a store that does not say)."""
  rows: int
  seq_len: int
  layer_ids: tuple
  shard_rows: int
  target: str = ""

  def gives_rows_to(self, target: str, seq_len: int, layer_ids) -> bool:
    """Whether this store's rows can be copied into a store of `target` (a named one) with these rows and layers."""
    return bool(target) and self.target == target and self.seq_len == seq_len and set(layer_ids) <= set(self.layer_ids)

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
                     shard_rows=meta["shard_rows"], target=meta.get("target", ""))


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


@dataclasses.dataclass(frozen=True)
class Donor:
  """A whole store and the token rows it was made from: a new store of the same target copies the rows they share."""
  tokens_NxT: np.ndarray
  layout: StoreLayout
  hidden: RowShards
  layers: RowShards


def _row_sources(donors, layout: StoreLayout) -> dict:
  """{token row as bytes: (donor, row)} over the donors that can give rows to a store of `layout`."""
  sources = {}
  for donor in donors:
    if not donor.layout.gives_rows_to(layout.target, layout.seq_len, layout.layer_ids):
      raise ValueError(f"a donor store of {donor.layout} cannot give rows to one of {layout}")
    for row, tokens in enumerate(np.ascontiguousarray(donor.tokens_NxT, np.int32)):
      sources.setdefault(tokens.tobytes(), (donor, row))
  return sources


def _copy_rows(found: list, layer_ids: tuple) -> tuple:
  """(hidden, layers) of rows found in donors, `found` a list of (donor, row), layers in `layer_ids`' order."""
  hidden, layers = [], []
  for donor, row in found:
    index = [donor.layout.layer_ids.index(i) for i in layer_ids]
    hidden.append(donor.hidden[np.array([row])])
    layers.append(donor.layers[np.array([row])][:, :, index])
  return np.concatenate(hidden), np.concatenate(layers)


def write_store(directory: str, tokens_NxT: np.ndarray, layer_ids: tuple, forward, shard_rows: int = 512,
                batch_size: int = 8, target: str = "", donors=()) -> None:
  """Runs `forward(tokens_BxT) -> (hidden, layers)` (float16 arrays) over every row in batches of `batch_size`,
  writing shards of `shard_rows` rows; resumes a store begun with the same rows and layers. A row some `donors`
  store (made by the same `target`) holds is copied from it, not computed."""
  layout = StoreLayout(rows=len(tokens_NxT), seq_len=int(tokens_NxT.shape[1]),
                       layer_ids=tuple(int(i) for i in layer_ids), shard_rows=int(shard_rows), target=target)
  existing = read_layout(directory)
  if existing is not None and dataclasses.replace(existing, shard_rows=shard_rows) != layout:
    raise ValueError(f"{directory} holds features of {existing}, not of {layout}: remove it or use another directory")
  layout = existing or layout
  os.makedirs(directory, exist_ok=True)
  if existing is None:
    write_json(os.path.join(directory, _META), dataclasses.asdict(layout))
  sources = _row_sources(donors, layout)
  first = whole_shards(directory, layout)
  shard_tokens = lambda i: np.ascontiguousarray(tokens_NxT[slice(*layout.shard_range(i))], np.int32)
  pending = [(i, [sources.get(row.tobytes()) for row in shard_tokens(i)]) for i in range(first, layout.n_shards)]
  todo = sum(found.count(None) for _, found in pending) * layout.seq_len
  bar = tqdm.tqdm(total=todo, unit="tok", unit_scale=True, desc="target features", disable=not todo)
  began = time.perf_counter()
  for index, found in pending:
    start, _ = layout.shard_range(index)
    missing = [i for i, f in enumerate(found) if f is None]
    copied = [i for i, f in enumerate(found) if f is not None]
    parts = []
    if missing:
      parts.append((missing, forward_rows(forward, tokens_NxT[start + np.array(missing)], batch_size,
                                          lambda n: bar.update(n * layout.seq_len))))
    if copied:
      parts.append((copied, _copy_rows([found[i] for i in copied], layout.layer_ids)))
    hidden = np.empty((len(found),) + parts[0][1][0].shape[1:], parts[0][1][0].dtype)
    layers = np.empty((len(found),) + parts[0][1][1].shape[1:], parts[0][1][1].dtype)
    for rows, (part_hidden, part_layers) in parts:
      hidden[rows], layers[rows] = part_hidden, part_layers
    layers_path, hidden_path = _shard_paths(directory, index)
    _save_npy(layers_path, layers)
    _save_npy(hidden_path, hidden)
  bar.close()
  copied_rows = sum(len(found) - found.count(None) for _, found in pending)
  if todo:
    report_rate(todo, time.perf_counter() - began, batch_size, layout.seq_len,
                f", shards {first}-{layout.n_shards - 1} of {directory}")
  if copied_rows:
    print(f"target features: {copied_rows} rows copied from stores that held them", flush=True)


def report_rate(tokens: int, seconds: float, batch_size: int, seq_len: int, where: str = "") -> None:
  """Prints the feature pass's tokens a minute (the figure issue 21's corpus target is stated in)."""
  print(f"target features: {tokens} tokens in {seconds:.0f} s ({60 * tokens / max(seconds, 1e-9):.0f} tokens a "
        f"minute, batches of {batch_size} x {seq_len}{where})", flush=True)


def stores_of(cache_dir: str, key: str) -> list[str]:
  """The feature store directories made for token set `key`, whole or not."""
  return sorted(d for d in glob.glob(os.path.join(cache_dir, f"features-{key}-layers-*")) if os.path.isdir(d))


def store_key(directory: str) -> str:
  """The token-set key a store directory was named for (`store_dir`'s inverse)."""
  return os.path.basename(directory)[len("features-"):].rsplit("-layers-", 1)[0]


def store_dir(cache_dir: str, key: str, layer_ids: tuple) -> str:
  return os.path.join(cache_dir, f"features-{key}-layers-{'-'.join(map(str, layer_ids))}")
