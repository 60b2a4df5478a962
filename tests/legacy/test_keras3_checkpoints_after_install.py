"""Checkpoints TF 2.21 itself wrote restore after `install()` as without it.

A job already on TF 2.21 (or one that resumed once and now saves new
checkpoints) writes Keras 3's layout: custom layers with `add_weight`, nested
layers, subclassed models, Keras 3 optimizers and our `LossScaleOptimizer`.
After `install()` its own `tf.train.Checkpoint.restore` must give back every
value exactly and continue exactly as the uninterrupted job, eagerly, in
`tf.function` and on 2 replicas. A checkpoint holding both a TF 2.x entry and
a Keras 3 entry restores both.
"""

import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.legacy import restore_jobs
import tf_mixed_precision_compat as mp

X = np.linspace(-1.0, 1.0, 16, dtype=np.float32).reshape(4, 4)


@pytest.fixture(autouse=True)
def _installed():
  mp.install()
  yield
  mp.uninstall()


Lin = restore_jobs.Lin


class Block(keras.layers.Layer):
  """Nested layers: a custom layer and a Dense inside a layer."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.lin = Lin(3)
    self.dense = keras.layers.Dense(2)

  def call(self, x):
    return self.dense(keras.ops.relu(self.lin(x)))


class Net(keras.Model):
  """A subclassed model of nested and custom layers."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.block = Block()
    self.head = Lin(1)

  def call(self, x):
    return self.head(self.block(x))


