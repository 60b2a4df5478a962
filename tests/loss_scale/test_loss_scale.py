"""Tests of LossScale / FixedLossScale / DynamicLossScale against TF 2.3.4.

Trajectories and checkpoints under tests/fixtures/loss_scale/ were recorded by
real TF 2.3.4 (tools/gen_tf23_loss_scale_fixtures.py). Every stateful behaviour
runs eagerly, in a tf.function, under a 2-replica MirroredStrategy and in a
tf.compat.v1 session.
"""

import json
import math

from absl.testing import parameterized
import numpy as np
import pytest
import tensorflow as tf

import tf_mixed_precision_compat as mp
from tests import testing

MODES = ("eager", "function", "mirrored", "graph")

with open(testing.fixture_path("loss_scale", "trajectories.json")) as f:
  TRAJECTORIES = json.load(f)
with open(testing.fixture_path("loss_scale", "checkpoints.json")) as f:
  CHECKPOINTS = json.load(f)


def _decode(value):
  return float(value) if isinstance(value, str) else value


def make_grads(step, dtype):
  """Builds the gradient list a recorded step describes."""
  grads = []
  for entry in step:
    if entry is None:
      grads.append(None)
    elif isinstance(entry, dict):
      values = [_decode(v) for v in entry["sparse"]]
      grads.append(
          tf.IndexedSlices(
              tf.constant(values, dtype=dtype), tf.range(len(values)),
              tf.constant([len(values)])))
    else:
      grads.append(tf.constant([_decode(v) for v in entry], dtype=dtype))
  return grads


def mirrored_strategy():
  return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def run_trajectory(mode, args, steps, dtype):
  """Replays `steps` through a fresh DynamicLossScale in `mode`.

  Returns:
    A list of [should_apply, scale, good_steps] per step.
  """
  record = []
  if mode == "graph":
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      ls = mp.DynamicLossScale(**args)
      ops = [ls.update(make_grads(s, dtype)) for s in steps]
      sess.run(tf.compat.v1.global_variables_initializer())
      for update_op, apply in ops:
        _, applied = sess.run([update_op, apply])
        scale, good = sess.run([ls(), ls._num_good_steps])
        record.append([bool(applied), float(scale), int(good)])
    return record

  strategy = mirrored_strategy() if mode == "mirrored" else None
  if strategy:
    with strategy.scope():
      ls = mp.DynamicLossScale(**args)
  else:
    ls = mp.DynamicLossScale(**args)
  for s in steps:
    if mode == "eager":
      _, applied = ls.update(make_grads(s, dtype))
    elif mode == "function":
      applied = tf.function(lambda s=s: ls.update(make_grads(s, dtype))[1])()
    else:
      with strategy.scope():
        # Every replica computes the same gradients; update runs in
        # cross-replica context on the per-replica values.
        grads = strategy.run(lambda s=s: make_grads(s, dtype))
        _, applied = ls.update(grads)
    record.append(
        [bool(applied), float(ls().numpy()), int(ls._num_good_steps.numpy())])
  return record


class TrajectoryTest(parameterized.TestCase):

  @parameterized.named_parameters(
      testing.named_product(case=sorted(TRAJECTORIES), mode=MODES))
  def test_matches_tf23_recording(self, case, mode):
    fixture = TRAJECTORIES[case]
    record = run_trajectory(mode, fixture["args"], fixture["steps"],
                            fixture["dtype"])
    self.assertEqual(record, fixture["record"])


class DynamicSemanticsTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(m, m) for m in MODES])
  def test_shrink_is_a_true_division_in_every_mode(self, mode):
    # 16/3/3 in float32; Grappler would turn `x / 3` into `x * (1/3)` inside
    # graphs and get 1.7777779 instead.
    expected = np.float32(np.float32(16.) / np.float32(3.)) / np.float32(3.)
    record = run_trajectory(mode, {"initial_loss_scale": 16.,
                                   "increment_period": 5, "multiplier": 3.},
                            [[[np.inf]], [[np.nan]]], "float32")
    self.assertEqual(record[-1][1], float(expected))

  def test_scale_never_grows_to_inf(self):
    ls = mp.DynamicLossScale(initial_loss_scale=2.**127, increment_period=1,
                             multiplier=4.)
    for _ in range(3):
      ls.update([tf.constant(1.)])
    self.assertEqual(float(ls()), 2.**127)
    self.assertEqual(int(ls._num_good_steps), 0)

  def test_scale_never_drops_below_one(self):
    ls = mp.DynamicLossScale(initial_loss_scale=3., increment_period=5,
                             multiplier=2.)
    for _ in range(4):
      _, apply = ls.update([tf.constant(np.nan)])
      self.assertFalse(bool(apply))
    self.assertEqual(float(ls()), 1.)

  @parameterized.named_parameters(
      ("single_tensor", lambda: tf.constant([1., np.inf])),
      ("dict", lambda: {"a": tf.constant(1.), "b": [tf.constant(np.inf)]}),
      ("tuple_with_none", lambda: (None, tf.constant([np.nan]))),
  )
  def test_nested_structures_are_flattened(self, make):
    ls = mp.DynamicLossScale(initial_loss_scale=8., increment_period=1)
    _, apply = ls.update(make())
    self.assertFalse(bool(apply))
    self.assertEqual(float(ls()), 4.)

  def test_all_none_gradients_count_as_finite(self):
    ls = mp.DynamicLossScale(initial_loss_scale=8., increment_period=2)
    _, apply = ls.update([None, None])
    self.assertTrue(bool(apply))
    self.assertEqual(int(ls._num_good_steps.numpy()), 1)

  def test_eager_update_returns_none_op_and_bool_tensor(self):
    ls = mp.DynamicLossScale()
    update_op, apply = ls.update([tf.constant(1.)])
    self.assertIsNone(update_op)
    self.assertEqual(apply.dtype, tf.bool)

  def test_graph_update_returns_bool_tensor_that_runs_the_update(self):
    # TF 2.4's update returned its conditional's bool output in graphs, so
    # TF 2.4 code (and its tests) could pass it to tf.identity.
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      ls = mp.DynamicLossScale(initial_loss_scale=4., increment_period=1)
      update_op, apply = ls.update([tf.constant(1.)])
      self.assertIsInstance(update_op, tf.Tensor)
      self.assertEqual(update_op.dtype, tf.bool)
      identity = tf.identity(update_op)
      sess.run(tf.compat.v1.global_variables_initializer())
      self.assertEqual(sess.run(ls()), 4.)  # Nothing runs until asked.
      sess.run(identity)
      self.assertEqual(sess.run(ls()), 8.)
      self.assertTrue(sess.run(apply))

  def test_function_traced_once_keeps_updating(self):
    ls = mp.DynamicLossScale(initial_loss_scale=2., increment_period=1)
    step = tf.function(lambda g: ls.update([g])[1])
    for _ in range(3):
      step(tf.constant(1.))
    self.assertEqual(float(ls()), 16.)
    self.assertFalse(bool(step(tf.constant(np.inf))))
    self.assertEqual(float(ls()), 8.)
    self.assertEqual(step.experimental_get_tracing_count(), 1)

  def test_properties_and_config(self):
    ls = mp.DynamicLossScale(initial_loss_scale=128, increment_period=7,
                             multiplier=3)
    self.assertEqual(ls.initial_loss_scale, 128.)
    self.assertIsInstance(ls.initial_loss_scale, float)
    self.assertEqual(ls.increment_period, 7)
    self.assertIsInstance(ls.increment_period, int)
    self.assertEqual(ls.multiplier, 3.)
    config = ls.get_config()
    self.assertEqual(config, {"initial_loss_scale": 128., "increment_period": 7,
                              "multiplier": 3.})
    clone = mp.DynamicLossScale.from_config(config)
    self.assertEqual(clone.get_config(), config)
    self.assertEqual(float(clone()), 128.)

  def test_repr_eager_and_graph(self):
    ls = mp.DynamicLossScale(initial_loss_scale=4, increment_period=3)
    ls.update([tf.constant(1.)])
    self.assertEqual(
        repr(ls), "DynamicLossScale(current_loss_scale=4.0, num_good_steps=1, "
        "initial_loss_scale=4.0, increment_period=3, multiplier=2.0)")
    with tf.Graph().as_default():
      graph_ls = mp.DynamicLossScale(initial_loss_scale=4, increment_period=3)
      self.assertEqual(
          repr(graph_ls), "DynamicLossScale(initial_loss_scale=4.0, "
          "increment_period=3, multiplier=2.0)")

  def test_variables_are_non_trainable_and_not_aggregated(self):
    ls = mp.DynamicLossScale()
    for v in (ls._current_loss_scale, ls._num_good_steps):
      self.assertFalse(v.trainable)
      self.assertEqual(v.aggregation, tf.VariableAggregation.NONE)
    self.assertEqual(ls._current_loss_scale.dtype, tf.float32)
    self.assertEqual(ls._num_good_steps.dtype, tf.int64)

  @parameterized.named_parameters(
      ("nan_scale", {"initial_loss_scale": math.nan}, "initial_loss_scale"),
      ("inf_scale", {"initial_loss_scale": math.inf}, "initial_loss_scale"),
      ("zero_scale", {"initial_loss_scale": 0}, "initial_loss_scale"),
      ("str_scale", {"initial_loss_scale": "8"}, "initial_loss_scale"),
      ("bool_scale", {"initial_loss_scale": True}, "initial_loss_scale"),
      ("zero_period", {"increment_period": 0}, "increment_period"),
      ("fraction_period", {"increment_period": 2.5}, "increment_period"),
      ("str_period", {"increment_period": "10"}, "increment_period"),
      ("multiplier_one", {"multiplier": 1.}, "multiplier"),
      ("nan_multiplier", {"multiplier": math.nan}, "multiplier"),
      ("tensor_multiplier", {"multiplier": tf.constant(2.)}, "multiplier"),
  )
  def test_rejects_nonsense_arguments(self, kwargs, argument):
    with self.assertRaisesRegex(ValueError, argument):
      mp.DynamicLossScale(**kwargs)

  def test_update_in_replica_context_raises(self):
    strategy = mirrored_strategy()
    with strategy.scope():
      ls = mp.DynamicLossScale()
    with self.assertRaisesRegex(RuntimeError, "cross-replica context"):
      strategy.run(lambda: ls.update([tf.constant(1.)]))

  def test_per_replica_grads_outside_scope_raise(self):
    strategy = mirrored_strategy()
    grads = testing.per_replica(strategy, [1., 2.])
    ls = mp.DynamicLossScale()
    with self.assertRaisesRegex(ValueError, "strategy.scope"):
      ls.update([grads])
    self.assertEqual(float(ls()), 2.**15)


