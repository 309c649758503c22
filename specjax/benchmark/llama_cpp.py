"""A peer in the same run: llama.cpp's own binaries (`scripts/build_llama_cpp.sh`) on the same GGUF pair and the
same prompts. The target is the GGUF file written as f32 (`llama-quantize`, once, into the output directory; Q8_0 for
an int8 specjax target, the file itself for a q4 one: `config.weights`), the draft the file's own quantized blocks,
so the pair is the quantized self-draft's; `llama-completion` decodes
autoregressively, `llama-speculative` with K drafts per round. Batch 1, one process per call; the timings are
llama.cpp's own (decode time, prompt excluded)."""

import os
import re
import subprocess

from specjax.benchmark import metrics

IMPLEMENTATION = "llama_cpp"
TARGET_TYPES = {"float": "F32", "int8": "Q8_0", "q4": None}  # config.weights -> llama-quantize's type (None: as is)
BINARIES = ("llama-completion", "llama-speculative", "llama-quantize")
_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_COUNTS = {name: re.compile(rf"{name}\s*=\s*(\d+)") for name in ("n_drafted", "n_accept")}


def check_dir(directory: str, binaries=BINARIES, needed_by: str = "config.peers='llama_cpp'") -> str:
  """The binaries' directory, or a ValueError naming what is missing and how to build it."""
  directory = os.path.expanduser(directory or "")
  missing = [b for b in binaries if not os.access(os.path.join(directory, b), os.X_OK)]
  if not directory or missing:
    raise ValueError(f"{needed_by} needs config.llama_cpp_dir with {', '.join(binaries)} "
                     f"(missing in {directory!r}: {', '.join(missing)}); build them with "
                     f"bash scripts/build_llama_cpp.sh")
  return directory


def parse_completion(log: str) -> tuple[int, float]:
  """(tokens decoded, seconds) from llama-completion's timings: the last 'eval time' line (not the prompt's)."""
  found = list(_EVAL.finditer(log))
  if not found:
    raise RuntimeError(f"no 'eval time' line in llama-completion's output: {log[-800:]}")
  return int(found[-1].group(2)), float(found[-1].group(1)) / 1e3


def parse_speculative(log: str) -> tuple[int, float, int, int]:
  """(tokens, seconds, drafted, accepted) from llama-speculative's summary."""
  decoded = _DECODED.search(log)
  counts = {name: pattern.search(log) for name, pattern in _COUNTS.items()}
  if decoded is None or None in counts.values():
    raise RuntimeError(f"no speculative summary in llama-speculative's output: {log[-800:]}")
  return (int(decoded.group(1)), float(decoded.group(2)), int(counts["n_drafted"].group(1)),
          int(counts["n_accept"].group(1)))


class LlamaCppPeer:

  def __init__(self, c: dict, gguf_path: str):
    self.c = c
    self.bin = check_dir(c["llama_cpp_dir"])
    self.draft_path = gguf_path
    self.quantize_type = TARGET_TYPES[c["weights"]]  # None: the file is the target as it is
    self.target_type = self.quantize_type or "the file's own blocks"
    self.target_path = (gguf_path if self.quantize_type is None else
                        os.path.join(c["output_dir"], "llama_cpp", f"target-{self.quantize_type.lower()}.gguf"))

  def units(self) -> int:
    return len(self.c["categories"]) * len(self.c["temperatures"]) * (1 + len(self.c["ks"]))

  def _run(self, binary: str, args: list[str]) -> str:
    done = subprocess.run([os.path.join(self.bin, binary), *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
      raise RuntimeError(f"{binary} failed ({done.returncode}): {done.stderr[-800:]}")
    return done.stdout + done.stderr

  def _target(self) -> None:
    """Writes the target file llama-quantize makes of the GGUF (F32 for a float specjax target, Q8_0 for int8)."""
    if not os.path.exists(self.target_path):
      os.makedirs(os.path.dirname(self.target_path), exist_ok=True)
      partial = self.target_path + ".partial"
      self._run("llama-quantize", ["--allow-requantize", self.draft_path, partial, self.quantize_type])
      os.replace(partial, self.target_path)

  def _call(self, text: str, temperature: float, k: int) -> dict:
    threads = str(os.cpu_count() or 1)
    common = ["-p", text, "-n", str(self.c["max_new_tokens"]), "--temp", str(temperature), "--top-k", "0",
              "--top-p", "1.0", "--seed", str(self.c["seed"]), "-t", threads]
    if not self.c["stop_at_eos"]:
      common.append("--ignore-eos")
    if k == 0:
      log = self._run("llama-completion", ["-m", self.target_path, "-no-cnv", "--no-warmup", *common])
      tokens, seconds = parse_completion(log)
      return {"wall_s": seconds, "new_tokens": [tokens], "accepted": [], "k": 0}
    log = self._run("llama-speculative", ["-m", self.target_path, "-md", self.draft_path, "--spec-draft-n-max",
                                          str(k), "--spec-draft-n-min", str(k), "--spec-draft-p-min", "0", "-td",
                                          threads, *common])
    tokens, seconds, drafted, accepted = parse_speculative(log)
    return {"wall_s": seconds, "new_tokens": [tokens], "accepted": [], "k": k, "drafted": drafted,
            "accepted_drafts": accepted}

  def run(self, suite, prompt_ids, on_unit, info, decode=None) -> list[dict]:
    """decode: token ids -> prompt text (special tokens kept), what llama.cpp tokenizes again."""
    if decode is None:
      raise ValueError("the llama.cpp peer needs the target's tokenizer (decode) for the prompts' text")
    self._target()
    records = []
    for temperature in self.c["temperatures"]:
      for category, ids_list in prompt_ids.items():
        for k in (0,) + tuple(self.c["ks"]):
          calls = [self._call(decode(ids), temperature, k) for ids in ids_list]
          drafted = sum(call.get("drafted", 0) for call in calls)
          summary = metrics.summarize_calls(calls, k)
          summary["decode_tok_s"] = summary["throughput_tok_s"]  # llama.cpp's timings are its decoding alone
          records.append({
              "method": "llama_cpp_speculative" if k else "llama_cpp_ar", "k": k, "batch_size": 1,
              "category": category, "temperature": temperature, "implementation": IMPLEMENTATION, **summary,
              "tokens_per_round": None, "alpha": None, "draft_ms_per_round": None, "verify_ms_per_round": None,
              "accept_ms_per_round": None, "speedup_vs_ar": None, "predicted_speedup": None,
              "acceptance_rate": (sum(call.get("accepted_drafts", 0) for call in calls) / drafted if drafted
                                  else None),
              "quality": None, "llama_cpp_dir": self.bin, "llama_cpp_target": self.target_type, **info})
          on_unit()
    return records
