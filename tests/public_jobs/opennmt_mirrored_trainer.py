"""OpenNMT-tf's multi-device training: MirroredStrategyTrainer, experimental.

Original: OpenNMT/OpenNMT-tf, tag v2.14.0 (commit
d5021f85f21f366f873c1d6e99ee5349504d3646, `tensorflow>=2.3,<2.5`):
opennmt/runner.py (`Runner.__init__` with `mixed_precision=True`,
`Runner.train`), opennmt/training.py (`Trainer`, `MirroredStrategyTrainer`),
opennmt/utils/checkpoint.py (`Checkpoint`), opennmt/utils/misc.py
(`get_devices`), opennmt/optimizers/utils.py (`make_optimizer`,
`GradientAccumulator`) and opennmt/models/model.py (`get_optimizer`).

Calls kept in the original's order: `tf.config.optimizer.
set_experimental_options({"auto_mixed_precision": True})` and the seeds;
`optimizer_class(learning_rate=tf.constant(lr, dtype=tf.float32), **params)`
(`Adam`); `tf.train.Checkpoint(model=, optimizer=)` with a
`tf.train.CheckpointManager(checkpoint, model_dir, keep_checkpoint_max)` and
`Checkpoint.restore` of its latest checkpoint (given the bare optimizer, which
the trainer wraps only afterwards: TF 2.3/2.4's loss-scale optimizer delegates
its checkpoint dependencies to the optimizer it wraps, so the loss scale is
saved as `optimizer/loss_scale/...` and restored, deferred, when the wrapper is
built); `tf.config.list_logical_devices("GPU")` falling back to the CPUs,
`tf.distribute.MirroredStrategy(devices=devices)` over two of them; the
trainer's `tf.config.optimizer.get_experimental_options()` check wrapping the
optimizer in `tf.keras.mixed_precision.experimental.LossScaleOptimizer(
optimizer, "dynamic")`; `optimizer.iterations` read under the strategy scope;
`tf.summary.experimental.set_step(iterations)`;
`strategy.experimental_distribute_datasets_from_function`; `tf.function`-wrapped
`_forward` around `strategy.run(_forward_and_step)` and
`strategy.reduce(MEAN)`; inside, the gradients from
`optimizer.get_gradients(loss, variables)` (the trainer's graph-mode branch, as
`tf.function` runs it), `tf.summary.record_if`, gradients divided by the
replica count and `apply_gradients(list(zip(...)))`; the `tf.math.is_nan(loss)`
check; saving at step 1 and every `save_checkpoints_steps` with
`CheckpointManager.save(checkpoint_number=step)`.

Shrunk: the Transformer replaced by one `Dense` layer in an
`opennmt.models.Model`-like layer (same call and `compute_loss` /
`regularize_loss` interface; its loss is a (sum, normalizer) tuple of squared
errors), the text datasets by seeded synthetic batches (2 examples of 6
features per replica, repeated), the GPUs by two logical CPUs (configured by
the job before TensorFlow starts), 10 steps with a checkpoint every 5 and
`keep_checkpoint_max: 1`; no gradient accumulation, moving average, evaluation,
training statistics, gradient global-norm summary (TF 2.21 needs TensorBoard
for `tf.summary.scalar` and does not install it) or summary files (the summary
writer is a no-op one). On the CPU the graph rewrite changes nothing, so the
model runs in float32. Non-finite steps: the first replica's batches at steps
0, 4 and 8 hold an inf (one input feature, so the loss is inf, not NaN, and
passes the NaN check).
"""

import itertools
import os
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

# Harness: two logical CPUs stand in for the original's GPUs; this must run
# before TensorFlow initialises its devices.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

POISONED = (0, 4, 8)
FEATURES = 6
KERNEL = np.random.RandomState(11).uniform(
    -0.5, 0.5, size=(FEATURES, 1)).astype("float32")


class RegressionModel(tf.keras.layers.Layer):
  """Stands in for an `opennmt.models.Model` (a Keras layer)."""

  def __init__(self):
    super().__init__()
    self.output_layer = tf.keras.layers.Dense(
        1, kernel_initializer=tf.constant_initializer(KERNEL),
        bias_initializer="zeros")

  def call(self, features, labels=None, training=None, step=None):  # pylint: disable=arguments-differ
    return self.output_layer(features), None

  def compute_loss(self, outputs, labels, training=True):
    loss = tf.reduce_sum(tf.square(outputs - labels))
    return loss, tf.cast(tf.shape(labels)[0], loss.dtype)

  def regularize_loss(self, loss, variables=None):
    return loss


