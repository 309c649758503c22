"""Drafters: one protocol (`Drafter`), one module per method."""

from specjax.drafters.base import Drafter, TargetFeatures
from specjax.drafters.block_drafter import BlockDrafter, BlockDrafterConfig
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.feature_head import FeatureHead, FeatureHeadConfig
from specjax.drafters.layer_skip import LayerSkip
from specjax.drafters.medusa import MedusaConfig, MedusaHeads
from specjax.drafters.prompt_lookup import PromptLookup
from specjax.drafters.truncated import truncated_model
from specjax.drafters.quantized import QuantizedDraft
