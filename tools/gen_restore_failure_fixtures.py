"""Records how TF 2.4.4 handles restores that fail, and slots after restore.

Run under the TF 2.4.4 reference interpreter:

    .ref/tf24/bin/python tools/gen_restore_failure_fixtures.py [--step-only]

Writes tests/fixtures/restore_failures/: two small checkpoints and
`tf24_outcomes.json`, what TF 2.4.4 did with them (exception types, when they
were raised, what was assigned). tests/legacy/test_restore_failures.py restores
the
same checkpoints with TF 2.21 after `install()` and checks the same outcome.

* `ckpt_good`: a subclassed model `Net(width=3)` (a custom layer `Lin` with
  `self.w = self.add_weight(...)` and `self.b`, nested in a `Block` layer,
  and a `Lin` head) trained 2 steps with x = ones((2, 4)), loss =
  sum(model(x)), Adam(0.01) in a dynamic `LossScaleOptimizer`
  (initial_scale=2**10, dynamic_growth_steps=2000). Restored into an
  unbuilt `Net(width=4)` (the block's kernel then has another shape), the
  outcome of the first call, the second call, a training step and the
  status checks are recorded.
* `ckpt_bad_slot`: the same job, except that the Adam slot `m` of the head's
  `w` has shape (1, 5) (made with `add_slot`) where `w` is (3, 1). Restored
  into a built `Net(width=3)` whose optimizer has no slots yet, and into one
  whose optimizer made its slots already: when TF raises, and what was
  assigned before it did. (Its job made the slots and set `iterations` to 2
  instead of training: a step would fail on the bad slot.)
* `ckpt_step` (also written alone by `--step-only`, from `ckpt_good`, which
  it leaves as it is): `ckpt_good`'s model and optimizer restored into a
  built `Net(width=3)`, saved with a plain `step = tf.Variable(7, int64)`
  beside them. Restored into an unbuilt `Net(width=4)` with a fresh `step`
  (0): `step`, `iterations`, the loss scale and its counter right after
  the restore and after the first call fails, and the status checks
  (`tf24_step_outcomes.json`). TF 2.4.4 had assigned `step` at restore time.
* `get_slot`: right after restoring `ckpt_good` into a built model and an
  optimizer without slots, `get_slot(head.w, "m")` (before any step).
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
    "fixtures", "restore_failures")
K = tf.keras
X = np.ones((2, 4), np.float32)


class Lin(K.layers.Layer):

  def __init__(self, units, **kwargs):
    super().__init__(**kwargs)
    self.units = units

  def build(self, input_shape):
    self.w = self.add_weight(name="w", shape=(input_shape[-1], self.units),
                             initializer="glorot_uniform")
    self.b = self.add_weight(name="b", shape=(self.units,),
                             initializer="zeros")

  def call(self, x):
    return tf.matmul(x, self.w) + self.b


class Block(K.layers.Layer):

  def __init__(self, width, **kwargs):
    super().__init__(**kwargs)
    self.lin = Lin(width, name="lin")

  def call(self, x):
    return tf.nn.relu(self.lin(x))


class Net(K.Model):

  def __init__(self, width=3):
    super().__init__(name="net")
    self.block = Block(width, name="block")
    self.head = Lin(1, name="head")

  def call(self, x):
    return self.head(self.block(x))


def _optimizer():
  return K.mixed_precision.LossScaleOptimizer(
      K.optimizers.Adam(0.01), initial_scale=2.0**10,
      dynamic_growth_steps=2000)


def _step(model, opt):
  with tf.GradientTape() as tape:
    loss = tf.reduce_sum(model(X))
    scaled = opt.get_scaled_loss(loss)
  grads = opt.get_unscaled_gradients(
      tape.gradient(scaled, model.trainable_variables))
  opt.apply_gradients(zip(grads, model.trainable_variables))


def _outcome(fn):
  try:
    fn()
  except Exception as e:  # pylint: disable=broad-except
    return {"raised": type(e).__name__, "message": str(e)[:400]}
  return {"raised": None}


def _save(name, bad_slot=False):
  model, opt = Net(), _optimizer()
  model(X)
  if bad_slot:
    # A step would fail on it: the slots are made, the step counter set.
    inner = opt.inner_optimizer
    inner.add_slot(model.head.w, "m", initializer=tf.zeros((1, 5)))
    inner._create_all_weights(model.trainable_variables)  # pylint: disable=protected-access
    inner.iterations.assign(2)
  else:
    _step(model, opt)
    _step(model, opt)
  path = os.path.join(OUT, name)
  shutil.rmtree(path, ignore_errors=True)
  tf.train.Checkpoint(model=model, optimizer=opt).save(
      os.path.join(path, "ckpt"))
  return model, opt, tf.train.latest_checkpoint(path)


def _wrong_width(prefix):
  model, opt = Net(width=4), _optimizer()
  status = tf.train.Checkpoint(model=model, optimizer=opt).restore(prefix)
  result = {"restore": {"raised": None}}
  result["first_call"] = _outcome(lambda: model(X))
  result["second_call"] = _outcome(lambda: model(X))
  result["train_step"] = _outcome(lambda: _step(model, opt))
  result["iterations_after"] = int(opt.iterations.numpy())
  result["assert_consumed"] = _outcome(status.assert_consumed)
  result["assert_existing_objects_matched"] = _outcome(
      status.assert_existing_objects_matched)
  return result


def _bad_slot(prefix, slots_first):
  model, opt = Net(), _optimizer()
  model(X)
  if slots_first:
    _step(model, opt)
  before = [v.numpy().copy() for v in model.weights]
  iterations = int(opt.iterations.numpy())
  result = {}
  holder = {}

  def restore():
    holder["status"] = tf.train.Checkpoint(model=model,
                                           optimizer=opt).restore(prefix)

  result["restore"] = _outcome(restore)
  result["weights_changed_at_restore"] = any(
      not np.array_equal(a, v.numpy()) for a, v in zip(before, model.weights))
  result["iterations_changed_at_restore"] = (
      int(opt.iterations.numpy()) != iterations)
  result["train_step"] = _outcome(lambda: _step(model, opt))
  return result


def _get_slot(prefix, saved_opt, saved_model):
  model, opt = Net(), _optimizer()
  model(X)
  tf.train.Checkpoint(model=model, optimizer=opt).restore(prefix)
  result = {}
  try:
    slot = opt.get_slot(model.head.w, "m")
  except Exception as e:  # pylint: disable=broad-except
    return {"raised": type(e).__name__, "message": str(e)[:400]}
  want = saved_opt.get_slot(saved_model.head.w, "m").numpy()
  result["raised"] = None
  result["equals_saved"] = bool(np.array_equal(slot.numpy(), want))
  result["value"] = slot.numpy().tolist()
  return result


def _save_step(good):
  """`ckpt_good`'s job saved with a plain step variable beside it."""
  model, opt = Net(), _optimizer()
  model(X)
  tf.train.Checkpoint(model=model, optimizer=opt).restore(
      good).assert_existing_objects_matched()
  opt.inner_optimizer._create_all_weights(model.trainable_variables)  # pylint: disable=protected-access
  path = os.path.join(OUT, "ckpt_step")
  shutil.rmtree(path, ignore_errors=True)
  step = tf.Variable(7, dtype=tf.int64)
  tf.train.Checkpoint(model=model, optimizer=opt, step=step).save(
      os.path.join(path, "ckpt"))
  return tf.train.latest_checkpoint(path)


