"""The llama.cpp peer's reading of its binaries' output (the binaries themselves are never needed by tests)."""

import pytest

from specjax.benchmark.llama_cpp import parse_completion, parse_speculative

COMPLETION = """\
0.03.175.841 I common_perf_print: prompt eval time =      62.94 ms /    24 tokens (    2.62 ms per token,   381.32 tokens per second)
0.03.175.850 I common_perf_print:        eval time =    2696.87 ms /    95 runs   (   28.39 ms per token,    35.23 tokens per second)
0.03.175.851 I common_perf_print:       total time =    2780.10 ms /   119 tokens
"""
SPECULATIVE = """\
0.03.001.230 I decoded   99 tokens in    1.799 seconds, speed:   55.030 t/s
0.03.001.250 I n_draft   = 4
0.03.001.255 I n_predict = 99
0.03.001.264 I n_drafted = 80
0.03.001.272 I n_accept  = 78
0.03.001.281 I accept    = 97.500%
"""


def test_parses_the_decode_timings():
  assert parse_completion(COMPLETION) == (95, pytest.approx(2.69687))
  assert parse_speculative(SPECULATIVE) == (99, pytest.approx(1.799), 80, 78)


def test_output_without_timings_is_an_error():
  with pytest.raises(RuntimeError, match="no 'eval time' line"):
    parse_completion(COMPLETION.splitlines()[0])
  with pytest.raises(RuntimeError, match="no speculative summary"):
    parse_speculative("error: invalid argument: --draft-max")


@pytest.mark.parametrize("weights, written", [("float", "F32"), ("int8", "Q8_0"), ("q4", None)])
def test_the_peers_target_matches_specjax_targets_weights(tmp_path, weights, written):
  from specjax.benchmark.llama_cpp import BINARIES, LlamaCppPeer
  bin_dir = tmp_path / "bin"
  bin_dir.mkdir()
  for name in BINARIES:  # stand-ins: llama-quantize writes its arguments where the target file goes
    script = '#!/bin/sh\nshift; echo "$@" > "$2"\n' if name == "llama-quantize" else "#!/bin/sh\n"
    (bin_dir / name).write_text(script)
    (bin_dir / name).chmod(0o755)
  gguf = tmp_path / "model.Q4_1.gguf"
  gguf.write_text("blocks")
  peer = LlamaCppPeer({"llama_cpp_dir": str(bin_dir), "output_dir": str(tmp_path / "out"), "weights": weights},
                      str(gguf))
  peer._target()
  if written is None:  # a q4 specjax target: llama.cpp decodes the Q4_1 file itself
    assert peer.target_path == str(gguf) and gguf.read_text() == "blocks"
  else:
    assert peer.target_path == str(tmp_path / "out" / "llama_cpp" / f"target-{written.lower()}.gguf")
    with open(peer.target_path) as f:
      assert f.read().split()[-1] == written
    assert not any(p.name.endswith(".partial") for p in (tmp_path / "out" / "llama_cpp").iterdir())


def test_specjax_over_llama_cpp_compares_decode_rates():
  from specjax.benchmark.runner import _peer_speedups

  def record(method, k, tok_s, decode, implementation="specjax"):
    return {"method": method, "k": k, "batch_size": 1, "category": "code", "temperature": 0.0,
            "implementation": implementation, "throughput_tok_s": tok_s, "decode_tok_s": decode}
  records = [record("ar", 0, 30.0, 40.0), record("quantized:q4", 4, 45.0, 60.0),
             record("quantized:int8", 4, 40.0, 55.0), record("llama_cpp_ar", 0, 32.0, 32.0, "llama_cpp"),
             record("llama_cpp_speculative", 4, 50.0, 50.0, "llama_cpp")]
  _peer_speedups(records)
  ar, speculative = records[3], records[4]
  assert ar["specjax_over_peer"] == pytest.approx(40 / 32)
  assert speculative["specjax_over_peer"] == pytest.approx(60 / 50)
  assert speculative["speedup_vs_own_ar"] == pytest.approx(50 / 32) and ar["speedup_vs_ar"] == pytest.approx(32 / 30)
