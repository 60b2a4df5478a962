"""TF 2.2-2.4 checkpoints resume into tf_keras's current optimizer classes.

An unchanged TF 2.x job on the tf_keras target builds `tf.keras.optimizers.
Adam(...)`, which is tf_keras's current class, not the OptimizerV2 that wrote
its checkpoints. Its own `tf.train.Checkpoint.restore` must still restore
every value exactly: weights, iterations, learning rate, hyperparameters,
slots (also when they are created at the first step, as TF 2.x deferred
them), the loss scale and its counter; under 2 replicas too. Without
`install()`, tf_keras refuses such checkpoints.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp

_FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures",
                         "legacy")
CASES = ("tf22_func_adam_dynamic", "tf22_seq_sgd_dynamic",
         "tf23_func_sgd_fixed", "tf23_seq_adam_dynamic",
         "tf24_func_adam_dynamic", "tf24_seq_sgd_fixed")
# TF 2.x slot names -> tf_keras's current ones, for the fixtures' optimizers.
_SLOT = {"m": "m", "v": "v", "momentum": "m"}


pytestmark = pytest.mark.usefixtures("installed")


def _meta(case):
  with open(os.path.join(_FIXTURES, f"ckpt_{case}.json")) as f:
    return json.load(f)


def _optimizer(meta):
  """The job's optimizer, as its TF 2.x code builds it (current classes)."""
  config = dict(meta["inner_config"])
  config.pop("decay")  # Not an argument of the current classes; it was 0.
  inner = type(tf.keras.optimizers.get(meta["optimizer"])).from_config(config)
  assert not isinstance(inner, tf.keras.optimizers.legacy.Optimizer)
  dynamic = meta["loss_scale_kind"] == "dynamic"
  if meta["lso_api"] == "v2":
    kwargs = {"dynamic_growth_steps": meta["growth_steps"]} if dynamic else {}
    return tf.keras.mixed_precision.LossScaleOptimizer(
        inner, dynamic=dynamic, initial_scale=meta["initial_scale"], **kwargs)
  loss_scale = (tf.mixed_precision.experimental.DynamicLossScale(
      meta["initial_scale"], meta["growth_steps"]) if dynamic
                else meta["initial_scale"])
  return tf.keras.mixed_precision.experimental.LossScaleOptimizer(
      inner, loss_scale)


def _prefix(meta):
  location = os.path.join(_FIXTURES, meta["location"])
  return (tf.train.latest_checkpoint(location) if os.path.isdir(location)
          else location)


def _slot(opt, var, tf2_name):
  wanted = f"{_SLOT[tf2_name]}/{var.name}"
  found = [v for v in opt.inner_optimizer.variables if v.name == wanted]
  assert len(found) == 1, (wanted, [v.name for v in opt.variables])
  return found[0]


def _assert_restored(model, opt, meta):
  assert int(opt.iterations.numpy()) == meta["iterations"]
  assert float(opt.loss_scale.numpy()) == meta["loss_scale"]
  if meta["counter"] is not None:
    assert int(opt.dynamic_counter.numpy()) == meta["counter"]
  np.testing.assert_array_equal(
      np.float32(opt.learning_rate.numpy()),
      np.float32(meta["hyperparameters"]["learning_rate"]))
  for var in model.trainable_variables:
    name = var.name.split(":")[0]
    np.testing.assert_array_equal(var.numpy(), meta["weights"][name])
    for slot, value in meta["slots"][name].items():
      for component in getattr(_slot(opt, var, slot), "values",
                               [_slot(opt, var, slot)]):
        np.testing.assert_array_equal(component.numpy(), value,
                                      err_msg=f"{name} {slot}")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("built", [False, True],
                         ids=["slots_at_first_step", "slots_exist"])
def test_checkpoint_restores_exactly(case, built):
  meta = _meta(case)
  model = tf.keras.models.model_from_json(meta["model_json"])
  opt = _optimizer(meta)
  if built:
    opt.inner_optimizer.build(model.trainable_variables)
  status = tf.train.Checkpoint(model=model, optimizer=opt).restore(
      _prefix(meta))
  status.assert_existing_objects_matched()
  if not built:
    # The job's first step builds the slots; the values land then.
    opt.inner_optimizer.build(model.trainable_variables)
  status.assert_consumed()
  _assert_restored(model, opt, meta)


