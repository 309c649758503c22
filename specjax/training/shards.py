"""Token shards on disk: each `.npz` holds a run of documents' tokens (each document ended by EOS) and where each
document starts. Written to a temporary name and renamed, so a shard on disk is always whole; a build that stops
resumes after its last shard."""

import glob
import os

import numpy as np


def token_dtype(vocab_size: int):
  return np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32


def shard_path(directory: str, index: int) -> str:
  return os.path.join(directory, f"shard-{index:05d}.npz")


def write_shard(path: str, documents: list[list[int]], dtype) -> int:
  """Writes the documents' tokens; returns the token count."""
  lengths = np.array([len(d) for d in documents], np.int64)
  tokens = np.fromiter((t for d in documents for t in d), dtype=dtype, count=int(lengths.sum()))
  starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
  tmp = path + ".tmp.npz"
  np.savez(tmp, tokens=tokens, doc_starts=starts)
  os.replace(tmp, path)
  return int(tokens.size)


def existing_shards(directory: str) -> list[dict]:
  """[{path, documents, tokens}] of the whole shards in `directory`, in order (temporary files ignored)."""
  found = []
  for path in sorted(glob.glob(os.path.join(directory, "shard-*.npz"))):
    if path.endswith(".tmp.npz"):
      continue
    with np.load(path) as shard:
      found.append({"path": path, "documents": int(shard["doc_starts"].size), "tokens": int(shard["tokens"].size)})
  return found


def read_documents(path: str) -> list[np.ndarray]:
  """The documents of one shard, as token arrays."""
  with np.load(path) as shard:
    tokens, starts = shard["tokens"], shard["doc_starts"]
  return np.split(tokens, starts[1:]) if starts.size else []
