"""Packed float32 weights (`specjax.kernels.packed`): the tile layout, the kernel against float64 products for every
row count it takes, the routing, and a Model's packed view (the engine's CPU programs run on it)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import specjax
from specjax.engine import params_for
from specjax.kernels import build, calibration_cache, linear, packed
from specjax.spec import TargetSpec

needs_kernel = pytest.mark.skipif(not (build.registered() and build.has_avx512()),
                                  reason=f"packed kernel needs the CPU kernels and AVX-512 {build.unavailable_reason()}")
CONFIG = specjax.ModelConfig(vocab_size=100, d_model=40, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=72,
                             max_seq_len=128)


def test_tiles_hold_48_columns_row_after_row_with_a_zero_padded_last_tile():
  w = np.arange(5 * 100, dtype=np.float32).reshape(5, 100)
  tiles = np.asarray(packed.pack(jnp.asarray(w)))
  assert tiles.shape == (3, 5, 48)
  np.testing.assert_array_equal(tiles[1], w[:, 48:96])
  np.testing.assert_array_equal(tiles[2, :, :4], w[:, 96:])
  assert not tiles[2, :, 4:].any()
  np.testing.assert_array_equal(np.asarray(packed.pack_rows(jnp.asarray(w.T))), tiles)  # a table's tiles: of its .T


@needs_kernel
@pytest.mark.parametrize("rows", [1, 2, 8, 9, 10, 17, 33, 64])
@pytest.mark.parametrize("k_dim,n_dim", [(576, 200), (7, 1), (1100, 49), (64, 48)])
def test_kernel_matches_float64_products(rows, k_dim, n_dim):
  """Every group size (1..9 rows, balanced), a partial last tile (masked lanes), widths under one tile, and K past
  the kernel's block of 1024 rows (blocks accumulate)."""
  rng = np.random.default_rng(rows * 7 + k_dim)
  x = rng.standard_normal((rows, k_dim)).astype(np.float32)
  w = rng.standard_normal((k_dim, n_dim)).astype(np.float32)
  weight = packed.PackedKernel(kernel=jnp.asarray(w), tiles=packed.pack(jnp.asarray(w)))
  call = jax.jit(packed.packed_dense)
  assert build.PACKED_TARGET_NAME in call.lower(x, weight).as_text()
  expected = x.astype(np.float64) @ w.astype(np.float64)
  np.testing.assert_allclose(np.asarray(call(x, weight)), expected, rtol=1e-4, atol=1e-3)


@needs_kernel
def test_a_tied_table_is_the_head_and_keeps_its_rows():
  rng = np.random.default_rng(0)
  table = jnp.asarray(rng.standard_normal((300, 40)).astype(np.float32))
  weight = packed.PackedKernel(kernel=table, tiles=packed.pack(table.T), transposed=True)
  x = rng.standard_normal((2, 3, 40)).astype(np.float32)
  got = jax.jit(lambda x, w: packed.dense(x, w))(x, weight)
  assert got.shape == (2, 3, 300)
  np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) @ np.asarray(table, np.float64).T, rtol=1e-4,
                             atol=1e-3)
  assert packed.plain(weight) is table


def test_outside_the_kernel_range_is_xla_dot_on_the_original():
  """65 rows (prefill), bf16 rows and the kernels off take XLA's dot on the original weight, with the same values."""
  rng = np.random.default_rng(1)
  w = jnp.asarray(rng.standard_normal((24, 50)).astype(np.float32))
  weight = packed.PackedKernel(kernel=w, tiles=packed.pack(w))
  lowered = lambda x: jax.jit(packed.packed_dense).lower(x, weight).as_text()
  assert build.PACKED_TARGET_NAME not in lowered(jnp.ones((65, 24), jnp.float32))
  assert build.PACKED_TARGET_NAME not in lowered(jnp.ones((4, 24), jnp.bfloat16))
  with linear.use_kernels(False):
    assert build.PACKED_TARGET_NAME not in lowered(jnp.ones((4, 24), jnp.float32))
  x = rng.standard_normal((65, 24)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(jax.jit(packed.packed_dense)(x, weight)), x @ np.asarray(w), rtol=1e-5,
                             atol=1e-4)


@needs_kernel
def test_the_kernel_names_operands_that_disagree():
  call = lambda x, tiles, n: jax.ffi.ffi_call(build.PACKED_TARGET_NAME, jax.ShapeDtypeStruct((x.shape[0], n),
                                                                                            jnp.float32))(x, tiles)
  with pytest.raises(Exception, match="disagree on M or K"):
    jax.block_until_ready(call(jnp.ones((2, 8)), jnp.ones((1, 9, 48)), 48))
  with pytest.raises(Exception, match="does not match the number of tiles"):
    jax.block_until_ready(call(jnp.ones((2, 8)), jnp.ones((1, 8, 48)), 49))
  with pytest.raises(Exception, match="more rows than the kernel takes"):
    jax.block_until_ready(call(jnp.ones((65, 8)), jnp.ones((1, 8, 48)), 48))


