"""Writes TF 2.2/2.3/2.4 jobs that save, then keep training, for resume tests.

Run under each reference interpreter (each writes only its own files):

    .ref/tf22/bin/python tools/gen_resume_fixtures.py
    .ref/tf23/bin/python tools/gen_resume_fixtures.py
    .ref/tf24/bin/python tools/gen_resume_fixtures.py

Every case trains a small `mixed_float16` model with a GradientTape loop
through a dynamic loss-scale optimizer for `SAVE_AT` steps, saves a checkpoint
the way real jobs did (see CASES), and then trains on for `CONTINUE` more
steps without interruption, recording after every step the optimizer's
iterations, loss scale, good-step counter and whether the step was skipped,
and at the end every weight and slot.
tests/legacy/test_checkpoint_restore_hook.py resumes
each checkpoint in TF 2.21 with the job's own restore code and checks that it
continues the same way.

Step s (1-based) trains on rows [(s-1) % 6 * 8, +8) of the data;
loss = sum((pred - y)**2) / 8; data from numpy.random.RandomState(11):
x = normal((48, 4)), w = normal((4, 1)), y = 0.5 * x @ w, rows 24-31 of y
times 1e4 (that batch overflows), float32. TF 2.2 jobs all use SGD
(see `_case`), whatever their name says.
Under the 2-replica MirroredStrategy each replica takes half of the batch
and its loss is the half's squared-error sum divided by the global batch.
"""

import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

OUT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
    "fixtures", "resume")
VERSION = "tf" + "".join(tf.__version__.split(".")[:2])
K = tf.keras
SAVE_AT, CONTINUE, BATCH = 7, 9, 8
INITIAL_SCALE, GROWTH_STEPS = 2.0**10, 2

if VERSION != "tf22":
  _CPU = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      _CPU, [tf.config.LogicalDeviceConfiguration()] * 2)


def _set_policy(name):
  if VERSION == "tf24":
    K.mixed_precision.set_global_policy(name)
  else:
    K.mixed_precision.experimental.set_policy(name)


def _lso(inner):
  if VERSION == "tf24":
    return K.mixed_precision.LossScaleOptimizer(
        inner, initial_scale=INITIAL_SCALE,
        dynamic_growth_steps=GROWTH_STEPS)
  loss_scale = tf.mixed_precision.experimental.DynamicLossScale(
      initial_loss_scale=INITIAL_SCALE, increment_period=GROWTH_STEPS)
  return K.mixed_precision.experimental.LossScaleOptimizer(inner, loss_scale)


class Block(K.layers.Layer):
  """A custom layer holding two Dense layers (nested layers)."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.first = K.layers.Dense(5, activation="relu", name="first")
    self.second = K.layers.Dense(5, activation="relu", name="second")

  def call(self, x):
    return self.second(self.first(x))


class Net(K.Model):
  """Subclassed: a nested layer, a nested Sequential model, a list of heads."""

  def __init__(self):
    super().__init__(name="net")
    self.block = Block(name="block")
    self.trunk = K.Sequential([K.layers.Dense(4, activation="relu",
                                              name="trunk_dense")],
                              name="trunk")
    self.heads = [K.layers.Dense(3, name="head0"),
                  K.layers.Dense(1, name="head1")]
    self.out = K.layers.Activation("linear", dtype="float32", name="out")

  def call(self, x):
    x = self.trunk(self.block(x))
    for head in self.heads:
      x = head(x)
    return self.out(x)


def _model(kind, build=True):
  if kind == "sequential":
    return K.Sequential([
        K.layers.Dense(6, activation="relu", input_shape=(4,), name="hidden"),
        K.layers.Dense(1, name="logits"),
        K.layers.Activation("linear", dtype="float32", name="out"),
    ], name="seq")
  if kind == "functional":
    inputs = K.Input((4,), name="x")
    h = K.layers.Dense(6, activation="relu", name="d1")(inputs)
    h = K.layers.Dense(1, name="d2")(h)
    outputs = K.layers.Activation("linear", dtype="float32", name="out")(h)
    return K.Model(inputs, outputs, name="func")
  model = Net()
  if build:
    model(tf.zeros((1, 4)))
  return model


def _inner(name):
  if name == "sgd":
    return K.optimizers.SGD(learning_rate=0.05, momentum=0.9)
  return K.optimizers.Adam(learning_rate=0.01)


def _data():
  """Regression data whose 4th batch (of 6) always overflows in float16.

  Skipped steps must not hinge on rounding (TF 2.x and Keras 3 run
  different float16 kernels): the ordinary batches' scaled gradients stay
  orders of magnitude below float16's maximum, the outlier batch's targets
  (x1e4) overflow at any scale the trajectory reaches.
  """
  rng = np.random.RandomState(11)
  x = rng.normal(size=(48, 4)).astype(np.float32)
  w = rng.normal(size=(4, 1)).astype(np.float32)
  y = 0.5 * (x @ w)
  y[3 * BATCH:4 * BATCH] *= 1e4
  return x, y.astype(np.float32)


def _state(opt):
  if hasattr(opt, "dynamic"):
    return (float(tf.convert_to_tensor(opt.loss_scale).numpy()),
            int(tf.convert_to_tensor(opt.dynamic_counter).numpy()))
  loss_scale = opt.loss_scale
  return float(loss_scale()), int(loss_scale._num_good_steps.numpy())  # pylint: disable=protected-access


def _inner_of(opt):
  return getattr(opt, "inner_optimizer", None) or opt._optimizer  # pylint: disable=protected-access


def _trainer(model, opt, strategy):
  """A step function: the job's own training step."""

  def replica_step(xb, yb):
    with tf.GradientTape() as tape:
      pred = model(xb, training=True)
      loss = tf.reduce_sum(tf.square(pred - yb)) / BATCH
      scaled = opt.get_scaled_loss(loss)
    grads = tape.gradient(scaled, model.trainable_variables)
    grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  if strategy is None:
    return tf.function(replica_step)

  @tf.function
  def step(xb, yb):
    per_replica = strategy.experimental_distribute_values_from_function(
        lambda ctx: (tf.split(xb, 2)[ctx.replica_id_in_sync_group],
                     tf.split(yb, 2)[ctx.replica_id_in_sync_group]))
    losses = strategy.run(replica_step, args=per_replica)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

  return step