class Small(keras.Model):
  """A subclassed model of one custom layer (its entry names only `w`/`b`)."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.head = Lin(1)

  def call(self, x):
    return self.head(x)


def _model(kind):
  if kind == "sequential":
    return keras.Sequential([keras.Input((4,)), Lin(3),
                             keras.layers.Dense(1)])
  if kind == "functional":
    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(1)(Block()(inputs)))
  return {"subclassed": Net, "small": Small}[kind]()


def _optimizer(kind):
  if kind == "adam":
    return keras.optimizers.Adam(0.01)
  # Our LossScaleOptimizer, as the job's `tf.keras` spelling gives it.
  return tf.keras.mixed_precision.LossScaleOptimizer(
      keras.optimizers.Adam(0.01), dynamic_growth_steps=1)


def _step_fn(model, opt, mode, strategy):
  def replica_step(x):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(model(x)) / 4.0
      scaled = opt.get_scaled_loss(loss) if hasattr(
          opt, "get_scaled_loss") else loss
    grads = tape.gradient(scaled, model.trainable_variables)
    if hasattr(opt, "get_unscaled_gradients"):
      grads = opt.get_unscaled_gradients(grads)
    opt.apply_gradients(zip(grads, model.trainable_variables))

  if strategy is None:
    step = replica_step
  else:
    def step(x):
      strategy.run(replica_step, args=(x,))
  step = tf.function(step) if mode != "eager" else step
  return lambda: step(tf.constant(X))


def _state(model, opt):
  values = [np.asarray(v.numpy()) for v in model.weights]
  values += [np.asarray(v.numpy()) for v in opt.variables]
  return values


def _assert_equal(got, want):
  assert len(got) == len(want)
  for a, b in zip(got, want):
    np.testing.assert_array_equal(a, b)


class _Scope:

  def __init__(self, strategy):
    self.strategy = strategy

  def __enter__(self):
    self.scope = self.strategy.scope() if self.strategy else None
    return self.scope.__enter__() if self.scope else None

  def __exit__(self, *args):
    return self.scope.__exit__(*args) if self.scope else False


def _resume(model_kind, opt_kind, mode, tmp_path, strategy=None,
            build_first=True):
  """Saves a TF 2.21 job after 2 steps, resumes it, checks the next step."""
  with _Scope(strategy):
    model, opt = _model(model_kind), _optimizer(opt_kind)
  step = _step_fn(model, opt, mode, strategy)
  step()
  step()
  path = tf.train.Checkpoint(model=model, optimizer=opt).save(
      str(tmp_path / "ckpt"))
  saved = _state(model, opt)
  with _Scope(strategy):
    model2, opt2 = _model(model_kind), _optimizer(opt_kind)
    if build_first:
      model2(X)
  status = tf.train.Checkpoint(model=model2, optimizer=opt2).restore(path)
  # TF restores a Keras 3 checkpoint itself: its own status comes back.
  assert type(status).__module__.startswith("tensorflow."), type(status)
  step2 = _step_fn(model2, opt2, mode, strategy)
  if not build_first:
    model2(X)
  with _Scope(strategy):
    opt2.build(model2.trainable_variables)
  _assert_equal(_state(model2, opt2), saved)
  status.assert_consumed()
  step()
  step2()
  _assert_equal(_state(model2, opt2), _state(model, opt))


@pytest.mark.parametrize("model_kind", ["sequential", "functional",
                                        "subclassed", "small"])
@pytest.mark.parametrize("opt_kind", ["adam", "lso"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_tf221_checkpoint_resumes_exactly(model_kind, opt_kind, mode,
                                            tmp_path):
  _resume(model_kind, opt_kind, mode, tmp_path)


@pytest.mark.parametrize("model_kind", ["sequential", "functional"])
@pytest.mark.parametrize("opt_kind", ["adam", "lso"])
def test_a_tf221_checkpoint_waits_for_an_unbuilt_model(model_kind, opt_kind,
                                                       tmp_path):
  # Keras 3 restores values into a functional model's layers when they are
  # built; nothing of the package changes that.
  _resume(model_kind, opt_kind, "function", tmp_path, build_first=False)


@pytest.mark.parametrize("model_kind", ["subclassed", "small"])
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_tf221_checkpoint_resumes_on_two_replicas(model_kind, mode,
                                                    mirrored_strategy,
                                                    tmp_path):
  _resume(model_kind, "lso", mode, tmp_path, strategy=mirrored_strategy)


def test_a_model_only_tf221_checkpoint_restores_exactly(tmp_path):
  model = _model("small")
  model(X)
  path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
  model2 = _model("small")
  model2(X)
  tf.train.Checkpoint(model=model2).restore(path).assert_consumed()
  _assert_equal([v.numpy() for v in model2.weights],
                [v.numpy() for v in model.weights])


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_keras3_files_round_trip(suffix, tmp_path):
  model = _model("sequential")
  opt = _optimizer("lso")
  model.compile(optimizer=opt, loss="mse")
  model.fit(X, X[:, :1], epochs=1, verbose=0)
  path = str(tmp_path / ("model" + suffix))
  if suffix == ".keras":
    model.save(path)
    loaded = keras.models.load_model(path, custom_objects={"Lin": Lin})
  else:
    model.save_weights(path)
    loaded = _model("sequential")
    loaded.load_weights(path)
  _assert_equal([v.numpy() for v in loaded.weights],
                [v.numpy() for v in model.weights])


# ---------------------------------------------------------------------------
# A checkpoint with both layouts.


def _merge(tf24_prefix, keras3_prefix, out_prefix):
  """One checkpoint: TF 2.4's root entries as `old_*`, Keras 3's as is."""
  from tf_mixed_precision_compat import _private_api  # pylint: disable=g-import-not-at-top
  from tf_mixed_precision_compat.legacy import _read_checkpoint  # pylint: disable=g-import-not-at-top
  pb2 = _private_api.trackable_object_graph_pb2
  merged = pb2.TrackableObjectGraph()
  tensors = {}
  for prefix, rename in ((keras3_prefix, ""), (tf24_prefix, "old_")):
    reader = tf.train.load_checkpoint(prefix)
    graph = pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor(_read_checkpoint.OBJECT_GRAPH_KEY))
    offset = len(merged.nodes) - 1 if merged.nodes else 0
    for node_id, node in enumerate(graph.nodes):
      if node_id == 0 and merged.nodes:
        for ref in node.children:
          if ref.local_name != "save_counter":
            merged.nodes[0].children.add(local_name=rename + ref.local_name,
                                         node_id=ref.node_id + offset)
        continue
      new = merged.nodes.add()
      new.CopyFrom(node)
      for ref in new.children:
        ref.node_id += offset
      for slot in new.slot_variables:
        slot.original_variable_node_id += offset
        slot.slot_variable_node_id += offset
      for attr in new.attributes:
        key = attr.checkpoint_key
        if rename and not key.startswith("save_counter"):
          attr.checkpoint_key = rename + key
        tensors[attr.checkpoint_key] = reader.get_tensor(key)
  tensors[_read_checkpoint.OBJECT_GRAPH_KEY] = merged.SerializeToString()
  names = sorted(tensors)
  tf.raw_ops.SaveV2(prefix=out_prefix, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(tensors[n]) for n in names])
  return out_prefix


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_a_checkpoint_with_both_layouts_restores_both(mode, tmp_path):
  shutil.copytree(restore_jobs.fixture_dir("ckpt_good"), str(tmp_path / "old"))
  record = restore_jobs.outcomes()
  model, opt = _model("subclassed"), _optimizer("lso")
  step = _step_fn(model, opt, mode, None)
  step()
  path = tf.train.Checkpoint(model=model, optimizer=opt).save(
      str(tmp_path / "new" / "ckpt"))
  merged = _merge(str(tmp_path / "old" / "ckpt-1"), path,
                  str(tmp_path / "merged"))
  model2, opt2 = _model("subclassed"), _optimizer("lso")
  old_model, old_opt = restore_jobs.Net(), restore_jobs.optimizer()
  model2(X)
  old_model(X)
  status = tf.train.Checkpoint(model=model2, optimizer=opt2,
                               old_model=old_model,
                               old_optimizer=old_opt).restore(merged)
  opt2.build(model2.trainable_variables)
  old_opt.build(old_model.trainable_variables)
  status.assert_consumed()
  _assert_equal(_state(model2, opt2), _state(model, opt))
  for variable in old_model.weights:
    np.testing.assert_array_equal(
        variable.numpy(), restore_jobs.saved_weight(record, old_model,
                                                    variable))
  assert int(old_opt.iterations.numpy()) == record["saved_iterations"]
  assert float(old_opt.loss_scale.numpy()) == record["saved_loss_scale"]
  assert os.path.exists(merged + ".index")
