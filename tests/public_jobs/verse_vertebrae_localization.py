"""VerSe localization: the loss scale read before the step, logged after.

Original: christianpayer/MedicalDataAugmentationTool-VerSe, commit
51569f9680e34b0e6dd74bc33587204cf4b2afdf (2020-12-21, TF 2.2/2.3):
verse2020/training/main_vertebrae_localization.py (`MainLoop`), on
tensorflow_train_v2's `MainLoopBase` and `LossMetricLogger`.

Calls kept in the original's order: `mixed_precision.Policy('mixed_float16')`
and `mixed_precision.set_policy(policy)` from `tensorflow.keras.
mixed_precision.experimental`; `self.norm_moving_average = tf.Variable(10.0)`
and a trainable `sigmas` variable; `Adam(learning_rate=ExponentialDecay(lr,
max_iter, 0.1), amsgrad=False)` wrapped in `mixed_precision.
LossScaleOptimizer(optimizer, loss_scale=tf.mixed_precision.experimental.
DynamicLossScale(initial_loss_scale=8, increment_period=1000))`;
`tf.train.Checkpoint(model=, optimizer=, sigmas=)` with a
`CheckpointManager`; the `tf.function` `train_step`: the model call and its
loss dict, `tf.reduce_sum(list(losses.values()))`, `get_scaled_loss`,
`tape.gradient`, `get_unscaled_gradients`, `tf.clip_by_global_norm(grads,
self.norm_moving_average * 2)`, **`loss_scale = self.optimizer.loss_scale()`
put in the metric dict before `apply_gradients`**, the moving-average update
when the norm is finite, `apply_gradients(zip(grads, variables))`, then
`loss_metric_logger_train.update_metrics(metric_dict)`: the logged loss
scale is the one read before the step.

`--tf24-form` writes that one line as TF 2.4 code writes it: `loss_scale =
self.optimizer.loss_scale` (TF 2.4's property, a tensor read then; TF 2.3's
is a `LossScale`, which the logger cannot average, and TF 2.4's tensor cannot
be called). The record of each form comes from the release that runs it.

Shrunk: the SpatialConfigurationNet replaced by a 3x3 and a 1x1 `Conv2D` on
8x8 single-channel images (channels last) giving 3 heatmaps; the heatmap
generation by fixed seeded targets; the dataset server by seeded synthetic
images (an inf at steps 2 and 6); `increment_period` 1000 -> 2, so that the
scale also grows; the logger by one `tf.keras.metrics.Mean` per entry, read
and reset after every step; 10 steps, saved at step 5. No testing, image
output or learnable sigma.
"""

import os
import sys
import tempfile

import numpy as np
import tensorflow as tf
from tensorflow.keras.mixed_precision import experimental as mixed_precision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jobreport  # pylint: disable=g-import-not-at-top,wrong-import-position

_TF24_FORM = "--tf24-form" in sys.argv
if _TF24_FORM:
  sys.argv.remove("--tf24-form")
POISONED = (2, 6)
NUM_LANDMARKS = 3


class LossMetricLogger:
  """tensorflow_train_v2's logger: a running mean per metric name."""

  def __init__(self):
    self.metrics = {}

  def update_metrics(self, metric_dict):
    for key, value in metric_dict.items():
      if key not in self.metrics:
        with tf.init_scope():
          self.metrics[key] = tf.keras.metrics.Mean(name=key)
      self.metrics[key].update_state(value)

  def finalize(self):
    out = {k: float(m.result()) for k, m in self.metrics.items()}
    for metric in self.metrics.values():
      # Harness: TF 2.3/2.4 spelled it `reset_states`, Keras 3 `reset_state`.
      (getattr(metric, "reset_state", None) or metric.reset_states)()
    return out


def _network():
  initializer = lambda seed, shape: tf.constant_initializer(  # pylint: disable=g-long-lambda
      np.random.RandomState(seed).uniform(-0.3, 0.3, size=shape))
  image = tf.keras.Input(shape=[8, 8, 1])
  local = tf.keras.layers.Conv2D(4, 3, padding="same", activation="relu",
                                 kernel_initializer=initializer(1, (3, 3, 1, 4))
                                 )(image)
  prediction = tf.keras.layers.Conv2D(
      NUM_LANDMARKS, 1, kernel_initializer=initializer(2, (1, 1, 4, 3)))(local)
  return tf.keras.Model(image, [prediction, local, prediction], name="scn")


