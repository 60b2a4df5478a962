"""RetinaNet's Trainer: MirroredStrategy, `_create_all_weights`, `load_weights`.

Original: srihari-humbarwadi/retinanet-tensorflow2.x, commit
3c7bdcc803bebfab17573d273cf206f8b40b8cbd (2020-08-23, TF 2.3):
retinanet/trainer.py (`Trainer`), retinanet/model/builder.py
(`model_builder`), retinanet/model/utils.py (`get_optimizer`,
`add_l2_regularization`), retinanet/lr_schedules/
piecewise_constant_decay_with_warmup.py and retinanet/main.py (the policy).

Calls kept in the original's order: `mixed_precision.Policy(precision)` and
`mixed_precision.set_policy(policy)` from `tensorflow.keras.mixed_precision.
experimental`; under `strategy.scope()`, the model function: a functional
model with `model.add_loss(add_l2_regularization(layer.kernel, alpha))` for
each trainable `Conv2D`, `SGD(learning_rate=PiecewiseConstantDecayWithLinear
Warmup(...), momentum=0.9, nesterov=True)` wrapped in `mixed_precision.
LossScaleOptimizer(optimizer, loss_scale='dynamic')`, `model.compile(
optimizer=optimizer, loss=loss_fn)`; the trainer taking `model.optimizer`,
its `isinstance(..., tf.keras.mixed_precision.experimental.
LossScaleOptimizer)` check; the resume: `tf.train.latest_checkpoint(
model_dir)`, `self.optimizer._create_all_weights(model.trainable_variables)`,
`model.load_weights(latest_checkpoint)` and, in `train()`,
`restore_status.assert_consumed()`; the step: `model(images,
training=True)`, `model.loss(targets, predictions)` (a dict of losses),
`tf.math.add_n(model.losses)`, the total divided by the replica count,
`get_scaled_loss`, `tape.gradient`, `get_unscaled_gradients`,
`apply_gradients(zip(...))`, the gradient norm; `distributed_train_step`: a
`tf.function` running `strategy.run` once and then in a `tf.range` loop,
`strategy.reduce(MEAN)`; after each execution `optimizer.iterations`, the
learning rate from `self.optimizer._optimizer._decayed_lr('float')`, and
`model.save_weights(os.path.join(model_dir, 'weights_step_{}'))` every
`save_every` steps.

Shrunk: the ResNet-FPN RetinaNet replaced by one `Conv2D` and two 1x1
`Conv2D` heads on 8x8x3 images; the focal and smooth-L1 losses by a sigmoid
cross-entropy and a Huber loss with the original's dict keys; COCO by seeded
synthetic batches (2 images per replica); the GPUs by two logical CPUs
(configured before TensorFlow starts); `steps_per_execution=1` so that every
step is reported, 10 steps saved at step 5; no summaries (TF 2.21 needs
TensorBoard for `tf.summary.scalar`), ETA logging or final save. A resumed
run reads the dataset from its start, as the original's fresh iterator
does. Non-finite steps: the
first replica's images at steps 1, 4 and 7 hold an inf.

`--keras3`: the job's edits for Keras's current optimizers and Keras 3,
none about mixed precision: the learning rate as the inner optimizer's
schedule at its `iterations` (current optimizers have no `_decayed_lr`), and
on Keras 3 the L2 terms
computed in the step from the same kernels (Keras 3's `add_loss` takes no
callables) and `save_weights` to a `.weights.h5` path.
"""

import os
import shutil
import sys
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.keras.mixed_precision import experimental as mixed_precision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

# Harness: two logical CPUs stand in for the original's GPUs.
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * 2)

POISONED = (1, 4, 7)
ALPHA = 0.0001
_KERAS3 = "--keras3" in sys.argv
_KERAS3_API = _KERAS3 and not hasattr(tf.keras.layers.Layer, "add_update")
if _KERAS3:
  sys.argv.remove("--keras3")


class PiecewiseConstantDecayWithLinearWarmup(
    tf.keras.optimizers.schedules.PiecewiseConstantDecay):
  """The original's schedule: linear warm-up, then piecewise constant."""

  def __init__(self, warmup_learning_rate, warmup_steps, boundaries, values,
               **kwargs):
    super().__init__(boundaries=[x - 1 for x in boundaries], values=values,
                     **kwargs)
    self.warmup_learning_rate = warmup_learning_rate
    self.warmup_steps = warmup_steps
    self._step_size = self.values[0] - self.warmup_learning_rate

  def __call__(self, step):
    with tf.name_scope(self.name or "PiecewiseConstantDecayWithLinearWarmup"):
      return tf.cond(
          pred=tf.less(step, self.warmup_steps),
          true_fn=lambda: (self.warmup_learning_rate + tf.cast(
              step, dtype=tf.float32) / self.warmup_steps * self._step_size),
          false_fn=lambda: super(  # pylint: disable=g-long-lambda
              PiecewiseConstantDecayWithLinearWarmup, self).__call__(step))

  def get_config(self):
    config = {"warmup_learning_rate": self.warmup_learning_rate,
              "warmup_steps": self.warmup_steps}
    config.update(super().get_config())
    return config


