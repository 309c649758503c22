"""A peer in the same run: HF transformers `generate` (autoregressive and prompt lookup) on the same GGUF file and
the same prompt token ids. Imports torch / transformers only here, only when asked; batch 1 only (transformers'
assisted generation, which prompt lookup uses, supports batch 1)."""

import importlib.util
import os
import time
import warnings

from specjax.benchmark import metrics, quality


def available(c: dict):
  """A runner when torch and transformers are installed, else None (with a warning): the table then has no peer."""
  missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
  if missing:
    warnings.warn(f"peers='hf' skipped: {', '.join(missing)} not installed")
    return None
  return HFPeer(c)


def gguf_path(model: str) -> str:
  from specjax.checkpoints.load import KNOWN_MODELS, resolve_known_model
  path = resolve_known_model(model) if model.lower() in KNOWN_MODELS else model
  if not path.endswith(".gguf"):
    raise ValueError(f"the peers read GGUF files; config.model={model!r} is not one")
  return path


class HFPeer:

  def __init__(self, c: dict):
    self.c = c
    self.path = gguf_path(c["model"])
    self.temperatures = c["temperatures"]
    self.ks = c["ks"]

  def units(self) -> int:
    return len(self.c["categories"]) * len(self.temperatures) * (1 + len(self.ks))

  def _load(self):
    import torch
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(self.path), gguf_file=os.path.basename(self.path), dtype=torch.float32)
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.dirname(self.path),
                                                           gguf_file=os.path.basename(self.path))
    return model.eval(), tokenizer

  def run(self, suite, prompt_ids, on_unit, info, decode=None) -> list[dict]:
    import torch
    model, tokenizer = self._load()
    eos = model.generation_config.eos_token_id
    eos = [eos] if isinstance(eos, int) else list(eos or [])

    def generate(ids, temperature, k):
      kwargs = dict(max_new_tokens=self.c["max_new_tokens"], pad_token_id=eos[0] if eos else 0,
                    eos_token_id=eos if self.c.get("stop_at_eos", True) else None, top_k=0, top_p=1.0)
      if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature)
      else:
        kwargs.update(do_sample=False, temperature=None)
      if k:
        kwargs["prompt_lookup_num_tokens"] = k
      inputs = torch.tensor([ids])
      start = time.perf_counter()
      with torch.no_grad():
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), **kwargs)
      wall = time.perf_counter() - start
      new = out[0, inputs.shape[1]:].tolist()
      return wall, new

    first = next(iter(prompt_ids.values()))[0]
    generate(first, 0.0, 0)  # warm-up (allocations, lazy init); not timed
    records = []
    for temperature in self.temperatures:
      for category, ids_list in prompt_ids.items():
        for k in (0,) + tuple(self.ks):
          torch.manual_seed(self.c.get("seed", 0))
          calls, scores = [], []
          for i, ids in enumerate(ids_list):
            wall, new = generate(ids, temperature, k)
            calls.append({"wall_s": wall, "new_tokens": [len(new)], "accepted": [], "k": k})
            text = tokenizer.decode(new, skip_special_tokens=True)
            scores.append(quality.score(category, text, suite[category][i], self.c.get("execute_code", True)))
          summary = metrics.summarize_calls(calls, k)
          records.append({"method": "hf_prompt_lookup" if k else "hf_ar", "k": k, "batch_size": 1,
                          "category": category, "temperature": temperature, "implementation": "hf",
                          **summary, "tokens_per_round": None, "acceptance_rate": None, "alpha": None,
                          "draft_ms_per_round": None, "verify_ms_per_round": None, "accept_ms_per_round": None,
                          "speedup_vs_ar": None, "predicted_speedup": None,
                          "quality": quality.aggregate(category, scores),
                          "transformers_version": __import__("transformers").__version__,
                          "torch_version": torch.__version__, "torch_threads": torch.get_num_threads(), **info})
          on_unit()
    return records
