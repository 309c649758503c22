"""vLLM's command-line spelling for absl flags: `--base-url URL` becomes `--base_url URL`, and a list flag followed by
several words (`--goodput ttft:500 tpot:50`, as vLLM's nargs="+") becomes one comma-separated value. Values are left
as they are; `--flag=value`, underscores and absl's own forms pass through."""


def normalize_argv(argv: list[str], list_flags=("goodput",)) -> list[str]:
  """argv with dashes in flag names turned into underscores and each list flag's following words joined."""
  out = argv[:1]
  rest = list(argv[1:])
  while rest:
    arg = rest.pop(0)
    if arg == "--":
      out += [arg] + rest
      break
    if not arg.startswith("--") or len(arg) == 2:
      out.append(arg)
      continue
    name, eq, value = arg[2:].partition("=")
    name = name.replace("-", "_")
    if name in list_flags and not eq:
      words = []
      while rest and not rest[0].startswith("-"):
        words.append(rest.pop(0))
      out.append(f"--{name}={','.join(words)}")
      continue
    out.append(f"--{name}{eq}{value}")
  return out
