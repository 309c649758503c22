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
