"""Training-state checkpoints with Orbax: every N steps, atomic (Orbax finalizes a step directory only when it is
complete), resumed from the latest complete step. A checkpoint made by a different run (other drafter, shapes or
hyperparameters) or one that cannot be read is refused with an error that says which and what to do."""

import json
import os

import jax
import orbax.checkpoint as ocp


def _leaves_dict(tree) -> dict:
  return {f"{i:05d}": leaf for i, leaf in enumerate(jax.tree.leaves(tree))}


def tree_signature(tree) -> list:
  """[shape, dtype] of every leaf, in order: what a checkpoint's arrays must match."""
  return [[list(x.shape), str(x.dtype)] for x in jax.tree.leaves(tree)]


class TrainCheckpoints:
  """Saves and restores {train state pytree} under `directory/<step>/` with a JSON description of the run."""

  def __init__(self, directory: str, every: int, keep: int, run: dict):
    self.directory = os.path.abspath(directory)
    self.run = json.loads(json.dumps(run))  # what must match on resume (JSON-normalised)
    options = ocp.CheckpointManagerOptions(save_interval_steps=every, max_to_keep=keep, create=True,
                                           enable_async_checkpointing=False, cleanup_tmp_directories=True)
    self.manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "run"))

  def save(self, step: int, state, force: bool = False) -> bool:
    saved = self.manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(_leaves_dict(state)),
                                                            run=ocp.args.JsonSave(self.run)), force=force)
    self.manager.wait_until_finished()
    return saved

  def restore_latest(self, template):
    """(step, state): the latest complete checkpoint's, or (0, template) when there is none."""
    step = self.manager.latest_step()
    if step is None:
      return 0, template
    where = os.path.join(self.directory, str(step))
    try:
      run = self.manager.restore(step, args=ocp.args.Composite(run=ocp.args.JsonRestore()))["run"]
    except Exception as err:
      raise ValueError(f"training checkpoint {where} is corrupt (its run description cannot be read: {err}); "
                       "delete that step directory to resume from an earlier one, or use a new output_dir") from err
    if run != self.run:
      changed = sorted(k for k in set(run) | set(self.run) if run.get(k) != self.run.get(k))
      raise ValueError(f"training checkpoint {where} was written by a different run (differs in {changed}); "
                       "use a new output_dir, or the original settings to resume it")
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), _leaves_dict(template))
    try:
      leaves = self.manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))["state"]
    except Exception as err:
      raise ValueError(f"training checkpoint {where} is corrupt (its arrays cannot be restored: {err}); "
                       "delete that step directory to resume from an earlier one") from err
    treedef = jax.tree.structure(template)
    return step, jax.tree.unflatten(treedef, [leaves[k] for k in sorted(leaves)])

  def close(self):
    self.manager.close()
