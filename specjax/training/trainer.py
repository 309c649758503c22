"""The optax training loop: AdamW with linear warmup and cosine decay, global-norm clipping, a jitted step,
held-out loss, a tqdm bar, `metrics.jsonl`, and Orbax checkpoints every N steps resumed without losing steps."""

import dataclasses
import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tqdm

from specjax.kernels.linear import bf16_gemm
from specjax.training.checkpointing import TrainCheckpoints, tree_signature
from specjax.training.data import Corpus, step_rows
from specjax.training.objectives import Objective


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  steps: int = 200
  batch_size: int = 8
  learning_rate: float = 1e-3
  warmup_steps: int = 20
  end_lr_fraction: float = 0.1
  weight_decay: float = 0.01
  clip_norm: float = 1.0
  seed: int = 0
  checkpoint_every: int = 50
  keep_checkpoints: int = 2
  log_every: int = 10
  eval_every: int = 0          # held-out loss every N steps (0: before and after only)
  on_policy_repeats: int = 1   # each on-policy training row (the target's own answers) comes this often an epoch
  bf16_gemm: bool = False      # the step's large products on bfloat16 operands (`kernels.linear.bf16_gemm`): 1.6x a
  #                              feature-head step on an AMX CPU; held-out metrics stay float32
  long_every: int = 0          # every N-th step reads long_batch_size rows of the corpus's long part instead (0: never)
  long_batch_size: int = 2

  def __post_init__(self):
    if self.on_policy_repeats < 1:
      raise ValueError(f"on_policy_repeats must be >= 1, got {self.on_policy_repeats}")
    if self.long_every < 0 or self.long_batch_size < 1:
      raise ValueError(f"long_every must be >= 0 and long_batch_size >= 1, got {self.long_every} and "
                       f"{self.long_batch_size}")

  def step_batch(self, corpus: Corpus, rows: np.ndarray, long_rows: np.ndarray, step: int, layer_ids) -> dict:
    """Step `step`'s batch: every long_every-th step's from the long part's epoch rows, the others' from `rows`."""
    if self.long_every and (step + 1) % self.long_every == 0:
      return corpus.long.batch(step_rows(long_rows, self.long_batch_size, step // self.long_every, self.seed),
                               layer_ids)
    return corpus.batch(step_rows(rows, self.batch_size, step, self.seed), layer_ids)


def schedule(config: TrainConfig) -> optax.Schedule:
  warmup = min(config.warmup_steps, max(config.steps - 1, 0))
  return optax.warmup_cosine_decay_schedule(
      init_value=0.0, peak_value=config.learning_rate, warmup_steps=warmup, decay_steps=max(config.steps, warmup + 1),
      end_value=config.learning_rate * config.end_lr_fraction)


def optimizer(config: TrainConfig) -> optax.GradientTransformation:
  return optax.chain(optax.clip_by_global_norm(config.clip_norm),
                     optax.adamw(schedule(config), weight_decay=config.weight_decay))


def _train_step(loss_fn, opt, state, frozen, batch):
  (loss, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(state["params"], frozen, batch)
  updates, opt_state = opt.update(grads, state["opt"], state["params"])
  params = optax.apply_updates(state["params"], updates)
  return {"params": params, "opt": opt_state}, dict(metrics, loss=loss, grad_norm=optax.global_norm(grads))


def _precision_step(bf16: bool, loss_fn, opt, state, frozen, batch):
  with bf16_gemm(bf16):   # at trace time
    return _train_step(loss_fn, opt, state, frozen, batch)


def heldout_loss(objective: Objective, corpus: Corpus, params, batch_size: int, loss_fn=None,
                 long_batch_size: int = 2) -> dict:
  """Every held-out metric averaged over the held-out rows (in batches of batch_size; the last one wraps); those of
  the corpus's long part, in batches of long_batch_size, as `heldout_long_*`."""
  loss_fn = loss_fn or jax.jit(objective.loss)
  rows = corpus.heldout_rows
  metrics = {}
  if corpus.long is not None:
    long = heldout_loss(objective, corpus.long, params, long_batch_size, loss_fn)
    metrics = {k.replace("heldout_", "heldout_long_", 1): v for k, v in long.items()}
  if len(rows) == 0:
    return metrics
  totals = []
  for start in range(0, len(rows), batch_size):
    chunk = np.resize(rows[start:start + batch_size], batch_size)
    loss, chunk_metrics = loss_fn(params, objective.frozen, corpus.batch(chunk, objective.layer_ids))
    totals.append(jax.device_get(dict(chunk_metrics, loss=loss)))
  return {**{f"heldout_{k}": float(np.mean([t[k] for t in totals])) for k in totals[0]}, **metrics}


class MetricsLog:
  """metrics.jsonl: one JSON object per line, each with its `step`; on resume, lines past that step are dropped."""

  def __init__(self, path: str, resume_step: int):
    self.path = path
    kept = []
    if os.path.exists(path):
      with open(path, encoding="utf-8") as f:
        kept = [line for line in f if line.strip() and json.loads(line).get("step", 0) <= resume_step]
    with open(path, "w", encoding="utf-8") as f:
      f.writelines(kept)

  def write(self, record: dict) -> None:
    with open(self.path, "a", encoding="utf-8") as f:
      f.write(json.dumps(record) + "\n")


def train(objective: Objective, corpus: Corpus, config: TrainConfig, output_dir: str, run: dict | None = None,
          stop_after: int | None = None, progress: bool = True):
  """Trains objective.trainable; returns (trained params, held-out metrics at the end).

  Resumes from the latest checkpoint in output_dir/checkpoints. `run` (JSON) describes what must match to resume;
  `stop_after` ends this call after that many steps in total (an interruption, for tests)."""
  os.makedirs(output_dir, exist_ok=True)
  opt = optimizer(config)
  params = jax.tree.map(jnp.copy, objective.trainable)  # the step donates its state; the objective keeps its own
  state = {"params": params, "opt": opt.init(params)}
  if config.long_every and corpus.long is None:
    raise ValueError("long_every asks for batches of the corpus's long part, but it has none: set "
                     "corpus.long_passage_prompts")
  settings, defaults = dataclasses.asdict(config), TrainConfig()
  for field in ("bf16_gemm", "long_every", "long_batch_size"):
    if settings[field] == getattr(defaults, field):  # a field added later describes a run only when set: older
      del settings[field]                            # checkpoints still resume
  description = dict(run or {}, kind=objective.kind, train=settings, state=tree_signature(state))
  checkpoints = TrainCheckpoints(os.path.join(output_dir, "checkpoints"), config.checkpoint_every,
                                 config.keep_checkpoints, description)
  start, state = checkpoints.restore_latest(state)
  log = MetricsLog(os.path.join(output_dir, "metrics.jsonl"), start)
  step_fn = jax.jit(functools.partial(_precision_step, config.bf16_gemm, objective.loss, opt), donate_argnums=(0,))
  loss_fn = jax.jit(objective.loss)
  evaluate = lambda params: heldout_loss(objective, corpus, params, config.batch_size, loss_fn, config.long_batch_size)
  lr = schedule(config)
  if start == 0:
    log.write(dict(step=0, **evaluate(state["params"])))
  end = config.steps if stop_after is None else min(stop_after, config.steps)
  bar = tqdm.tqdm(range(start, end), initial=start, total=config.steps, desc=objective.kind, disable=not progress)
  began = time.perf_counter()
  rows = corpus.epoch_rows(config.on_policy_repeats)
  long_rows = corpus.long.epoch_rows() if config.long_every else None
  for step in bar:
    batch = config.step_batch(corpus, rows, long_rows, step, objective.layer_ids)
    state, metrics = step_fn(state, objective.frozen, batch)
    done = step + 1
    if done % config.log_every == 0 or done == config.steps:
      metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
      bar.set_postfix(loss=f"{metrics['loss']:.3f}", kl=f"{metrics['kl']:.3f}")
      log.write(dict(step=done, lr=float(lr(step)), elapsed_s=time.perf_counter() - began, **metrics))
    if config.eval_every and done % config.eval_every == 0 and done != config.steps:
      log.write(dict(step=done, **evaluate(state["params"])))
    checkpoints.save(done, state, force=done == config.steps)
  bar.close()
  final = {}
  if end == config.steps:
    final = evaluate(state["params"])
    log.write(dict(step=config.steps, **final))
  checkpoints.close()
  return state["params"], final
