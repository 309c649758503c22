"""Large host buffers on transparent huge pages, for processes that allocate them again and again (the server).

XLA:CPU gives every program call fresh output buffers; glibc maps each one above 32 MB anew and the kernel faults it
in 4 KB at a time. Measured on SmolLM2's 16-row KV cache (1.5 GB): zeroing it 0.75 s, 0.09 s on 2 MB pages. glibc
takes its tunables only at process start, so `relaunch_with_huge_pages` re-executes the process once with them.
"""

import os
import sys

TUNABLE = "glibc.malloc.hugetlb=1"   # glibc >= 2.35: malloc advises huge pages for what it maps (older: ignored)
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_ENABLED) -> str:
  """The kernel's transparent-huge-page mode ("always", "madvise" or "never"; "" where it has none)."""
  try:
    with open(path) as f:
      text = f.read()
  except OSError:
    return ""
  return text[text.find("[") + 1:text.find("]")] if "[" in text else ""


def huge_page_env(environ: dict, mode: str) -> dict | None:
  """The environment that asks glibc for huge pages, or None where nothing needs changing (the kernel backs every
  mapping with them anyway, has none, or the tunable is set already)."""
  tunables = environ.get("GLIBC_TUNABLES", "")
  if mode != "madvise" or TUNABLE.split("=")[0] in tunables:
    return None
  return {**environ, "GLIBC_TUNABLES": f"{tunables}:{TUNABLE}" if tunables else TUNABLE}


def relaunch_with_huge_pages() -> None:
  """Re-executes this script (same pid, argv and interpreter) with `huge_page_env`, when it changes anything; call
  first thing in a script's main module. SPECJAX_HUGE_PAGES=0 turns it off."""
  if os.environ.get("SPECJAX_HUGE_PAGES", "1") == "0":
    return
  env = huge_page_env(dict(os.environ), thp_mode())
  if env is not None:
    os.execve(sys.executable, [sys.executable] + sys.argv, env)