def get_optimizer(name):
  return {"sgd": tf.keras.optimizers.SGD}[name]


def add_l2_regularization(weight, alpha=0.0001):
  def _add_l2_regularization():
    return alpha * tf.nn.l2_loss(weight)
  return _add_l2_regularization


class RetinaNetLoss(tf.losses.Loss):
  """The original's loss interface: a dict with its keys."""

  def __init__(self, num_classes):
    super().__init__(reduction="none", name="RetinaNetLoss")
    self._num_classes = num_classes

  def call(self, y_true, y_pred):
    class_targets, box_targets = y_true
    class_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=class_targets,
        logits=tf.cast(y_pred["class-predictions"], tf.float32)))
    error = tf.cast(y_pred["box-predictions"], tf.float32) - box_targets
    abs_error = tf.abs(error)
    box_loss = tf.reduce_mean(tf.where(abs_error < 1.0, 0.5 * error**2,
                                       abs_error - 0.5))
    return {"box-loss": box_loss, "class-loss": class_loss,
            "weighted-loss": class_loss + 50.0 * box_loss}

  def __call__(self, y_true, y_pred):  # pylint: disable=arguments-differ
    return self.call(y_true, y_pred)


def _seeded(shape, seed):
  return tf.constant_initializer(
      np.random.RandomState(seed).uniform(-0.3, 0.3, size=shape))


def model_builder(params):
  """The original's `model_builder`: its model function."""

  def _model_fn():
    images = tf.keras.Input(shape=[8, 8, 3], name="images")
    features = tf.keras.layers.Conv2D(
        4, 3, padding="same", activation="relu",
        kernel_initializer=_seeded((3, 3, 3, 4), 1))(images)
    class_outputs = tf.keras.layers.Conv2D(
        2, 1, kernel_initializer=_seeded((1, 1, 4, 2), 2),
        name="class-head")(features)
    box_outputs = tf.keras.layers.Conv2D(
        4, 1, kernel_initializer=_seeded((1, 1, 4, 4), 3),
        name="box-head")(features)
    model = tf.keras.Model(
        inputs=[images], outputs={"class-predictions": class_outputs,
                                  "box-predictions": box_outputs},
        name="retinanet")
    if params["use_weight_decay"] and not _KERAS3_API:
      for layer in model.layers:
        if isinstance(layer, tf.keras.layers.Conv2D) and layer.trainable:
          model.add_loss(add_l2_regularization(layer.kernel, ALPHA))
    lr_params = params["lr_params"]
    learning_rate_fn = PiecewiseConstantDecayWithLinearWarmup(
        lr_params["warmup_learning_rate"], lr_params["warmup_steps"],
        lr_params["boundaries"], lr_params["values"])
    optimizer = get_optimizer(params["optimizer"])(
        learning_rate=learning_rate_fn, momentum=0.9, nesterov=True)
    if params["precision"] == "mixed_float16":
      optimizer = mixed_precision.LossScaleOptimizer(
          optimizer, loss_scale="dynamic")
    model.compile(optimizer=optimizer, loss=RetinaNetLoss(2))
    return model

  return _model_fn