class MainLoop:
  """The original's `MainLoop`, on the path this job takes."""

  def __init__(self, output_folder, learning_rate=1e-4):
    policy = mixed_precision.Policy("mixed_float16")
    mixed_precision.set_policy(policy)
    self.max_iter = 50000
    self.norm_moving_average = tf.Variable(10.0)
    self.sigmas_variables = tf.Variable([4.0] * NUM_LANDMARKS, name="sigmas",
                                        trainable=True)
    self.model = _network()
    self.learning_rate = tf.keras.optimizers.schedules.ExponentialDecay(
        learning_rate, self.max_iter, 0.1)
    self.optimizer = tf.keras.optimizers.Adam(
        learning_rate=self.learning_rate, amsgrad=False)
    self.optimizer = mixed_precision.LossScaleOptimizer(
        self.optimizer,
        loss_scale=tf.mixed_precision.experimental.DynamicLossScale(
            initial_loss_scale=8, increment_period=2))
    self.checkpoint = tf.train.Checkpoint(model=self.model,
                                          optimizer=self.optimizer,
                                          sigmas=self.sigmas_variables)
    self.checkpoint_manager = tf.train.CheckpointManager(
        self.checkpoint, output_folder, max_to_keep=None)
    self.loss_metric_logger_train = LossMetricLogger()
    rng = np.random.RandomState(3)
    self.targets = tf.constant(
        rng.uniform(size=(1, 8, 8, NUM_LANDMARKS)).astype("float32"))

  def loss_function(self, target, pred):
    return tf.nn.l2_loss(tf.cast(pred, tf.float32) - target)

  @tf.function
  def train_step(self, image):
    with tf.GradientTape() as tape:
      prediction, _, _ = self.model(image, training=True)
      losses = {"loss_net": self.loss_function(target=self.targets,
                                               pred=prediction)}
      loss = tf.reduce_sum(list(losses.values()))
      scaled_loss = self.optimizer.get_scaled_loss(loss)
    variables = self.model.trainable_weights
    metric_dict = losses
    clip_norm = self.norm_moving_average * 2
    scaled_grads = tape.gradient(scaled_loss, variables)
    grads = self.optimizer.get_unscaled_gradients(scaled_grads)
    grads, norm = tf.clip_by_global_norm(grads, clip_norm)
    if _TF24_FORM:
      loss_scale = self.optimizer.loss_scale
    else:
      loss_scale = self.optimizer.loss_scale()
    metric_dict.update({"loss_scale": loss_scale})
    if tf.math.is_finite(norm):
      alpha = 0.99
      self.norm_moving_average.assign(
          (1 - alpha) * tf.minimum(norm, clip_norm) +
          alpha * self.norm_moving_average)
    metric_dict.update({"norm": norm,
                        "norm_average": self.norm_moving_average})
    self.optimizer.apply_gradients(zip(grads, variables))
    self.loss_metric_logger_train.update_metrics(metric_dict)


def main():
  if args.resume:
    folder = args.resume
  else:
    folder = os.path.join(args.out or tempfile.mkdtemp(), "output")
  loop = MainLoop(folder)
  start = 0
  if args.resume:
    latest = loop.checkpoint_manager.latest_checkpoint
    loop.checkpoint.restore(latest)
    start = int(latest.rsplit("-", 1)[-1])
  images = np.random.RandomState(5).uniform(
      size=(jobreport.STEPS, 1, 8, 8, 1)).astype("float16")
  for step in POISONED:
    images[step, 0, 0, 0, 0] = np.inf
  for step in range(start, jobreport.STEPS):
    before = jobreport.values(loop.model.trainable_variables)
    loop.train_step(tf.constant(images[step]))
    logged = loop.loss_metric_logger_train.finalize()
    record = jobreport.keras_record(
        step, loop.optimizer, before,
        jobreport.values(loop.model.trainable_variables))
    record["logged_loss_scale"] = logged["loss_scale"]
    jobreport.emit(record)
    if step + 1 == jobreport.MIDWAY:
      path = loop.checkpoint_manager.save(checkpoint_number=step + 1)
      if args.out:
        jobreport.checkpoint_event(path)


args = jobreport.parse_args()
if __name__ == "__main__":
  main()