@needs_kernel
def test_packed_view_of_a_model_is_made_once_and_leaves_the_model_alone():
  model = specjax.init_model(CONFIG, seed=3)
  assert packed.view_bytes(model) == 0
  view = params_for(model, TargetSpec(graphdef=model.graphdef))
  assert packed.view_bytes(model) >= model.param_bytes - 4 * CONFIG.d_model * (2 * CONFIG.n_layers + 1)  # not norms
  assert params_for(model, TargetSpec(graphdef=model.graphdef)) is view
  flat = {".".join(map(str, path)): var[...] for path, var in nnx.to_flat_state(view)}
  kinds = {name: type(value).__name__ for name, value in flat.items()}
  assert kinds["embed"] == "PackedKernel" and flat["embed"].transposed  # tied: the head
  assert kinds["layers.0.attn.q.kernel"] == kinds["layers.1.mlp.down.kernel"] == "PackedKernel"
  assert kinds["final_norm.scale"] != "PackedKernel"
  assert all(not isinstance(v, packed.PackedKernel) for v in model.flat_params().values())
  assert params_for(model, TargetSpec(graphdef=model.graphdef, kernels=False)) is model.params


@needs_kernel
def test_generation_on_the_packed_view_is_the_greedy_continuation():
  """Greedy tokens generated on the packed view (prompts longer than the kernel's 64 rows prefill on the original
  weights) are each the argmax of XLA's logits (kernels off, plain weights) over the sequence so far, and the two
  paths' logits agree closely."""
  model = specjax.init_model(CONFIG, seed=4)
  prompts = [list(range(1, 80)), [5, 6, 7]]
  new = specjax.generate(model, prompts, max_new_tokens=12, sampling=specjax.SamplingParams(temperature=0.0)).tokens
  forward = jax.jit(lambda params, t, p, c: nnx.merge(model.graphdef, params)(t, p, c)[0])
  packed_view = params_for(model, TargetSpec(graphdef=model.graphdef))
  for prompt, tokens in zip(prompts, new):
    sequence = jnp.asarray([prompt + tokens], jnp.int32)
    positions = jnp.arange(sequence.shape[1], dtype=jnp.int32)[None]
    with linear.use_kernels(False):
      logits = np.asarray(forward(model.params, sequence, positions, specjax.cache.init_cache(model.config, 1, 128)))
    assert logits[0, len(prompt) - 1:-1].argmax(-1).tolist() == tokens
    tail = sequence[:, -5:], positions[:, -5:]
    cache = specjax.cache.init_cache(model.config, 1, 128)
    with linear.use_kernels(True):
      fast = forward(packed_view, *tail, cache)
    with linear.use_kernels(False):
      slow = forward(model.params, *tail, cache)
    np.testing.assert_allclose(np.asarray(fast), np.asarray(slow), rtol=1e-4, atol=1e-4)


@needs_kernel
def test_sibling_kernels_of_one_input_are_one_packed_call():
  """The packed view keeps q|k|v's and gate|up's tiles in q's and gate's kernel (k, v, up hold none); a layer's
  decode step then makes 4 kernel calls (qkv, o, gate|up, down), and each fused output equals its own matmul, the
  first kernel alone and another alone included."""
  model = specjax.init_model(CONFIG, seed=5)
  view = params_for(model, TargetSpec(graphdef=model.graphdef))
  flat = {".".join(map(str, path)): var[...] for path, var in nnx.to_flat_state(view)}
  hd = CONFIG.d_model // CONFIG.n_heads
  q, k, v = (flat[f"layers.0.attn.{name}.kernel"] for name in "qkv")
  assert q.group == (CONFIG.n_heads * hd, CONFIG.n_kv_heads * hd, CONFIG.n_kv_heads * hd) and k.tiles is v.tiles is None
  assert flat["layers.1.mlp.gate.kernel"].group == (CONFIG.ffn_dim,) * 2
  assert flat["layers.1.mlp.up.kernel"].tiles is None
  assert not flat["layers.0.attn.o.kernel"].group and not flat["layers.0.mlp.down.kernel"].group
  x = np.random.default_rng(0).standard_normal((3, CONFIG.d_model)).astype(np.float32)
  outs = jax.jit(packed.dense_group)(x, [q, k, v])
  for out, w in zip(outs + [jax.jit(packed.dense)(x, q), jax.jit(packed.dense)(x, v)], [q, k, v, q, v]):
    np.testing.assert_allclose(np.asarray(out), x @ np.asarray(w.kernel), rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="are not its first ones in order"):
    packed.dense_group(x, [q, v])
  step = jax.jit(lambda params, t, p, c: nnx.merge(model.graphdef, params)(t, p, c)[0])
  hlo = step.lower(view, jnp.ones((1, 1), jnp.int32), jnp.zeros((1, 1), jnp.int32),
                   specjax.cache.init_cache(model.config, 1, 128)).as_text()
  assert hlo.count(build.PACKED_TARGET_NAME) == 4 * CONFIG.n_layers + 1   # + the tied head


