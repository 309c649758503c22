"""The drafters shipped inside the package: the manifest is true to the files, "shipped" finds the head that fits
the target (and names what ships when none does), the real head drafts well and exactly, and shipping writes
everything or nothing."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.benchmark import plan
from specjax.drafters import registry, shipped
from specjax.drafters.feature_head import FeatureHead
from specjax.training.export import load_drafter, save_drafter
from specjax.training.ship import ship_drafter
from configs import bench_drafters, bench_heads, bench_trees


def test_manifest_is_true_to_the_files():
  entries = shipped.manifest()
  assert {(e["model"], e["kind"]) for e in entries} >= {("smollm2-135m", "feature_head")}
  for entry in entries:
    path = os.path.join(shipped.ROOT, entry["path"])
    assert shipped.directory_bytes(path) == entry["bytes"] <= shipped.MAX_BYTES
    assert "scripts/train_draft.py" in entry["trained_with"]
    assert entry["tokens_per_round"]["all"] > 1.0
    with open(os.path.join(path, "drafter.json"), encoding="utf-8") as f:
      assert json.load(f)["kind"] == entry["kind"]


def test_the_shipped_feature_head_drafts_the_real_model_exactly(smollm2_model):
  head = registry.build("feature_head", smollm2_model, shipped.SHIPPED)
  assert isinstance(head, FeatureHead)
  prompts = ["Write a Python function that returns the squares of a list of numbers.",
             "Explain in two sentences why the sky is blue."]
  greedy = specjax.SamplingParams(temperature=0.0)
  ar = specjax.generate(smollm2_model, prompts, max_new_tokens=32, sampling=greedy, chat=True)
  spec = specjax.generate(smollm2_model, prompts, max_new_tokens=32, sampling=greedy, chat=True, drafter=head, k=4)
  assert spec.tokens == ar.tokens
  # An untrained head drafts nothing the target accepts (1.0 a round); the manifest measured 1.5-2.2 per category.
  assert spec.stats.mean_tokens_per_round > 1.3


def test_no_shipped_drafter_fits_another_target(exactness_target):
  with pytest.raises(ValueError, match=r"no shipped 'feature_head' drafter fits.*shipped: feature_head for "
                                       r"smollm2-135m"):
    registry.build("feature_head", exactness_target, shipped.SHIPPED)
  with pytest.raises(ValueError, match="no shipped 'medusa' drafter fits"):
    registry.build("medusa", exactness_target, shipped.SHIPPED)


def test_benchmark_configs_take_the_shipped_head():
  for config in (bench_drafters.get_config(), bench_trees.get_config(), bench_heads.get_config()):
    assert config.drafter_dirs.feature_head == shipped.SHIPPED
    config.methods = ("ar", "feature_head")
    assert plan.validate_config(config)["methods"] == ("ar", "feature_head")


def test_ship_drafter_writes_the_copy_and_its_entry(tmp_path, exactness_target):
  trained = save_drafter(FeatureHead.create(exactness_target, seed=5), str(tmp_path / "trained"))
  root = str(tmp_path / "shipped")
  kwargs = dict(categories=("code",), prompts_per_category=1, max_new_tokens=8, max_prompt_tokens=64)
  entry = ship_drafter(trained, exactness_target, "tiny", "python scripts/train_draft.py --config=X", root, **kwargs)
  assert (entry["kind"], entry["path"], entry["dtype"]) == ("feature_head", "tiny/feature_head", "bfloat16")
  assert entry["target_shape"] == shipped.target_shape(exactness_target.config)
  assert set(entry["tokens_per_round"]) >= {"all", "code", "k"}
  with open(os.path.join(root, "MANIFEST.json"), encoding="utf-8") as f:
    assert json.load(f)["drafters"] == [entry]
  original = jax.tree.leaves(load_drafter(trained, exactness_target).net.to_pure_dict())
  copy = jax.tree.leaves(load_drafter(os.path.join(root, entry["path"]), exactness_target).net.to_pure_dict())
  assert len(original) == len(copy) > 0
  for a, b in zip(original, copy):  # the copy is the trained parameters rounded to bfloat16
    np.testing.assert_array_equal(np.asarray(b), np.asarray(jnp.asarray(a, jnp.bfloat16).astype(a.dtype)))
  # Shipping again replaces the entry; too large a copy or no command leaves root as it was.
  again = ship_drafter(trained, exactness_target, "tiny", "python scripts/train_draft.py --config=Y", root, **kwargs)
  before = sorted(os.listdir(root)), open(os.path.join(root, "MANIFEST.json"), encoding="utf-8").read()
  assert json.loads(before[1])["drafters"] == [again]
  with pytest.raises(ValueError, match="shipped drafters stay under"):
    ship_drafter(trained, exactness_target, "other", "python x", root, max_bytes=1000, **kwargs)
  with pytest.raises(ValueError, match="command must say how the drafter was trained"):
    ship_drafter(trained, exactness_target, "other", " ", root, **kwargs)
  assert (sorted(os.listdir(root)), open(os.path.join(root, "MANIFEST.json"), encoding="utf-8").read()) == before
