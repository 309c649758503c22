"""The engine: one round's phases (`round`), the adaptive round (`adaptive`) and the compiled programs
(`programs`), over the `DecodeState` (`state`). Everything that runs a generation composes these."""

from specjax.engine.adaptive import adaptive_round
from specjax.engine.programs import (decode_program, features_program, params_for, prefill_for, prefill_program, run,
                                     score_call, score_program, traced)
from specjax.engine.round import (accept_and_commit, accept_drafts, draft, init_drafter, prefill, sample_tokens, score,
                                  speculative_round, target_features, verify, verify_inputs)
from specjax.engine.state import DecodeState, budget_spent, is_eos, round_keys, row_keys, unfinished, with_budget