@pytest.mark.parametrize("case", ["tf24_func_adam_dynamic",
                                  "tf23_seq_adam_dynamic"])
def test_restore_then_train_in_mirrored_strategy(case, mirrored_strategy):
  meta = _meta(case)
  with mirrored_strategy.scope():
    model = tf.keras.models.model_from_json(meta["model_json"])
    opt = _optimizer(meta)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
  manager = tf.train.CheckpointManager(
      ckpt, os.path.join(_FIXTURES, meta["location"]), max_to_keep=3)
  status = ckpt.restore(manager.latest_checkpoint or _prefix(meta))
  with mirrored_strategy.scope():
    opt.inner_optimizer.build(model.trainable_variables)
  status.assert_consumed()
  _assert_restored(model, opt, meta)

  x = tf.ones((4,) + tuple(model.input_shape[1:]))

  @tf.function
  def step():
    def replica_step():
      with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.cast(model(x, training=True), tf.float32))
        scaled = opt.get_scaled_loss(loss)
      grads = opt.get_unscaled_gradients(
          tape.gradient(scaled, model.trainable_variables))
      opt.apply_gradients(zip(grads, model.trainable_variables))
    mirrored_strategy.run(replica_step)

  step()
  assert int(opt.iterations.numpy()) == meta["iterations"] + 1
  if meta["counter"] is not None and meta["counter"] + 1 < meta["growth_steps"]:
    assert int(opt.dynamic_counter.numpy()) == meta["counter"] + 1
    assert float(opt.loss_scale.numpy()) == meta["loss_scale"]


def test_without_install_tf_keras_refuses_the_checkpoint():
  meta = _meta("tf24_func_adam_dynamic")
  mp.uninstall()
  try:
    model = tf.keras.models.model_from_json(meta["model_json"])
    config = dict(meta["inner_config"])
    config.pop("decay")
    opt = tf.keras.optimizers.Adam.from_config(config)
    with pytest.raises(ValueError, match="legacy TF-Keras optimizer"):
      tf.train.Checkpoint(model=model, optimizer=opt).restore(_prefix(meta))
  finally:
    mp.install()


def _tf2x_checkpoint(tmp_path, **adam_kwargs):
  """A checkpoint in TF 2.4's layout (tf_keras's OptimizerV2 writes it)."""
  model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
  legacy = tf.keras.optimizers.legacy.Adam(**adam_kwargs)
  legacy.apply_gradients(
      zip([tf.ones_like(v) for v in model.trainable_variables],
          model.trainable_variables))
  path = tf.train.Checkpoint(model=model, optimizer=legacy).save(
      str(tmp_path / "ckpt"))
  return model, legacy, path


def test_hyperparameters_are_restored_as_tf2x_restored_them(tmp_path):
  old_model, _, path = _tf2x_checkpoint(tmp_path, learning_rate=0.25,
                                        beta_1=0.5, beta_2=0.75)
  model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
  opt = tf.keras.optimizers.Adam()  # The job's defaults: 0.001, 0.9, 0.999.
  status = tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
  opt.build(model.trainable_variables)
  status.assert_consumed()
  assert (float(opt.learning_rate), opt.beta_1, opt.beta_2) == (0.25, 0.5,
                                                                0.75)
  assert int(opt.iterations) == 1
  for a, b in zip(old_model.weights, model.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_nonzero_decay_is_named_in_a_warning(tmp_path, tf_log):
  _, _, path = _tf2x_checkpoint(tmp_path, decay=0.01)
  model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
  opt = tf.keras.optimizers.Adam()
  tf.train.Checkpoint(model=model, optimizer=opt).restore(path)
  assert any("its decay (0.01" in m and "not restored" in m for m in tf_log)


def test_slot_without_counterpart_is_refused(tmp_path):
  model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
  legacy = tf.keras.optimizers.legacy.RMSprop(momentum=0.5, centered=True)
  legacy.apply_gradients(
      zip([tf.ones_like(v) for v in model.trainable_variables],
          model.trainable_variables))
  path = tf.train.Checkpoint(model=model, optimizer=legacy).save(
      str(tmp_path / "ckpt"))
  twin = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,))])
  opt = tf.keras.optimizers.Adam()  # Not what wrote it: no "rms" slot.
  with pytest.raises(ValueError, match="slot 'rms' has no counterpart"):
    tf.train.Checkpoint(model=twin, optimizer=opt).restore(path)