def _step_wrong_width(prefix):
  """What the wrong-width restore of `ckpt_step` left in each object."""
  model, opt = Net(width=4), _optimizer()
  step = tf.Variable(0, dtype=tf.int64)
  status = tf.train.Checkpoint(model=model, optimizer=opt,
                               step=step).restore(prefix)

  def values():
    return {"step": int(step.numpy()),
            "iterations": int(opt.iterations.numpy()),
            "loss_scale": float(opt.loss_scale.numpy()),
            "counter": int(opt.dynamic_counter.numpy())}

  result = {"after_restore": values()}
  result["first_call"] = _outcome(lambda: model(X))
  result["after_first_call"] = values()
  result["assert_consumed"] = _outcome(status.assert_consumed)
  result["assert_existing_objects_matched"] = _outcome(
      status.assert_existing_objects_matched)
  return result


def _write_step_outcomes(good):
  step_prefix = _save_step(good)
  outcomes = {"tensorflow_version": tf.__version__,
              "saved_step": 7,
              "wrong_width": _step_wrong_width(step_prefix)}
  with open(os.path.join(OUT, "tf24_step_outcomes.json"), "w") as f:
    json.dump(outcomes, f, indent=1, sort_keys=True)
  print(json.dumps(outcomes, indent=1))


def main():
  os.makedirs(OUT, exist_ok=True)
  if "--step-only" in sys.argv[1:]:
    _write_step_outcomes(
        tf.train.latest_checkpoint(os.path.join(OUT, "ckpt_good")))
    return
  good_model, good_opt, good = _save("ckpt_good")
  _, _, bad = _save("ckpt_bad_slot", bad_slot=True)
  outcomes = {
      "tensorflow_version": tf.__version__,
      "saved_iterations": int(good_opt.iterations.numpy()),
      "saved_loss_scale": float(good_opt.loss_scale.numpy()),
      "saved_weights": {v.name: v.numpy().tolist()
                        for v in good_model.weights},
      "wrong_width": _wrong_width(good),
      "bad_slot_fresh_optimizer": _bad_slot(bad, slots_first=False),
      "bad_slot_slots_exist": _bad_slot(bad, slots_first=True),
      "get_slot_after_restore": _get_slot(good, good_opt, good_model),
  }
  with open(os.path.join(OUT, "tf24_outcomes.json"), "w") as f:
    json.dump(outcomes, f, indent=1, sort_keys=True)
  print(json.dumps({k: v for k, v in outcomes.items()
                    if k != "saved_weights"}, indent=1))
  _write_step_outcomes(good)


if __name__ == "__main__":
  main()