def _run(step, opt, x, y, first, last):
  """Steps first+1..last; per-step records.

  TF 2.3/2.4 count a skipped step in `iterations` too.
  """
  inner = _inner_of(opt)
  records = []
  for s in range(first + 1, last + 1):
    j = (s - 1) % (len(x) // BATCH)
    scale_before, _ = _state(opt)
    loss = step(tf.constant(x[j * BATCH:(j + 1) * BATCH]),
                tf.constant(y[j * BATCH:(j + 1) * BATCH]))
    scale, counter = _state(opt)
    records.append({"step": s, "loss": float(loss),
                    "iterations": int(inner.iterations.numpy()),
                    # A skipped step halves the scale (never below 1).
                    "skipped": scale < scale_before or (
                        scale == 1. and counter == 0),
                    "loss_scale": scale, "counter": counter,
                    "loss_scale_before": scale_before})
  return records


def _all_layers(model):
  return [m for m in model.submodules
          if isinstance(m, K.layers.Layer) and not isinstance(m, K.Model)]


def _weight_key(model, var):
  for layer in _all_layers(model):
    for w in layer._trainable_weights + layer._non_trainable_weights:  # pylint: disable=protected-access
      if w is var:
        return layer.name + "/" + w.name.split("/")[-1].split(":")[0]
  raise ValueError(var.name)


def _values(v):
  if hasattr(v, "values"):  # A mirrored variable: every copy must agree.
    copies = [c.numpy() for c in v.values]
    assert all(np.array_equal(copies[0], c) for c in copies)
  return v.numpy().tolist()


def _snapshot(model, opt):
  inner = _inner_of(opt)
  scale, counter = _state(opt)
  return {
      "weights": {_weight_key(model, v): _values(v) for v in model.weights},
      "slots": {_weight_key(model, v): {
          n: _values(inner.get_slot(v, n)) for n in inner.get_slot_names()}
                for v in model.trainable_variables},
      "iterations": int(inner.iterations.numpy()),
      "loss_scale": scale, "counter": counter,
  }


# name -> (model kind, optimizer, roots saved, saver, strategy)
CASES = {
    "seq_adam_manager": ("sequential", "adam", "model+optimizer+step+epoch",
                         "manager", False),
    "func_sgd_save": ("functional", "sgd", "model+optimizer", "save", False),
    "nested_adam_save": ("subclassed", "adam", "model+optimizer", "save",
                         False),
    "optonly_sgd_save": ("sequential", "sgd", "optimizer+steps+epochs",
                         "save", False),
    # Keras objects below non-Keras entries: a trainer module, a dict/list.
    "trainer_adam_save": ("functional", "adam",
                          "trainer(model+optimizer+epoch)+step", "save",
                          False),
    "dicts_sgd_manager": ("sequential", "sgd",
                          "dicts(model+optimizer)+step", "manager", False),
}
if VERSION != "tf22":
  CASES["mirrored_sgd_manager"] = ("functional", "sgd", "model+optimizer",
                                   "manager", True)


def _roots(kind, model, opt, step_var, epoch_var):
  if kind.startswith("trainer("):
    trainer = tf.Module()
    trainer.model, trainer.optimizer, trainer.epoch = model, opt, epoch_var
    return {"trainer": trainer, "step": step_var}
  if kind.startswith("dicts("):
    return {"models": {"main": model}, "optimizers": [opt], "step": step_var}
  if kind == "model+optimizer":
    return {"model": model, "optimizer": opt}
  if kind == "model+optimizer+step+epoch":
    return {"model": model, "optimizer": opt, "step": step_var,
            "epoch": epoch_var}
  return {"steps": step_var, "epochs": epoch_var, "optimizer": opt}


def _case(name, model_kind, opt_name, roots, saver, mirrored):
  if VERSION == "tf22":
    # TF 2.2 did not count skipped steps in `iterations`, TF 2.3/2.4 (whose
    # API resumes the job) do; Adam's update depends on that count, SGD's
    # does not.
    opt_name = "sgd"
  K.backend.clear_session()
  tf.random.set_seed(5)
  _set_policy("mixed_float16")
  strategy = (tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
              if mirrored else None)
  scope = strategy.scope() if strategy else _NullScope()
  with scope:
    model = _model(model_kind)
    opt = _lso(_inner(opt_name))
    step_var = tf.Variable(0, dtype=tf.int64, name="step")
    epoch_var = tf.Variable(0, dtype=tf.int64, name="epoch")
  x, y = _data()
  step = _trainer(model, opt, strategy)
  before = _run(step, opt, x, y, 0, SAVE_AT)
  step_var.assign(SAVE_AT)
  epoch_var.assign(1)
  directory = os.path.join(OUT, f"{VERSION}_{name}")
  shutil.rmtree(directory, ignore_errors=True)
  ckpt = tf.train.Checkpoint(**_roots(roots, model, opt, step_var, epoch_var))
  if saver == "manager":
    prefix = tf.train.CheckpointManager(ckpt, directory, max_to_keep=1).save()
  else:
    prefix = ckpt.save(os.path.join(directory, "ckpt"))
  saved = _snapshot(model, opt)
  after = _run(step, opt, x, y, SAVE_AT, SAVE_AT + 1)
  first_step = _snapshot(model, opt)
  after += _run(step, opt, x, y, SAVE_AT + 1, SAVE_AT + CONTINUE)
  final = _snapshot(model, opt)
  resumed = _resume(model_kind, opt_name, roots, strategy, prefix, saved, x, y)
  record = {
      "tensorflow_version": tf.__version__, "case": name,
      "model": model_kind, "optimizer": opt_name, "roots": roots,
      "saver": saver, "replicas": 2 if mirrored else 1,
      "initial_scale": INITIAL_SCALE, "growth_steps": GROWTH_STEPS,
      "checkpoint": os.path.relpath(prefix, OUT),
      "variables": tf.train.list_variables(prefix),
      "saved": saved, "before": before, "after": after,
      "resumed_after": resumed, "first_step": first_step, "final": final,
      "step": SAVE_AT, "epoch": 1,
  }
  if model_kind != "subclassed":
    record["model_json"] = model.to_json()
  with open(directory + ".json", "w") as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write("\n")
  if "model" in roots:  # Slots were saved: resuming changes nothing.
    keys = ("iterations", "loss_scale", "counter", "skipped")
    assert ([[r[k] for k in keys] for r in after] ==
            [[r[k] for k in keys] for r in resumed]), name
  print(name, "skipped before/after:", sum(r["skipped"] for r in before),
        sum(r["skipped"] for r in after), "scale", saved["loss_scale"])


def _resume(model_kind, opt_name, roots, strategy, prefix, saved, x, y):
  """TF's own resume: fresh objects, `restore` before the first step.

  The subclassed model is restored before it is built (TF defers its
  values); an optimizer-only checkpoint gets the weights the job kept
  elsewhere (here: the saved values) and, as in TF, fresh slots.
  """
  scope = strategy.scope() if strategy else _NullScope()
  with scope:
    model = _model(model_kind, build=False)
    opt = _lso(_inner(opt_name))
    step_var = tf.Variable(0, dtype=tf.int64, name="step")
    epoch_var = tf.Variable(0, dtype=tf.int64, name="epoch")
  if "model" not in roots:
    for v in model.weights:
      v.assign(np.asarray(saved["weights"][_weight_key(model, v)],
                          v.dtype.as_numpy_dtype))
  with strategy.scope() if strategy else _NullScope():  # As TF required.
    tf.train.Checkpoint(**_roots(roots, model, opt, step_var,
                                 epoch_var)).restore(prefix)
  assert int(step_var.numpy()) == (0 if roots == "model+optimizer"
                                   else SAVE_AT)
  return _run(_trainer(model, opt, strategy), opt, x, y, SAVE_AT,
              SAVE_AT + CONTINUE)


class _NullScope:

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    return False


def main():
  """Writes every case, or only the cases named on the command line."""
  os.makedirs(OUT, exist_ok=True)
  names = sys.argv[1:] or list(CASES)
  for name in names:
    _case(name, *CASES[name])


if __name__ == "__main__":
  main()