class MirroredTest(parameterized.TestCase):

  @parameterized.named_parameters(
      testing.named_product(bad_replica=(0, 1), use_function=(False, True),
                            bad_value=(np.inf, np.nan)))
  def test_one_bad_replica_skips_on_all(self, bad_replica, use_function,
                                        bad_value):
    strategy = mirrored_strategy()
    self.assertEqual(strategy.num_replicas_in_sync, 2)
    with strategy.scope():
      ls = mp.DynamicLossScale(initial_loss_scale=64., increment_period=2)
    values = [1., 1.]
    values[bad_replica] = bad_value

    def step(grads):
      return ls.update([grads, None])[1]

    if use_function:
      step = tf.function(step)
    with strategy.scope():
      apply = step(testing.per_replica(strategy, values))
      self.assertFalse(bool(apply))
      # Shrunk exactly once, identically on every replica.
      self.assertEqual(
          [float(v) for v in strategy.experimental_local_results(
              strategy.run(ls))], [32., 32.])
      apply = step(testing.per_replica(strategy, [1., 2.]))
    self.assertTrue(bool(apply))
    self.assertEqual(int(ls._num_good_steps.numpy()), 1)

  def test_variables_are_mirrored(self):
    strategy = mirrored_strategy()
    with strategy.scope():
      ls = mp.DynamicLossScale()
    self.assertIsInstance(ls._current_loss_scale,
                          tf.distribute.DistributedValues)
    self.assertLen(strategy.experimental_local_results(ls._current_loss_scale),
                   2)

  def test_graph_mode_v1_strategy(self):
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      strategy = tf.compat.v1.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
      with strategy.scope():
        ls = mp.DynamicLossScale(initial_loss_scale=8., increment_period=1)

        def replica_grad():
          ctx = tf.distribute.get_replica_context()
          return tf.where(
              tf.equal(ctx.replica_id_in_sync_group, 1), np.inf, 1.)

        grads = strategy.extended.call_for_each_replica(replica_grad)
        update_op, apply = ls.update([grads])
      sess.run(tf.compat.v1.global_variables_initializer())
      _, applied = sess.run([update_op, apply])
      self.assertFalse(applied)
      self.assertEqual(sess.run(ls()), 4.)


def _restore(prefix, ls, **extra):
  return tf.train.Checkpoint(loss_scale=ls, **extra).read(prefix)