class Trainer:
  """retinanet.trainer.Trainer, on the path this job takes."""

  def __init__(self, strategy, model_fn, train_input_fn, train_steps,
               steps_per_execution, model_dir, save_every):
    self.distribute_strategy = strategy
    self.model_fn = model_fn
    self.train_input_fn = train_input_fn
    self.train_steps = train_steps
    self.steps_per_execution = steps_per_execution
    self.model_dir = model_dir
    self.save_every = save_every
    self.restore_status = None
    self.use_float16 = False
    with self.distribute_strategy.scope():
      self._model = self.model_fn()
      self.optimizer = self._model.optimizer
      if isinstance(self.optimizer,
                    tf.keras.mixed_precision.experimental.LossScaleOptimizer):
        self.use_float16 = True
      self._train_dataset = (
          self.distribute_strategy.experimental_distribute_dataset(
              self.train_input_fn()))
      self._restore_checkpoint()

  def _restore_checkpoint(self):
    latest_checkpoint = tf.train.latest_checkpoint(self.model_dir)
    if latest_checkpoint is not None:
      self.optimizer._create_all_weights(self._model.trainable_variables)  # pylint: disable=protected-access
      self.restore_status = self._model.load_weights(latest_checkpoint)

  def _l2_losses(self):
    if not _KERAS3_API:
      return self._model.losses
    return [ALPHA * tf.nn.l2_loss(layer.kernel) for layer in self._model.layers
            if isinstance(layer, tf.keras.layers.Conv2D) and layer.trainable]

  def _train_step(self, data):
    images, targets = data
    with tf.GradientTape() as tape:
      predictions = self._model(images, training=True)
      loss = self._model.loss(targets, predictions)
      loss["l2-regularization"] = tf.math.add_n(self._l2_losses())
      loss["total-loss"] = loss["weighted-loss"] + loss["l2-regularization"]
      per_replica_loss = (loss["total-loss"] /
                          self.distribute_strategy.num_replicas_in_sync)
      if self.use_float16:
        per_replica_loss = self.optimizer.get_scaled_loss(per_replica_loss)
    gradients = tape.gradient(per_replica_loss,
                              self._model.trainable_variables)
    if self.use_float16:
      gradients = self.optimizer.get_unscaled_gradients(gradients)
    self.optimizer.apply_gradients(
        zip(gradients, self._model.trainable_variables))
    g_norm = tf.sqrt(tf.reduce_sum([tf.norm(g)**2 for g in gradients]))
    loss["gradient-norm"] = g_norm
    return loss

  @tf.function
  def distributed_train_step(self, iterator, num_steps):
    loss_dict = self.distribute_strategy.run(self._train_step,
                                             args=(next(iterator),))
    for _ in tf.range(num_steps - 1):
      loss_dict = self.distribute_strategy.run(self._train_step,
                                               args=(next(iterator),))
    return tf.nest.map_structure(
        lambda x: self.distribute_strategy.reduce(  # pylint: disable=g-long-lambda
            tf.distribute.ReduceOp.MEAN, x, axis=None), loss_dict)

  def _learning_rate(self):
    inner = self.optimizer._optimizer  # pylint: disable=protected-access
    if _KERAS3:  # `_decayed_lr`'s value: the schedule at `iterations`.
      return inner._learning_rate(inner.iterations)  # pylint: disable=protected-access
    return inner._decayed_lr("float")  # pylint: disable=protected-access

  def train(self):
    if self.restore_status is not None:
      self.restore_status.assert_consumed()
    start_step = int(self.optimizer.iterations.numpy())
    dataset_iterator = iter(self._train_dataset)
    for _ in range(start_step, self.train_steps, self.steps_per_execution):
      before = jobreport.values(self._model.trainable_variables)
      self.distributed_train_step(
          dataset_iterator, tf.convert_to_tensor(self.steps_per_execution))
      current_step = int(self.optimizer.iterations.numpy())
      learning_rate = self._learning_rate()
      record = jobreport.keras_record(
          current_step - 1, self.optimizer, before,
          jobreport.values(self._model.trainable_variables))
      record["learning_rate"] = float(tf.convert_to_tensor(learning_rate))
      jobreport.emit(record)
      if current_step % self.save_every == 0:
        self._save(current_step)

  def _save(self, current_step):
    name = "weights_step_{}".format(current_step)
    if _KERAS3_API:
      name += ".weights.h5"
    self._model.save_weights(os.path.join(self.model_dir, name))
    if args.out and current_step == jobreport.MIDWAY:
      # Harness: a copy of the model directory as it is after step 5.
      folder = os.path.join(args.out, "midway")
      shutil.copytree(self.model_dir, folder)
      jobreport.checkpoint_event(os.path.join(folder, name))


def train_input_fn(global_batch):
  """Seeded synthetic batches, the first replica's poisoned at POISONED."""
  rng = np.random.RandomState(7)
  n = jobreport.STEPS * global_batch
  images = rng.uniform(size=(n, 8, 8, 3)).astype("float32")
  class_targets = (rng.uniform(size=(n, 8, 8, 2)) > 0.5).astype("float32")
  box_targets = rng.normal(size=(n, 8, 8, 4)).astype("float32")
  for step in POISONED:
    images[step * global_batch, 0, 0, 0] = np.inf

  def fn():
    return tf.data.Dataset.from_tensor_slices(
        (images, (class_targets, box_targets))).batch(global_batch)

  return fn


def main():
  params = {"precision": "mixed_float16", "optimizer": "sgd",
            "use_weight_decay": True,
            "lr_params": {"warmup_learning_rate": 0.001, "warmup_steps": 4,
                          "boundaries": [7], "values": [0.01, 0.001]}}
  policy = mixed_precision.Policy(params["precision"])
  mixed_precision.set_policy(policy)
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  if args.resume:
    model_dir = args.resume
  else:
    model_dir = os.path.join(args.out or tempfile.mkdtemp(), "model_files")
    os.makedirs(model_dir, exist_ok=True)
  trainer = Trainer(strategy, model_builder(params), train_input_fn(4),
                    jobreport.STEPS, 1, model_dir, jobreport.MIDWAY)
  trainer.train()


args = jobreport.parse_args()
if __name__ == "__main__":
  main()