def get_devices(count=1, fallback_to_cpu=True):
  devices = tf.config.list_logical_devices(device_type="GPU")
  if not devices and fallback_to_cpu:
    devices = tf.config.list_logical_devices(device_type="CPU")
  if len(devices) < count:
    raise ValueError("Requested %d devices but only %d visible" % (
        count, len(devices)))
  return devices[0:count]


def make_optimizer(name, learning_rate, **kwargs):
  optimizer_class = getattr(tf.keras.optimizers, name)
  return optimizer_class(learning_rate=learning_rate, **kwargs)


class GradientAccumulator(object):
  """The accumulator the trainer resets (unused without accumulation)."""

  def __init__(self):
    self._gradients = []
    self._accum_steps = None

  def reset(self):
    if not self._gradients:
      return
    self._accum_steps.assign(0)
    for gradient in self._gradients:
      gradient.assign(tf.zeros(gradient.shape, dtype=gradient.dtype),
                      read_value=False)


class Checkpoint(object):
  """opennmt.utils.checkpoint.Checkpoint: a Checkpoint and its manager."""

  def __init__(self, model, optimizer=None, model_dir=None,
               keep_checkpoint_max=8):
    trackables = {"model": model}
    if optimizer is not None:
      trackables["optimizer"] = optimizer
    self._model = model
    self._optimizer = optimizer
    self._model_dir = model_dir
    self._checkpoint = tf.train.Checkpoint(**trackables)
    self._checkpoint_manager = tf.train.CheckpointManager(
        self._checkpoint, model_dir, keep_checkpoint_max)

  @classmethod
  def from_config(cls, config, model, optimizer=None):
    train_config = config.get("train") or {}
    return cls(model, optimizer=optimizer, model_dir=config.get("model_dir"),
               keep_checkpoint_max=train_config.get("keep_checkpoint_max", 8))

  @property
  def model_dir(self):
    return self._model_dir

  @property
  def last_saved_step(self):
    latest = self._checkpoint_manager.latest_checkpoint
    if latest is None:
      return None
    return int(latest.split("-")[-1])

  def save(self, step=None):
    if step is None:
      step = self._optimizer.iterations
    path = self._checkpoint_manager.save(checkpoint_number=step)
    tf.get_logger().info("Saved checkpoint %s", path)
    return path

  def restore(self, checkpoint_path=None, weights_only=False):
    if weights_only:
      checkpoint = tf.train.Checkpoint(model=self._model)
    else:
      checkpoint = self._checkpoint
    if checkpoint_path is not None:
      if tf.io.gfile.isdir(checkpoint_path):
        checkpoint_path = tf.train.latest_checkpoint(checkpoint_path)
    elif self._checkpoint_manager.latest_checkpoint is not None:
      checkpoint_path = self._checkpoint_manager.latest_checkpoint
    if checkpoint_path is None:
      tf.get_logger().warning("No checkpoint to restore in %s",
                              self._model_dir)
      return None
    load_status = checkpoint.restore(checkpoint_path)
    if weights_only:
      load_status.expect_partial()
    tf.get_logger().info("Restored checkpoint %s", checkpoint_path)
    return checkpoint_path