class CheckpointTest(parameterized.TestCase):

  @parameterized.named_parameters(
      testing.named_product(name=("eager_ckpt", "graph_ckpt"),
                            mode=("eager", "mirrored", "graph")))
  def test_tf23_checkpoint_restores_exactly(self, name, mode):
    fixture = CHECKPOINTS[name]
    prefix = testing.fixture_path("loss_scale", fixture["prefix"])
    if mode == "graph":
      with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        ls = mp.DynamicLossScale()
        status = _restore(prefix, ls)
        status.assert_consumed().run_restore_ops(sess)
        scale, good = sess.run([ls(), ls._num_good_steps])
    else:
      if mode == "mirrored":
        with mirrored_strategy().scope():
          ls = mp.DynamicLossScale()
      else:
        ls = mp.DynamicLossScale()
      _restore(prefix, ls).assert_consumed()
      scale, good = ls().numpy(), ls._num_good_steps.numpy()
    self.assertEqual(scale, np.float32(fixture["current_loss_scale"]))
    self.assertEqual(good, fixture["good_steps"])

  def test_restore_before_create(self):
    fixture = CHECKPOINTS["eager_ckpt"]
    root = tf.train.Checkpoint()
    status = root.read(
        testing.fixture_path("loss_scale", fixture["prefix"]))
    root.loss_scale = mp.DynamicLossScale()
    status.assert_consumed()
    self.assertEqual(float(root.loss_scale()), fixture["current_loss_scale"])
    self.assertEqual(int(root.loss_scale._num_good_steps),
                     fixture["good_steps"])

  def test_fixed_loss_scale_checkpoint_has_no_loss_scale_variables(self):
    fixture = CHECKPOINTS["fixed_ckpt"]
    v = tf.Variable(0.)
    _restore(testing.fixture_path("loss_scale", fixture["prefix"]),
             mp.FixedLossScale(128), v=v).assert_consumed()
    self.assertEqual(float(v), fixture["v"])

  @parameterized.named_parameters(("eager", "eager"), ("graph", "graph"))
  def test_ours_writes_tf23_layout(self, mode):
    path = self.create_tempdir().full_path + "/ckpt"
    if mode == "graph":
      with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        ls = mp.DynamicLossScale(initial_loss_scale=512., increment_period=3)
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(ls._num_good_steps.assign(2))
        prefix = tf.compat.v1.train.Checkpoint(loss_scale=ls).write(
            path, session=sess)
    else:
      ls = mp.DynamicLossScale(initial_loss_scale=512., increment_period=3)
      ls._num_good_steps.assign(2)
      prefix = tf.train.Checkpoint(loss_scale=ls).write(path)
    fixture = CHECKPOINTS["eager_ckpt"]
    ours = {name for name, _ in tf.train.list_variables(prefix)}
    self.assertEqual(ours, set(fixture["keys"]))
    reader = tf.train.load_checkpoint(prefix)
    key = "loss_scale/{}/.ATTRIBUTES/VARIABLE_VALUE"
    self.assertEqual(reader.get_tensor(key.format("current_loss_scale")), 512.)
    self.assertEqual(reader.get_tensor(key.format("good_steps")), 2)
    self.assertEqual(reader.get_variable_to_dtype_map()[
        key.format("good_steps")], tf.int64)

  def test_weights_are_kept_per_graph(self):
    eager_ls = mp.DynamicLossScale()
    with tf.Graph().as_default() as graph:
      graph_ls = mp.DynamicLossScale()
      # In the graph it was created in, the graph loss scale has its weights,
      # the eager one has none.
      self.assertEqual(set(graph_ls._trackable_children()),
                       {"current_loss_scale", "good_steps"})
      self.assertEqual(set(eager_ls._trackable_children()), set())
    self.assertIs(graph_ls._current_loss_scale.graph, graph)
    self.assertEqual(set(eager_ls._trackable_children()),
                     {"current_loss_scale", "good_steps"})
    self.assertEqual(set(graph_ls._trackable_children()), set())
    self.assertIsNone(graph_ls._lookup_dependency("current_loss_scale"))

  def test_tf_function_sees_the_eager_weights(self):
    ls = mp.DynamicLossScale()

    @tf.function
    def children():
      return tf.constant(sorted(ls._trackable_children()))

    self.assertEqual([c.decode() for c in children().numpy()],
                     ["current_loss_scale", "good_steps"])

  def test_duplicate_weight_raises(self):
    ls = mp.DynamicLossScale()
    with self.assertRaisesRegex(RuntimeError, "Duplicate variables"):
      ls._add_weight("good_steps", 0, tf.int64)


class FixedLossScaleTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(m, m) for m in MODES])
  def test_update_never_changes_and_always_applies(self, mode):
    if mode == "graph":
      with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        ls = mp.FixedLossScale(16)
        update_op, apply = ls.update([tf.constant(np.inf)])
        self.assertIsInstance(update_op, tf.Operation)
        self.assertIs(apply, True)
        self.assertEqual(sess.run(ls()), 16.)
      return
    ls = mp.FixedLossScale(16)
    if mode == "function":
      result = tf.function(lambda: ls.update([tf.constant(np.inf)])[1])()
      self.assertTrue(bool(result))
    elif mode == "mirrored":
      strategy = mirrored_strategy()
      with strategy.scope():
        apply = ls.update([testing.per_replica(strategy, [np.inf, 1.])])[1]
        scales = strategy.experimental_local_results(strategy.run(ls))
      self.assertIs(apply, True)
      self.assertEqual([float(s) for s in scales], [16., 16.])
    else:
      update_op, apply = ls.update([tf.constant(np.inf)])
      self.assertIsNone(update_op)
      self.assertIs(apply, True)
    self.assertEqual(float(ls()), 16.)
    self.assertEqual(ls().dtype, tf.float32)

  def test_repr_and_config(self):
    ls = mp.FixedLossScale(3)
    self.assertEqual(repr(ls), "FixedLossScale(3.0)")
    self.assertEqual(ls.get_config(), {"loss_scale_value": 3.0})
    self.assertEqual(repr(mp.FixedLossScale.from_config(ls.get_config())),
                     "FixedLossScale(3.0)")

  @parameterized.named_parameters(
      ("string", "8", "loss_scale_value must be a Python int or float."),
      ("none", None, "loss_scale_value must be a Python int or float."),
      ("bool", True, "loss_scale_value must be a Python int or float."),
      ("tensor", tf.constant(2.), "loss_scale_value must be a Python int or"),
      ("below_one", 0.5, "loss_scale_value must be at least 1."),
      ("negative", -4, "loss_scale_value must be at least 1."),
      ("nan", math.nan, "loss_scale_value must be finite"),
      ("inf", math.inf, "loss_scale_value must be finite"),
  )
  def test_rejects(self, value, message):
    with self.assertRaises(ValueError) as cm:
      mp.FixedLossScale(value)
    self.assertIn(message, str(cm.exception))

  def test_abstract_base_cannot_be_instantiated(self):
    with self.assertRaises(TypeError):
      mp.LossScale()


class HelpersTest(parameterized.TestCase):

  def test_get(self):
    self.assertIsNone(mp.get(None))
    fixed = mp.get(8)
    self.assertIsInstance(fixed, mp.FixedLossScale)
    self.assertEqual(float(fixed()), 8.)
    self.assertEqual(float(mp.get(2.5)()), 2.5)
    dynamic = mp.get("dynamic")
    self.assertIsInstance(dynamic, mp.DynamicLossScale)
    self.assertEqual(dynamic.get_config(), mp.DynamicLossScale().get_config())
    self.assertIs(mp.get(dynamic), dynamic)
    self.assertEqual(
        mp.get({"class_name": "FixedLossScale",
                "config": {"loss_scale_value": 4.}}).get_config(),
        {"loss_scale_value": 4.})

  def test_get_accepts_tf_compat_v1_loss_scales(self):
    tf_dynamic = tf.compat.v1.mixed_precision.DynamicLossScale(
        initial_loss_scale=4.)
    tf_fixed = tf.compat.v1.mixed_precision.FixedLossScale(2.)
    self.assertIs(mp.get(tf_dynamic), tf_dynamic)
    self.assertIs(mp.get(tf_fixed), tf_fixed)
    self.assertIsInstance(tf_dynamic, mp.LossScale)
    self.assertEqual(
        mp.serialize(tf_dynamic), {
            "class_name": "DynamicLossScale",
            "config": {"initial_loss_scale": 4., "increment_period": 2000,
                       "multiplier": 2.}
        })
    clone = mp.deserialize(mp.serialize(tf_fixed))
    self.assertIsInstance(clone, mp.FixedLossScale)

  @parameterized.named_parameters(
      ("string", "static"), ("bool", True), ("list", [2.]),
      ("optimizer", tf.keras.optimizers.SGD()))
  def test_get_rejects(self, identifier):
    with self.assertRaisesRegex(ValueError,
                                "Could not interpret loss scale identifier"):
      mp.get(identifier)

  @parameterized.parameters(mp.FixedLossScale(5), mp.DynamicLossScale(
      initial_loss_scale=16, increment_period=3, multiplier=4))
  def test_serialize_round_trip(self, ls):
    config = mp.serialize(ls)
    self.assertEqual(config["class_name"], type(ls).__name__)
    json.dumps(config)
    clone = mp.deserialize(config)
    self.assertIsInstance(clone, type(ls))
    self.assertEqual(clone.get_config(), ls.get_config())

  @parameterized.named_parameters(
      ("unknown_class", {"class_name": "EvilLossScale", "config": {}},
       "Unknown loss scale: EvilLossScale"),
      ("missing_class", {"config": {}}, "class_name"),
      ("not_a_dict", "DynamicLossScale", "class_name"),
      ("extra_key", {"class_name": "FixedLossScale", "config": {
          "loss_scale_value": 2}, "evil": 1}, "Unexpected keys"),
      ("bad_config_key", {"class_name": "FixedLossScale",
                          "config": {"value": 2}}, "Invalid config"),
      ("bad_config_value", {"class_name": "DynamicLossScale",
                            "config": {"initial_loss_scale": "nan"}},
       "initial_loss_scale"),
  )
  def test_deserialize_rejects(self, config, message):
    with self.assertRaisesRegex(ValueError, message):
      mp.deserialize(config)

  def test_deserialize_custom_objects(self):

    class MyScale(mp.FixedLossScale):
      pass

    clone = mp.deserialize(
        {"class_name": "MyScale", "config": {"loss_scale_value": 2.}},
        custom_objects={"MyScale": MyScale})
    self.assertIsInstance(clone, MyScale)

  def test_serialize_rejects_non_loss_scale(self):
    with self.assertRaisesRegex(ValueError, "loss_scale"):
      mp.serialize(3)


