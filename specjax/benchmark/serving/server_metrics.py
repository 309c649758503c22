"""The server's own speculation counters, read from its Prometheus `/metrics` before and after the run (vLLM's
`vllm:spec_decode_*` names, which specjax's server exports too): the run's drafts, draft and accepted tokens, and
from them vLLM's result keys `spec_decode_acceptance_rate` (percent) and `spec_decode_acceptance_length`. A server
without them (or without /metrics) gives None."""

import re

import httpx

_SAMPLE = re.compile(r'^(vllm:spec_decode_[a-z_]+?)(?:_total)?(\{[^}]*\})?\s+([-+0-9.eE]+|NaN)$')
_POSITION = re.compile(r'position="(\d+)"')


def parse_spec_counters(text: str) -> dict | None:
  """{"num_drafts", "num_draft_tokens", "num_accepted_tokens", "per_pos": {i: n}} summed over label sets; None
  when the text has no spec_decode counter."""
  found = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0, "per_pos": {}}
  seen = False
  for line in text.splitlines():
    match = _SAMPLE.match(line.strip())
    if not match or line.startswith("#"):
      continue
    name, labels, value = match.group(1)[len("vllm:spec_decode_"):], match.group(2) or "", float(match.group(3))
    if name == "num_accepted_tokens_per_pos":
      position = _POSITION.search(labels)
      if position:
        index = int(position.group(1))
        found["per_pos"][index] = found["per_pos"].get(index, 0) + int(value)
        seen = True
    elif name in found:
      found[name] += int(value)
      seen = True
  return found if seen else None


async def fetch_spec_counters(http: httpx.AsyncClient, base_url: str, headers: dict,
                              timeout_s: float = 10.0) -> dict | None:
  """The counters now (None: no /metrics, no speculation counters, or no answer within timeout_s)."""
  try:
    reply = await http.get(base_url + "/metrics", headers=headers, timeout=timeout_s)
  except httpx.HTTPError:
    return None
  return parse_spec_counters(reply.text) if reply.status_code == 200 else None


def spec_decode_delta(before: dict | None, after: dict | None) -> dict:
  """vLLM's spec_decode_* result keys for the counters' growth over the run ({} when nothing was drafted)."""
  if before is None or after is None:
    return {}
  drafts = after["num_drafts"] - before["num_drafts"]
  drafted = after["num_draft_tokens"] - before["num_draft_tokens"]
  accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
  if drafted <= 0:
    return {}
  positions = sorted(set(before["per_pos"]) | set(after["per_pos"]))
  return {"spec_decode_acceptance_rate": 100.0 * accepted / drafted,
          "spec_decode_acceptance_length": 1 + accepted / drafts if drafts else 0.0,
          "spec_decode_num_drafts": drafts, "spec_decode_draft_tokens": drafted,
          "spec_decode_accepted_tokens": accepted,
          "spec_decode_per_position_acceptance_rates": [
              (after["per_pos"].get(i, 0) - before["per_pos"].get(i, 0)) / drafts if drafts else 0.0
              for i in positions]}