def test_slots_first_built_in_a_loop_of_a_function_are_restored():
  # Model Garden's first step runs in a `tf.range` loop of a `tf.function`:
  # the slots are then created under the loop's name scope ("while/m/...").
  meta = _meta("tf24_func_adam_dynamic")
  model = tf.keras.models.model_from_json(meta["model_json"])
  opt = _optimizer(meta)
  status = tf.train.Checkpoint(model=model, optimizer=opt).restore(
      _prefix(meta))

  @tf.function
  def first_steps():
    for _ in tf.range(1):
      opt.inner_optimizer.build(model.trainable_variables)

  first_steps()
  names = [v.name for v in opt.inner_optimizer.variables]
  assert any(name.startswith("while/m/") for name in names), names
  status.assert_consumed()
  for var in model.trainable_variables:
    name = var.name.split(":")[0]
    for slot, value in meta["slots"][name].items():
      (found,) = [v for v in opt.inner_optimizer.variables
                  if v.name.endswith(f"/{_SLOT[slot]}/{var.name}")]
      np.testing.assert_array_equal(found.numpy(), value)


@pytest.mark.parametrize("mode", ["eager", "function", "mirrored"])
def test_tf24_members_of_the_current_optimizers_wrapper(mode, request):
  # tf_keras's LossScaleOptimizerV3 lacks them; TF 2.4 jobs call them
  # (hooks/tf_keras/tf24_members.py): slots by TF 2.x names, `weights` in
  # TF 2.4's layout (every m, then every v), clipping, hyperparameters.
  strategy = (request.getfixturevalue("mirrored_strategy")
              if mode == "mirrored" else tf.distribute.get_strategy())
  with strategy.scope():
    var = tf.Variable([1.0, 2.0], name="w")
    # A layer named like a slot: its slots are "m/v/b", "v/v/b".
    bias = tf.Variable([0.5], name="v/b")
    opt = tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.Adam(0.1, beta_1=0.8, clipnorm=3.0))

  def step():
    opt.apply_gradients([(tf.constant([0.5, -1.0]), var),
                         (tf.constant([2.0]), bias)])

  if mode == "eager":
    step()
  elif mode == "function":
    tf.function(step)()
  else:
    tf.function(lambda: strategy.run(step))()
  assert opt.beta_1 == 0.8 and opt.clipnorm == 3.0
  assert opt.clipvalue is None and opt.global_clipnorm is None
  m, v = opt.get_slot(var, "m"), opt.get_slot(var, "v")
  assert m.name.split(":")[0].endswith("m/w") and v.shape == var.shape
  with pytest.raises(KeyError, match="No slot 'rms'"):
    opt.get_slot(var, "rms")
  assert not hasattr(opt, "get_slot_names")  # See tf24_members' docstring.
  weights = opt.weights
  assert weights[0] is opt.inner_optimizer.iterations
  assert [w.name.split(":")[0] for w in weights[1:]] == [
      "m/w", "m/v/b", "v/w", "v/v/b"]
  values = opt.get_weights()
  assert int(values[0]) == 1
  np.testing.assert_array_equal(values[1], m.numpy())
  values[1] = values[1] + 1.0
  opt.set_weights(values)
  np.testing.assert_array_equal(m.numpy(), values[1])
  with pytest.raises(ValueError, match="TF 2.4's layout"):
    opt.set_weights(values[:-1])
  # A checkpoint of it saves (TF takes `get_slot_names` for OptimizerV2's).
  tf.train.Checkpoint(optimizer=opt, var=var, bias=bias).write(
      os.path.join(request.getfixturevalue("tmp_path"), "ckpt"))
