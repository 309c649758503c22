"""The paper-scale configs: every size traced to its source, the parameter counts the papers publish, and
settings that the AOT script accepts."""

import importlib

import pytest

from specjax.aot.settings import settings_from_config
from specjax.config import ModelConfig
from specjax.sharding import check_divides, parse_mesh_shape


def _config(name):
  return importlib.import_module(f"configs.{name}").get_config()


def test_chinchilla_matches_hoffmann_table_4_and_chen_section_3():
  settings = settings_from_config(_config("chinchilla_70b_4b"))
  target, draft = settings.target, settings.draft
  assert (target.n_layers, target.d_model, target.n_heads, target.head_dim_) == (80, 8192, 64, 128)
  assert target.param_count() == pytest.approx(70e9, rel=0.01)
  assert draft.n_layers == 8 and draft.d_model < target.d_model  # "slightly smaller width, only 8 layers"
  assert draft.param_count() == pytest.approx(4e9, rel=0.01)
  assert target.dtype == draft.dtype == "bfloat16" and draft.vocab_size == target.vocab_size == 32000
  data, model = parse_mesh_shape(settings.mesh)
  assert data * model == 16 and settings.topology == "v4:2x2x4"  # 16 v4 chips
  check_divides(target, model, "target")
  check_divides(draft, model, "draft")
  assert settings.k == 4 and settings.batch_size == 1
  assert [r["speedup"] for r in settings.paper["rows"]] == [1.92, 2.01, 2.46]
  assert settings.paper["ar_ms_per_token"] == 14.1


def test_llama3_pair_sizes():
  settings = settings_from_config(_config("llama3_8b_1b"))
  assert settings.target.param_count() == pytest.approx(8.03e9, rel=0.005)
  assert settings.draft.param_count() == pytest.approx(1.24e9, rel=0.005)
  check_divides(settings.target, parse_mesh_shape(settings.mesh)[1], "target")


def test_colab_config_serves_generate_and_aot():
  config = _config("colab_tpu")
  settings = settings_from_config(config)
  assert settings.topology == "v5e:1x1" and parse_mesh_shape(settings.mesh) == (1, 1)
  assert config.model == "smollm2-135m" and config.drafter == "draft_model" and config.dtype == "bfloat16"
  assert settings.draft == settings.target.replace(n_layers=8)  # truncate:8
  assert isinstance(settings.target, ModelConfig)


@pytest.mark.parametrize("name, base", [("llama3_8b_int8_self", "llama3_8b_1b"),
                                        ("chinchilla_70b_int8_self", "chinchilla_70b_4b")])
def test_int8_self_draft_configs_draft_with_the_targets_own_weights(name, base):
  settings, base_settings = settings_from_config(_config(name)), settings_from_config(_config(base))
  assert settings.draft == settings.target == base_settings.target and settings.draft_weights == "int8"
  assert settings.topology == base_settings.topology and settings.mesh == base_settings.mesh
  assert settings.acceptance_rate == 0.958 and settings.paper is None
