"""Training drafters by distillation from the target: corpus, objectives, optax loop, Orbax checkpoints, export."""