@pytest.mark.parametrize("cls, arg", [(mp.DynamicLossScale, ()),
                                      (mp.FixedLossScale, (2,))])
def test_construction_logs_tf24_deprecation_once(tf_log, cls, arg):
  cls(*arg)
  cls(*arg)
  name = cls.__name__
  assert len(tf_log) == 1
  assert tf_log[0].startswith(f"From {__file__}:")
  assert (f"{name}.__init__ (from tf_mixed_precision_compat.loss_scale) is "
          "deprecated and will be removed in a future version.\n"
          "Instructions for updating:\nUse "
          "tf.keras.mixed_precision.LossScaleOptimizer instead. "
          f"LossScaleOptimizer now has all the functionality of {name}"
         ) in tf_log[0]


class OursRestoresInTf23Test(parameterized.TestCase):
  """Real TF 2.3.4 restored our checkpoints (tools/verify_ours_in_tf23.py).

  That proof is committed; here we check the current code still writes the
  same checkpoint, tensor for tensor, object graph included.
  """

  @parameterized.named_parameters(("eager", "eager"), ("graph", "graph"))
  def test_current_writer_matches_verified_checkpoint(self, name):
    with open(testing.fixture_path("loss_scale", "ours_written",
                                   "tf23_restored.json")) as f:
      proof = json.load(f)
    written = proof["written"][name]
    restored = proof["restored_by_tf23"][name]
    self.assertEqual(restored["current_loss_scale"],
                     written["current_loss_scale"])
    self.assertEqual(restored["good_steps"], written["good_steps"])

    updates = [float(u) for u in written["updates"]]
    prefix = self.create_tempdir().full_path + "/ckpt"
    if name == "graph":
      with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        ls = mp.DynamicLossScale(**written["args"])
        g = tf.compat.v1.placeholder(tf.float32, [])
        update_op, _ = ls.update([g])
        sess.run(tf.compat.v1.global_variables_initializer())
        for value in updates:
          sess.run(update_op, {g: value})
        tf.compat.v1.train.Checkpoint(loss_scale=ls).write(prefix,
                                                           session=sess)
    else:
      ls = mp.DynamicLossScale(**written["args"])
      for value in updates:
        ls.update([tf.constant(value)])
      tf.train.Checkpoint(loss_scale=ls).write(prefix)

    verified = tf.train.load_checkpoint(
        testing.fixture_path("loss_scale", "ours_written", written["prefix"]))
    current = tf.train.load_checkpoint(prefix)
    keys = sorted(verified.get_variable_to_shape_map())
    self.assertEqual(sorted(current.get_variable_to_shape_map()), keys)
    for key in keys:
      self.assertEqual(current.get_tensor(key), verified.get_tensor(key), key)
