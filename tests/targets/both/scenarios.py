"""TF 2.3/2.4-era mixed-precision training scripts, and what to record.

Each scenario is written as a TF 2.3/2.4 job writes it (`tf.keras...`,
`tf.mixed_precision.experimental...`) and runs unchanged on the real TF 2.3.4
/ 2.4.4 (`tools/gen_legacy_keras_trajectories.py` records them into
`tests/fixtures/legacy_keras/`) and on TF 2.21 after the one import line, on
both targets: Keras 3 and tf_keras (`test_trajectories.py` compares).
Non-finite steps are forced through an input multiplied by inf at the steps
in `POISONED`. Kept Python 3.8 compatible (the reference TF's interpreter).
"""

import numpy as np
import tensorflow as tf

STEPS = 8
POISONED = (2, 5)  # 0-based steps whose gradients are non-finite.


def _poison(step):
  return float("inf") if step in POISONED else 1.0


def _state(opt):
  """(loss scale, counter) of a TF 2.3 or TF 2.4+ Keras loss-scale optimizer."""
  scale = opt.loss_scale
  if callable(scale) and not tf.is_tensor(scale):  # TF 2.3: a LossScale.
    counter = getattr(scale, "_num_good_steps", None)
    return float(scale()), None if counter is None else int(counter.numpy())
  counter = opt.dynamic_counter if opt.dynamic else None
  if counter is not None:
    counter = int(tf.convert_to_tensor(counter).numpy())
  return float(tf.convert_to_tensor(scale).numpy()), counter


def _record(opt, var, before):
  scale, counter = _state(opt)
  value = var.numpy()
  return {"loss_scale": scale, "counter": counter,
          "skipped": bool(np.array_equal(value, before)),
          "iterations": int(opt.iterations.numpy())}


def _v1_optimizer():
  loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=64, increment_period=2)
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      tf.keras.optimizers.SGD(0.1), loss_scale)


def _custom_loop(use_function):
  var = tf.Variable([1.0, 2.0])
  opt = _v1_optimizer()

  def step(poison):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(var * var) * poison
      scaled = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, [var]))
    opt.apply_gradients(zip(grads, [var]))

  if use_function:
    step = tf.function(step)
  out = []
  for i in range(STEPS):
    before = var.numpy()
    step(tf.constant(_poison(i)))
    out.append(_record(opt, var, before))
  return out


def custom_loop_eager():
  return _custom_loop(False)


def custom_loop_function():
  return _custom_loop(True)


def mirrored():
  """`strategy.run` over two replicas; only replica 0's input is poisoned."""
  strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  with strategy.scope():
    var = tf.Variable([1.0, 2.0])
    opt = _v1_optimizer()

  def replica_step(poison):
    ctx = tf.distribute.get_replica_context()
    factor = tf.where(tf.equal(ctx.replica_id_in_sync_group, 0), poison, 1.0)
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(var * var) * factor
      scaled = opt.get_scaled_loss(loss)
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, [var]))
    opt.apply_gradients(zip(grads, [var]))

  @tf.function
  def step(poison):
    strategy.run(replica_step, args=(poison,))

  out = []
  for i in range(STEPS):
    before = var.numpy()
    step(tf.constant(_poison(i)))
    out.append(_record(opt, var, before))
  return out


class _Recorder(tf.keras.callbacks.Callback):

  def __init__(self):
    super().__init__()
    self.records = []
    self._before = None

  def on_train_batch_begin(self, batch, logs=None):
    self._before = self.model.layers[0].kernel.numpy()

  def on_train_batch_end(self, batch, logs=None):
    self.records.append(_record(self.model.optimizer,
                                self.model.layers[0].kernel, self._before))


def fit_policy_loss_scale():
  """`fit` with TF 2.3's global `Policy(..., loss_scale=...)`."""
  mp = tf.keras.mixed_precision.experimental
  loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=64, increment_period=2)
  mp.set_policy(mp.Policy("mixed_float16", loss_scale=loss_scale))
  try:
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(2, input_shape=(3,), kernel_initializer="ones"),
        tf.keras.layers.Activation("linear", dtype="float32")])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
  finally:
    mp.set_policy("float32")
  x = np.ones((STEPS, 3), np.float32)
  y = np.ones((STEPS, 2), np.float32)
  for i in POISONED:
    y[i] = np.nan
  recorder = _Recorder()
  model.fit(x, y, batch_size=1, epochs=1, shuffle=False, verbose=0,
            callbacks=[recorder])
  return recorder.records


def graph_session():
  """A TF1 graph in a session, `minimize` with a Keras loss-scale optimizer."""
  out = []
  with tf.Graph().as_default():
    poison = tf.compat.v1.placeholder(tf.float32, [])
    var = tf.compat.v1.Variable([1.0, 2.0], use_resource=True)
    opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(
        tf.keras.optimizers.SGD(0.1), "dynamic")
    train = opt.minimize(lambda: tf.reduce_sum(var * var) * poison, [var])
    scale = opt.loss_scale
    if callable(scale) and not tf.is_tensor(scale):  # TF 2.3: a LossScale.
      scale = scale()
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for i in range(STEPS):
        before = sess.run(var)
        sess.run(train, {poison: _poison(i)})
        value = sess.run(var)
        out.append({"loss_scale": float(sess.run(scale)),
                    "skipped": bool(np.array_equal(value, before)),
                    "iterations": int(sess.run(opt.iterations))})
  return out


SCENARIOS = {
    "custom_loop_eager": custom_loop_eager,
    "custom_loop_function": custom_loop_function,
    "mirrored": mirrored,
    "fit_policy_loss_scale": fit_policy_loss_scale,
    "graph_session": graph_session,
}