def test_min_rows_is_where_the_packed_kernel_wins_at_every_timed_row_count_from_there_on():
  assert packed.threshold({1: (1.0, 0.9), 5: (1.0, 0.5), 17: (2.0, 1.0)}) == 1
  assert packed.threshold({1: (1.0, 1.1), 5: (1.0, 1.3), 9: (2.0, 1.9), 17: (2.0, 1.0)}) == 9
  assert packed.threshold({1: (1.0, 0.9), 5: (1.0, 1.3), 9: (2.0, 1.9), 17: (2.0, 1.0)}) == 9  # one loss cuts it
  assert packed.threshold({1: (1.0, 1.1), 17: (2.0, 2.5)}) == linear.MAX_ROWS + 1  # past the plain kernel's rows


@needs_kernel
def test_rows_below_min_rows_take_the_plain_kernel(monkeypatch):
  monkeypatch.setenv(packed.MIN_ROWS_ENV, "5")
  rng = np.random.default_rng(2)
  w = jnp.asarray(rng.standard_normal((24, 50)).astype(np.float32))
  weight = packed.PackedKernel(kernel=w, tiles=packed.pack(w))
  four = jax.jit(lambda x, w: packed.dense(x, w)).lower(jnp.ones((4, 24), jnp.float32), weight).as_text()
  five = jax.jit(lambda x, w: packed.dense(x, w)).lower(jnp.ones((5, 24), jnp.float32), weight).as_text()
  assert build.TARGET_NAME in four and build.PACKED_TARGET_NAME not in four
  assert build.PACKED_TARGET_NAME in five
  x = rng.standard_normal((4, 24)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(jax.jit(lambda x, w: packed.dense(x, w))(x, weight)), x @ np.asarray(w),
                             rtol=1e-5, atol=1e-4)
  monkeypatch.setenv(packed.MIN_ROWS_ENV, "0")
  with pytest.raises(ValueError, match="SPECJAX_PACKED_MIN_ROWS='0'"):
    packed.env_min_rows()


@needs_kernel
def test_calibration_times_every_weight_and_sets_the_views_min_rows(monkeypatch, tmp_path):
  """Without $SPECJAX_PACKED_MIN_ROWS the view is timed at each LADDER row count, every packed weight in one pass,
  and its kernels carry the threshold of those times (a static field: programs keyed by it)."""
  monkeypatch.delenv(packed.MIN_ROWS_ENV)
  monkeypatch.setattr(calibration_cache, "_path", lambda: str(tmp_path / "min_rows.json"))
  timed = []
  real = packed.calibrate
  monkeypatch.setattr(packed, "calibrate", lambda ws: timed.append(ws) or real(ws, repeats=1, calls=1))
  monkeypatch.setattr(packed, "threshold", lambda seconds: timed.append(sorted(seconds)) or 9)
  model = specjax.init_model(CONFIG, seed=6)
  view = params_for(model, TargetSpec(graphdef=model.graphdef))
  weights, rows = timed
  assert rows == sorted(packed.LADDER)
  assert len(weights) == 1 + 7 * CONFIG.n_layers    # the tied head and q, k, v, o, gate, up, down of every layer
  assert packed.view_min_rows(view) == 9
  flat = {".".join(map(str, path)): var[...] for path, var in nnx.to_flat_state(view)}
  assert {w.min_rows for w in flat.values() if isinstance(w, packed.PackedKernel)} == {9}
  x = jnp.ones((1, 5, CONFIG.d_model), jnp.float32)
  lowered = jax.jit(lambda x, w: packed.dense(x, w)).lower(x, flat["layers.0.attn.o.kernel"]).as_text()
  assert build.PACKED_TARGET_NAME not in lowered and build.TARGET_NAME in lowered


@needs_kernel
def test_calibration_is_kept_across_processes_by_cpu_kernels_and_shapes(monkeypatch, tmp_path):
  """A later view of the same shapes reads the stored answer instead of timing again; other shapes, an unreadable
  file or $SPECJAX_PACKED_RECALIBRATE time again, and the file stays whole JSON."""
  monkeypatch.delenv(packed.MIN_ROWS_ENV)
  path = tmp_path / "min_rows.json"
  monkeypatch.setattr(calibration_cache, "_path", lambda: str(path))
  timed = []
  monkeypatch.setattr(packed, "calibrate", lambda ws: timed.append(len(ws)) or {1: (2.0, 1.0)})
  views = lambda config, seed: packed.view_min_rows(params_for(specjax.init_model(config, seed=seed),
                                                               TargetSpec(graphdef=specjax.init_model(config).graphdef)))
  assert views(CONFIG, 1) == 1 and len(timed) == 1
  assert views(CONFIG, 2) == 1 and len(timed) == 1           # same shapes, another model: read back
  wider = dataclasses.replace(CONFIG, ffn_dim=CONFIG.ffn_dim * 2)
  assert views(wider, 3) == 1 and len(timed) == 2            # other shapes: timed
  assert len(json.loads(path.read_text())) == 2
  monkeypatch.setenv(calibration_cache.RECALIBRATE_ENV, "1")
  views(CONFIG, 4)
  assert len(timed) == 3
  monkeypatch.delenv(calibration_cache.RECALIBRATE_ENV)
  path.write_text("{not json")
  views(CONFIG, 5)
  assert len(timed) == 4 and len(json.loads(path.read_text())) == 1