class Trainer(object):
  """opennmt.training.Trainer, on the path this job takes."""

  def __init__(self, model, optimizer, checkpoint=None, is_master=True):
    self._checkpoint = checkpoint
    self._is_master = is_master
    self._model = model
    # Harness: a no-op writer instead of event files in the model directory.
    self._summary_writer = tf.summary.create_noop_writer()
    self._gradient_accumulator = GradientAccumulator()
    if optimizer is None:
      raise ValueError("No optimizer is defined")
    graph_optimizer_options = tf.config.optimizer.get_experimental_options()
    mixed_precision_enabled = graph_optimizer_options.get(
        "auto_mixed_precision")
    if (mixed_precision_enabled and not isinstance(
        optimizer, tf.keras.mixed_precision.experimental.LossScaleOptimizer)):
      optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
          optimizer, "dynamic")
    self._optimizer = optimizer

  @property
  def num_replicas(self):
    return 1

  def __call__(self, dataset, max_step=None, accum_steps=1, report_steps=100,
               save_steps=5000, evaluator=None, eval_steps=5000):
    if (max_step is not None
        and self._optimizer.iterations.numpy() >= max_step):
      raise RuntimeError("The training already reached max_step (%d)."
                         % max_step)
    self._gradient_accumulator.reset()
    with self._summary_writer.as_default():
      iterations = self._optimizer.iterations
      tf.summary.experimental.set_step(iterations)
      step = None
      # Harness: the weights before each step and the step index.
      index = int(iterations.numpy())
      before = _initial_weights(self._checkpoint)
      for loss in self._steps(dataset, accum_steps=accum_steps,
                              report_steps=report_steps):
        if tf.math.is_nan(loss):
          raise RuntimeError("Model diverged with loss = NaN.")
        step = iterations.numpy()
        after = jobreport.values(self._model.trainable_variables)
        jobreport.emit(jobreport.keras_record(index, self._optimizer, before,
                                              after))
        before, index = after, index + 1
        if step == 1 or (save_steps is not None and step % save_steps == 0):
          self._save_checkpoint(step)
          if step == jobreport.MIDWAY:
            _keep_midway(self._checkpoint)
        if eval_steps is not None and step % eval_steps == 0:
          self._evaluate(evaluator, step)
        if step == max_step:
          break
      if step is None:
        raise RuntimeError("No training steps were executed.")
      self._save_checkpoint(step)
      self._evaluate(evaluator, step)

  def _save_checkpoint(self, step):
    if (not self._is_master or self._checkpoint is None
        or step == self._checkpoint.last_saved_step):
      return
    self._checkpoint.save(step)

  def _evaluate(self, evaluator, step):
    if not self._is_master or evaluator is None:
      return False
    evaluator(step)
    return evaluator.should_stop()

  def _finalize_dataset(self, dataset):
    if callable(dataset):
      dataset = dataset(tf.distribute.InputContext())
    return dataset

  def _steps(self, dataset, accum_steps=1, report_steps=None):
    dataset = self._finalize_dataset(dataset)
    iterator = iter(dataset)
    with_accum = accum_steps > 1

    def _forward():
      source, target = next(iterator)
      record_summaries = self._should_record_summaries(
          report_steps, with_accum=with_accum)
      forward_fn = self._forward if with_accum else self._forward_and_step
      return forward_fn(source, target, record_summaries=record_summaries)

    forward_fn = tf.function(_forward)
    step_fn = lambda: None  # Only used with gradient accumulation.
    for i in itertools.count():
      try:
        loss = forward_fn()
      except (StopIteration, tf.errors.OutOfRangeError):
        break
      if i == 0 or (i + 1) % accum_steps == 0:
        step_fn()
        if i == 0:
          self._broadcast_variables()
        yield loss

  def _run_model(self, source, target):
    first_call = not self._model.built
    outputs, _ = self._model(source, labels=target, training=True,
                             step=self._optimizer.iterations)
    loss = self._model.compute_loss(outputs, target, training=True)
    if isinstance(loss, tuple):
      training_loss = loss[0] / loss[1]
      reported_loss = loss[0] / loss[2] if len(loss) > 2 else training_loss
    else:
      training_loss, reported_loss = loss, loss
    training_loss = self._model.regularize_loss(
        training_loss, variables=self._model.trainable_variables)
    if first_call and self._is_master:
      tf.get_logger().info("Number of model parameters: %d",
                           self._model.count_params())
    return training_loss, reported_loss

  def _should_record_summaries(self, report_steps, with_accum=False):
    if report_steps is None or not self._is_master:
      return False
    return tf.equal(self._optimizer.iterations % report_steps, 0)

  def _compute_gradients(self, source, target, record_summaries=False):
    with tf.summary.record_if(record_summaries):
      if tf.executing_eagerly():
        with tf.GradientTape() as tape:
          training_loss, reported_loss = self._run_model(source, target)
        gradients = tape.gradient(training_loss,
                                  self._model.trainable_variables)
      else:
        training_loss, reported_loss = self._run_model(source, target)
        gradients = self._optimizer.get_gradients(
            training_loss, self._model.trainable_variables)
      # The gradient global-norm summary is left out: tf.summary.scalar
      # needs TensorBoard, which TF 2.21 no longer installs.
    return reported_loss, gradients

  def _apply_gradients(self, gradients, scale=1):
    gradient_scale = scale * self.num_replicas
    if tf.is_tensor(gradient_scale) or gradient_scale != 1:
      gradients = [
          self._all_reduce_sum(gradient / tf.cast(gradient_scale,
                                                  gradient.dtype))
          for gradient in gradients]
    self._optimizer.apply_gradients(
        list(zip(gradients, self._model.trainable_variables)))

  def _forward_and_step(self, source, target, record_summaries=False):
    loss, gradients = self._compute_gradients(
        source, target, record_summaries=record_summaries)
    self._apply_gradients(gradients)
    return loss

  def _broadcast_variables(self):
    return

  def _all_reduce_sum(self, value):
    return value


