"""How far a trained feature head's agreement with the target carries past the prompts it trained on: teacher-forced
KL and top-1 per draft step on the target's greedy answers to pool prose prompts it trained on, to prompts that
keep a training template or a training subject and change the other, to prompts with both new, and to the
benchmark's held-out prose prompts. A head that learned its templates' phrasing rather than prose shows a gap
between the first set and the rest that the held-out corpus rows (same templates and subjects) do not show."""

from specjax.model import Model
from specjax.training import prompt_pool, task_prompts
from specjax.training.acceptance import greedy_continuations, heldout_prompts, prompt_input, teacher_forced
from specjax.training.objectives import feature_head_objective

# Written for this check; a test keeps them out of every training template and subject and off the benchmark.
NOVEL_TEMPLATES = (
    "Write a letter to your future self about {}.",
    "Write an advertisement for a radio station about {}.",
    "Write the first paragraph of a travel guide about {}.",
    "Describe how {} would look in a painting.",
    "Write a conversation between two friends about {}.",
    "Write a short blog post about {}.",
    "Explain to a tourist why they should see {}.",
    "Write a complaint letter about {}.",
    "Write a bedtime story about {}.",
    "Write a job advert that mentions {}.",
)
NOVEL_SUBJECTS = (
    "a grandmother's sewing box", "a broken elevator", "a city bus driver", "a jar of honey", "a paper boat",
    "a school bus on a snowy road", "an old wooden bridge", "a ferry crossing", "a noisy neighbour's parrot",
    "a pair of hiking boots",
)
# The pool's first 400 prompts (configs' n_prompts) hold every third (template, subject) pair of the first ~53
# subjects; these are among them.
TRAINED_SUBJECTS = prompt_pool.PROSE_SUBJECTS[2:48:5]


def training_templates() -> tuple[str, ...]:
  return prompt_pool.PROSE_TEMPLATES + task_prompts.PROSE_TEMPLATES


def prompt_sets(n: int = 10) -> dict[str, list[str]]:
  """Prose prompts by how much of them the training saw, n each (at most 10 for the novel ones)."""
  prose = set(prompt_pool.prose_prompts())
  trained = [p for p in prompt_pool.training_prompts()[:400] if p in prose]
  templates = prompt_pool.PROSE_TEMPLATES  # the first opens as a benchmark prompt does: new subjects skip it
  return {
      "trained prompts": trained[:n],
      "training template, new subject": [templates[1 + i % (len(templates) - 1)].format(s)
                                         for i, s in enumerate(NOVEL_SUBJECTS[:n])],
      "new template, training subject": [t.format(s) for t, s in zip(NOVEL_TEMPLATES[:n], TRAINED_SUBJECTS)],
      "both new": [t.format(s) for t, s in zip(NOVEL_TEMPLATES[:n], NOVEL_SUBJECTS[::-1])],
  }


def agreement(target: Model, head, n: int = 10, max_new_tokens: int = 64, ttt_steps: int = 3) -> dict:
  """{set name: {"prompts", "kl_1", "top1": [step 1..ttt_steps]}} for a FeatureHead, the benchmark's prose last."""
  objective = feature_head_objective(head, ttt_steps)
  sets = {name: [("prose", prompt_input(target, p)) for p in prompts] for name, prompts in prompt_sets(n).items()}
  sets["benchmark prose"] = heldout_prompts(target, ("prose",), n)
  report = {}
  for name, prompts in sets.items():
    continuations = greedy_continuations(target, prompts, max_new_tokens, objective.layer_ids)
    metrics = teacher_forced(objective, objective.trainable, continuations)
    report[name] = {"prompts": len(prompts), "kl_1": metrics["kl_1"],
                    "top1": [metrics[f"top1_{s}"] for s in range(1, ttt_steps + 1)]}
  return report
