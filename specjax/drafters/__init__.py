"""Drafters: one protocol (`Drafter`), one module per method."""

from specjax.drafters.base import Drafter, TargetFeatures
from specjax.drafters.draft_model import DraftModel
from specjax.drafters.prompt_lookup import PromptLookup
from specjax.drafters.truncated import truncated_model