class MirroredStrategyTrainer(Trainer):
  """opennmt.training.MirroredStrategyTrainer."""

  def __init__(self, model, optimizer, checkpoint=None, devices=None):
    super().__init__(model, optimizer, checkpoint=checkpoint)
    self._strategy = tf.distribute.MirroredStrategy(devices=devices)
    with self._strategy.scope():
      _ = self._optimizer.iterations

  @property
  def num_replicas(self):
    return self._strategy.num_replicas_in_sync

  def _finalize_dataset(self, dataset):
    dataset_fn = dataset if callable(dataset) else lambda _: dataset
    return self._strategy.experimental_distribute_datasets_from_function(
        dataset_fn)

  def _forward_and_step(self, source, target, record_summaries=False):
    per_replica_loss = self._strategy.run(
        super()._forward_and_step, args=(source, target),
        kwargs=dict(record_summaries=record_summaries))
    return self._strategy.reduce(tf.distribute.ReduceOp.MEAN,
                                 per_replica_loss, None)


def _initial_weights(checkpoint):
  """Harness: the weights the first step starts from.

  The model builds its variables inside the first step, so they are read
  from where they come from: the initializers, or the restored checkpoint.
  """
  latest = tf.train.latest_checkpoint(checkpoint.model_dir)
  if latest is None:
    return [KERNEL, np.zeros((1,), "float32")]
  reader = tf.train.load_checkpoint(latest)
  keys = sorted(k for k in reader.get_variable_to_shape_map()
                if k.startswith("model/") and "OPTIMIZER_SLOT" not in k)
  by_name = {k.split("/")[-3]: reader.get_tensor(k) for k in keys}
  return [by_name["kernel"], by_name["bias"]]


def _keep_midway(checkpoint):
  """Harness: with --out, a copy of the model directory after step 5."""
  if not args.out:
    return
  folder = os.path.join(args.out, "midway")
  shutil.copytree(checkpoint.model_dir, folder)
  jobreport.checkpoint_event(tf.train.latest_checkpoint(folder))


def make_training_dataset(batch_size, num_shards=1, shard_index=0):
  rng = np.random.RandomState(5)
  n = 2 * batch_size * jobreport.STEPS
  features = rng.normal(size=(n, FEATURES)).astype("float32")
  labels = rng.normal(size=(n, 1)).astype("float32")
  for step in POISONED:  # The first replica's batch of these steps.
    features[2 * step * batch_size, 0] = np.inf
  dataset = tf.data.Dataset.from_tensor_slices((features, labels))
  if num_shards > 1:
    dataset = dataset.shard(num_shards, shard_index)
  return dataset.batch(batch_size).repeat()


def main():
  # Runner(model, config, mixed_precision=True, seed=3).
  tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})
  np.random.seed(3)
  tf.random.set_seed(3)
  if args.resume:
    model_dir = args.resume
  else:
    model_dir = os.path.join(args.out or tempfile.mkdtemp(), "run")
  config = {
      "model_dir": model_dir,
      "params": {"optimizer": "Adam", "learning_rate": 0.01,
                 "optimizer_params": {"beta_1": 0.9, "beta_2": 0.998}},
      "train": {"batch_size": 2, "max_step": jobreport.STEPS,
                "save_checkpoints_steps": jobreport.MIDWAY,
                "keep_checkpoint_max": 1, "save_summary_steps": 100},
      "eval": {"steps": 5000},
  }
  num_devices = 2

  # Runner.train.
  model = RegressionModel()
  params = config["params"]
  learning_rate = tf.constant(params["learning_rate"], dtype=tf.float32)
  optimizer = make_optimizer(params["optimizer"], learning_rate,
                             **params["optimizer_params"])
  train_config = config["train"]
  dataset_fn = lambda input_context: make_training_dataset(  # pylint: disable=g-long-lambda
      train_config["batch_size"],
      num_shards=input_context.num_input_pipelines,
      shard_index=input_context.input_pipeline_id)
  checkpoint = Checkpoint.from_config(config, model, optimizer=optimizer)
  checkpoint.restore(checkpoint_path=None, weights_only=False)
  devices = get_devices(count=num_devices)
  trainer = MirroredStrategyTrainer(model, optimizer, checkpoint=checkpoint,
                                    devices=devices)
  trainer(dataset_fn,
          max_step=train_config.get("max_step"),
          accum_steps=1,
          report_steps=train_config.get("save_summary_steps", 100),
          save_steps=train_config.get("save_checkpoints_steps", 5000),
          evaluator=None,
          eval_steps=config["eval"].get("steps", 5000))


args = jobreport.parse_args()
if __name__ == "__main__":
  main()
