"""Hostile files and misused arguments for the `legacy` loaders.

Every case: the exact exception type, a message naming the file or the
argument, and every live value (weights, slots, iterations, loss scale,
counter) unchanged. The hostile files are crafted from the committed TF
2.3/2.4 fixtures (tests/fixtures/legacy/) in temporary directories.
"""

import json
import marshal
import os
import shutil
from unittest import mock

from absl.testing import parameterized
from google.protobuf import text_format
import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import testing
from tests.legacy.test_restore_checkpoint import _load
from tests.legacy.test_restore_checkpoint import _location
from tests.legacy.test_restore_checkpoint import _model
from tests.legacy.test_restore_checkpoint import _optimizer
from tests.legacy.test_restore_checkpoint import check_restored
from tf_mixed_precision_compat.legacy import _config
from tf_mixed_precision_compat.legacy import _saved_model
from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat import legacy

H5_FIXTURE = testing.fixture_path("legacy", "h5_tf23_func_adam.h5")
SM_FIXTURE = testing.fixture_path("legacy", "sm_tf23_seq_sgd")
GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
LOSS_SCALE_KEY = ("optimizer/loss_scale/current_loss_scale/.ATTRIBUTES/"
                  "VARIABLE_VALUE")
COUNTER_KEY = "optimizer/loss_scale/good_steps/.ATTRIBUTES/VARIABLE_VALUE"
MOMENTUM_KEY = "optimizer/momentum/.ATTRIBUTES/VARIABLE_VALUE"
DECAY_KEY = "optimizer/decay/.ATTRIBUTES/VARIABLE_VALUE"


# ---------------------------------------------------------------------------
# Crafting hostile files.


def keras3_lambda_layer(name="lambda"):
  """A Keras 3 `Lambda` layer config carrying bytecode (`__lambda__`)."""
  config = keras.saving.serialize_keras_object(
      keras.layers.Lambda(lambda x: x * 2, name=name))
  return json.loads(json.dumps(config))


def keras3_lambda_function():
  """Keras 3's serialized form of a lambda in any other position."""
  code = keras3_lambda_layer()["config"]["function"]["config"]
  return {"class_name": "__lambda__",
          "config": {"value": [code["code"], code["defaults"],
                               code["closure"]]}}


def keras3_sequential(*layers, input_shape=(2, 3)):
  """A Keras 3 `Sequential` config with an `InputLayer` and `layers`."""
  model = keras.Sequential([keras.Input(input_shape)], name="sequential")
  config = json.loads(model.to_json())
  config["config"]["layers"].extend(layers)
  return config


def layer_config(class_name, **config):
  return {"module": "keras.layers", "class_name": class_name,
          "config": dict(config), "registered_name": None}


def hostile_model_configs():
  """name -> a model config hiding code somewhere other than the top."""
  lam = keras3_lambda_layer()
  nested = keras3_sequential(lam)
  nested["config"]["name"] = "inner"
  lstm = layer_config("LSTM", name="lstm", units=2,
                      activation=keras3_lambda_function())
  return {
      "time_distributed_lambda": keras3_sequential(
          layer_config("TimeDistributed", name="td", layer=lam)),
      "bidirectional_lambda_activation": keras3_sequential(
          layer_config("Bidirectional", name="bi", layer=lstm)),
      "bidirectional_backward_lambda": keras3_sequential(
          layer_config("Bidirectional", name="bi", layer=layer_config(
              "LSTM", name="fw", units=2), backward_layer=lam)),
      "nested_model_lambda": keras3_sequential(nested),
      "dense_lambda_activation": keras3_sequential(
          layer_config("Dense", name="d", units=2,
                       activation=keras3_lambda_function())),
      "time_distributed_tfsm_layer": keras3_sequential(
          layer_config("TimeDistributed", name="td", layer=layer_config(
              "TFSMLayer", name="sm", filepath="/tmp/x",
              call_endpoint="serve"))),
  }


def write_h5(path, model_config, training_config=None, text=None):
  """An H5 model file holding only these configs (no weights)."""
  with h5py.File(path, "w") as f:
    f.attrs["model_config"] = (text if text is not None else
                               json.dumps(model_config))
    if training_config is not None:
      f.attrs["training_config"] = (training_config if isinstance(
          training_config, str) else json.dumps(training_config))
  return path


def edited_h5(tmp, edit):
  """A copy of the TF 2.3 H5 fixture after `edit(h5py.File)`."""
  path = os.path.join(tmp, "edited.h5")
  shutil.copy(H5_FIXTURE, path)
  with h5py.File(path, "r+") as f:
    edit(f)
  return path


def saved_model_with_metadata(tmp, metadata):
  """A copy of the TF 2.3 SavedModel fixture whose root metadata is replaced.

  Args:
    tmp: A directory.
    metadata: The new metadata: a str as is, anything else as JSON.

  Returns:
    The SavedModel directory.
  """
  path = os.path.join(tmp, "sm")
  shutil.copytree(SM_FIXTURE, path)
  proto = _private_api.saved_model_pb2.SavedModel()
  pb_path = os.path.join(path, "saved_model.pb")
  with open(pb_path, "rb") as f:
    proto.ParseFromString(f.read())
  proto.meta_graphs[0].object_graph_def.nodes[0].user_object.metadata = (
      metadata if isinstance(metadata, str) else json.dumps(metadata))
  with open(pb_path, "wb") as f:
    f.write(proto.SerializeToString())
  return path


def sm_metadata(model_config, **extra):
  return dict({"class_name": model_config["class_name"],
               "config": model_config["config"]}, **extra)


def nested_json(depth):
  return "[" * depth + "]" * depth


def checkpoint_values(prefix):
  """{key: numpy value} of every tensor of a checkpoint."""
  reader = tf.train.load_checkpoint(prefix)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}


def write_checkpoint(prefix, values):
  """A checkpoint at `prefix` holding exactly `values` ({key: value})."""
  names = sorted(values)
  tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(values[n]) for n in names])
  return prefix


def object_graph(values):
  graph = _private_api.trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(values[GRAPH_KEY])
  return graph


def with_graph(values, graph):
  return dict(values, **{GRAPH_KEY: graph.SerializeToString()})


def _first_slot(graph):
  return next(s for n in graph.nodes for s in n.slot_variables)


def _set_child(node_id):
  def edit(graph):
    graph.nodes[0].children[0].node_id = node_id
  return edit


def _set_slot(field, node_id):
  def edit(graph):
    setattr(_first_slot(graph), field, node_id)
  return edit


def _empty(graph):
  del graph.nodes[:]


def _model_node(graph):
  return next(c.node_id for c in graph.nodes[0].children
              if c.local_name == "model")


def _chain(graph, length=5000):
  """Hangs a chain of `length` empty nodes below the model."""
  first = len(graph.nodes)
  graph.nodes[_model_node(graph)].children.add(node_id=first,
                                               local_name="deep")
  for i in range(length):
    graph.nodes.add().children.add(node_id=first + i + 1, local_name="d")
  graph.nodes.add()


def _cycles(graph):
  """The model's layers point back at the root, the model and themselves."""
  model = _model_node(graph)
  for ref in list(graph.nodes[model].children):
    node = graph.nodes[ref.node_id]
    if node.children:
      node.children.add(node_id=0, local_name="root_again")
      node.children.add(node_id=model, local_name="model_again")
      node.children.add(node_id=ref.node_id, local_name="self")


def _lattice(graph, levels=40):
  """A two-wide lattice below the model: 2**40 paths through 80 nodes."""
  first = len(graph.nodes)
  model = _model_node(graph)
  graph.nodes[model].children.add(node_id=first, local_name="lattice")
  graph.nodes[model].children.add(node_id=first + 1, local_name="lattice2")
  for level in range(levels):
    for _ in range(2):
      node = graph.nodes.add()
      if level + 1 < levels:
        nxt = first + 2 * (level + 1)
        node.children.add(node_id=nxt, local_name="a")
        node.children.add(node_id=nxt + 1, local_name="b")


# ---------------------------------------------------------------------------
# State.


def snapshot(model, opt):
  values = [v.numpy().copy() for v in model.weights]
  values += [v.numpy().copy() for v in opt.variables]
  values += [opt.loss_scale.numpy()]
  if opt.dynamic:
    values += [opt.dynamic_counter.numpy()]
  return values


def assert_unchanged(before, after):
  assert len(before) == len(after)
  for a, b in zip(before, after):
    np.testing.assert_array_equal(a, b)


@pytest.fixture(name="unsafe_process")
def _unsafe_process():
  """The process has opted in to Keras 3's unsafe deserialization."""
  with _private_api.SafeModeScope(True):  # Restores it afterwards.
    keras.config.enable_unsafe_deserialization()
    yield


class SafeModeTest(parameterized.TestCase):
  """Code nested anywhere in a config is refused, whatever the process set."""

  @pytest.fixture(autouse=True)
  def _setup(self, tmp_path, unsafe_process):
    del unsafe_process
    self.tmp = str(tmp_path)

  def _assert_refused(self, path, where):
    with mock.patch("marshal.loads", wraps=marshal.loads) as loads, \
        mock.patch.object(tf.saved_model, "load") as saved_model_load:
      with self.assertRaises(ValueError) as cm:
        legacy.load_model(path)
    self.assertIs(type(cm.exception), ValueError)
    message = str(cm.exception)
    self.assertIn(path, message)
    self.assertIn("refusing to load", message)
    self.assertIn(where, message)
    self.assertIn("safe_mode=False", message)
    loads.assert_not_called()
    saved_model_load.assert_not_called()

  @parameterized.parameters(*sorted(hostile_model_configs()))
  def test_h5_refused(self, name):
    config = hostile_model_configs()[name]
    path = write_h5(os.path.join(self.tmp, name + ".h5"), config)
    self._assert_refused(path, "sequential/")

  @parameterized.parameters(*sorted(hostile_model_configs()))
  def test_saved_model_refused(self, name):
    config = hostile_model_configs()[name]
    path = saved_model_with_metadata(self.tmp, sm_metadata(config))
    self._assert_refused(path, "sequential/")

  def test_lambda_deep_in_a_nested_model_is_named(self):
    config = hostile_model_configs()["nested_model_lambda"]
    path = write_h5(os.path.join(self.tmp, "nested.h5"), config)
    self._assert_refused(path, "sequential/inner/lambda")

  @parameterized.parameters("loss", "metrics")
  def test_training_config_lambda_refused(self, key):
    value = keras3_lambda_function()
    training_config = {
        "loss": "mse", "metrics": [],
        "optimizer_config": {"class_name": "SGD",
                             "config": {"learning_rate": 0.1}}}
    training_config[key] = [value] if key == "metrics" else value
    model_config = keras3_sequential(
        layer_config("Dense", name="d", units=1), input_shape=(3,))
    path = write_h5(os.path.join(self.tmp, "t.h5"), model_config,
                    training_config)
    self._assert_refused(path, "training_config")

  @parameterized.parameters("keras_evil", "kerasx.layers",
                            "tf_mixed_precision_compat_evil", "builtins")
  def test_module_outside_the_safe_packages_refused(self, module):
    dense = layer_config("Dense", name="d", units=1)
    dense["config"]["kernel_initializer"] = {
        "module": module, "class_name": "Evil", "config": {},
        "registered_name": None}
    path = write_h5(os.path.join(self.tmp, "m.h5"),
                    keras3_sequential(dense, input_shape=(3,)))
    self._assert_refused(path, f"names the Python module {module!r}")

  def test_keras_safe_mode_backs_up_the_check(self):
    # Were the config check to miss a lambda, Keras 3's own safe mode, forced
    # on for the load, still refuses it.
    config = hostile_model_configs()["time_distributed_lambda"]
    path = write_h5(os.path.join(self.tmp, "td.h5"), config)
    with mock.patch.object(_config, "_code_in", return_value=None), \
        mock.patch("marshal.loads", wraps=marshal.loads) as loads:
      with self.assertRaisesRegex(ValueError, "td.h5.*lambda"):
        legacy.load_model(path)
    loads.assert_not_called()

  def test_trusted_file_still_loads_with_safe_mode_false(self):
    config = hostile_model_configs()["time_distributed_lambda"]
    path = write_h5(os.path.join(self.tmp, "td.h5"), config)
    model = legacy.load_model(path, safe_mode=False)
    np.testing.assert_array_equal(
        model.predict(np.ones((1, 2, 3), np.float32), verbose=0),
        np.full((1, 2, 3), 2., np.float32))

  def test_custom_class_named_in_a_wrapper_is_the_callers_opt_in(self):
    class Doubler(keras.layers.Layer):

      def call(self, x):
        return 2 * x

    wrapped = layer_config("TimeDistributed", name="td", layer={
        "module": "my_package.layers", "class_name": "Doubler",
        "config": {"name": "doubler"}, "registered_name": "Doubler"})
    path = write_h5(os.path.join(self.tmp, "c.h5"),
                    keras3_sequential(wrapped))
    self._assert_refused(path, "names the Python module 'my_package.layers'")
    model = legacy.load_model(path, custom_objects={"Doubler": Doubler})
    self.assertIsInstance(model.layers[-1].layer, Doubler)


class SavedModelLoadTimeCodeTest(parameterized.TestCase):
  """`load_saved_model` refuses graph code that would run while loading."""

  @pytest.fixture(autouse=True)
  def _tmp(self, tmp_path):
    self.tmp = str(tmp_path)

  def _table_saved_model(self):
    class Lookup(tf.Module):

      def __init__(self):
        super().__init__()
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant([b"a", b"b"]), tf.constant([1, 2], tf.int64)), -1)

      @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
      def __call__(self, keys):
        return self.table.lookup(keys)

    path = os.path.join(self.tmp, "table")
    tf.saved_model.save(Lookup(), path)
    return path

  def _tf1_saved_model(self):
    path = os.path.join(self.tmp, "tf1")
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
      x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
      y = tf.identity(2. * x, name="y")
      builder = tf.compat.v1.saved_model.Builder(path)
      builder.add_meta_graph_and_variables(
          sess, ["serve"], signature_def_map={
              "serving_default":
                  tf.compat.v1.saved_model.predict_signature_def(
                      {"x": x}, {"y": y})})
      builder.save()
    return path

  def test_resource_initializers_refused(self):
    path = self._table_saved_model()
    with mock.patch.object(tf.saved_model, "load") as load:
      with self.assertRaises(ValueError) as cm:
        legacy.load_saved_model(path)
    load.assert_not_called()
    self.assertIs(type(cm.exception), ValueError)
    self.assertIn(path, str(cm.exception))
    self.assertIn("_initialize", str(cm.exception))
    self.assertIn("safe_mode=False", str(cm.exception))
    loaded = legacy.load_saved_model(path, safe_mode=False)
    self.assertEqual(list(loaded(tf.constant([b"b", b"z"])).numpy()), [2, -1])

  def test_text_format_saved_model_checked_too(self):
    path = self._table_saved_model()
    pb_path = os.path.join(path, "saved_model.pb")
    with open(pb_path, "rb") as f:
      proto = _private_api.saved_model_pb2.SavedModel.FromString(f.read())
    with open(pb_path + "txt", "w") as f:
      f.write(text_format.MessageToString(proto))
    os.remove(pb_path)
    with mock.patch.object(tf.saved_model, "load") as load:
      with self.assertRaisesRegex(ValueError, "refusing to load.*resource"):
        legacy.load_saved_model(path)
    load.assert_not_called()

  def test_truncated_saved_model_pb_raises_os_error(self):
    path = os.path.join(self.tmp, "sm")
    shutil.copytree(SM_FIXTURE, path)
    pb_path = os.path.join(path, "saved_model.pb")
    with open(pb_path, "rb") as f:
      data = f.read()
    with open(pb_path, "wb") as f:
      f.write(data[:len(data) // 3])
    # OSError, as tf.saved_model.load raises, also when safe mode parses it.
    for safe_mode in (True, False):
      with self.assertRaises(OSError) as cm:
        legacy.load_saved_model(path, safe_mode=safe_mode)
      self.assertIs(type(cm.exception), OSError)
      self.assertIn(pb_path, str(cm.exception))

  def test_tf1_saved_model_refused(self):
    path = self._tf1_saved_model()
    with mock.patch.object(tf.saved_model, "load") as load:
      with self.assertRaisesRegex(ValueError, "TF1 format.*init op"):
        legacy.load_saved_model(path)
    load.assert_not_called()
    loaded = legacy.load_saved_model(path, safe_mode=False)
    out = loaded.signatures["serving_default"](x=tf.constant([1.5]))
    np.testing.assert_array_equal(out["y"].numpy(), [3.])

  def test_keras_saved_models_have_no_load_time_code(self):
    for name in ("sm_tf23_seq_sgd", "sm_tf24_func_adam"):
      path = testing.fixture_path("legacy", name)
      self.assertEqual(_saved_model.load_time_code(path), [])


# ---------------------------------------------------------------------------
# Crafted checkpoints.


def _graph_edits():
  return {
      "empty_graph": _empty,
      "huge_child_id": _set_child(2**31 - 1),
      "negative_child_id": _set_child(-1),
      "huge_slot_id": _set_slot("slot_variable_node_id", 10**9),
      "negative_slot_id": _set_slot("slot_variable_node_id", -1),
      "negative_slot_owner": _set_slot("original_variable_node_id", -3),
  }


def _value_edits():
  return {
      "graph_not_a_proto": {GRAPH_KEY: b"\xff\xfe not a proto"},
      "graph_a_float": {GRAPH_KEY: np.float32(1.)},
      "loss_scale_a_string": {LOSS_SCALE_KEY: np.array(b"big")},
      "loss_scale_a_vector": {LOSS_SCALE_KEY: np.array([2., 4.], np.float32)},
      "counter_a_string": {COUNTER_KEY: np.array(b"3")},
      "counter_a_vector": {COUNTER_KEY: np.array([1, 2], np.int64)},
      "momentum_a_vector": {MOMENTUM_KEY: np.array([.9, .9], np.float32)},
      "momentum_a_string": {MOMENTUM_KEY: np.array(b"0.9")},
      "decay_a_vector": {DECAY_KEY: np.zeros([2], np.float32)},
      "decay_a_string": {DECAY_KEY: np.array(b"0")},
  }


class CraftedCheckpointTest(parameterized.TestCase):

  @pytest.fixture(autouse=True)
  def _tmp(self, tmp_path):
    self.tmp = str(tmp_path)

  def setUp(self):
    super().setUp()
    self.record = _load("demo")
    self.source = tf.train.latest_checkpoint(_location("demo", self.record))
    self.values = checkpoint_values(self.source)

  def _crafted(self, values):
    return write_checkpoint(os.path.join(self.tmp, "ckpt-1"), values)

  def _model_and_optimizer(self, strategy=None):
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
      model, opt = _model(self.record), _optimizer(self.record)
      opt.build(model.trainable_variables)
    return model, opt

  def _assert_refused(self, prefix, error, strategy=None):
    model, opt = self._model_and_optimizer(strategy)
    before = snapshot(model, opt)
    with self.assertRaises(error) as cm:
      legacy.restore_checkpoint(prefix, model, opt)
    self.assertIs(type(cm.exception), error)
    self.assertIn(prefix, str(cm.exception))
    assert_unchanged(before, snapshot(model, opt))
    return cm.exception

  @parameterized.parameters(*sorted(_graph_edits()))
  def test_bad_object_graph(self, name):
    graph = object_graph(self.values)
    _graph_edits()[name](graph)
    error = self._assert_refused(
        self._crafted(with_graph(self.values, graph)), ValueError)
    self.assertIn("object graph is corrupted", str(error))

  @parameterized.parameters(*sorted(_value_edits()))
  def test_bad_values(self, name):
    edit = _value_edits()[name]
    error_type = ValueError if GRAPH_KEY in edit else legacy.RestoreError
    error = self._assert_refused(self._crafted(dict(self.values, **edit)),
                                 error_type)
    if error_type is legacy.RestoreError:
      self.assertIn(next(iter(edit)), str(error))
      self.assertIn("one number", str(error))

  @parameterized.parameters(LOSS_SCALE_KEY, "model/layer_with_weights-0/"
                            "kernel/.ATTRIBUTES/VARIABLE_VALUE")
  def test_missing_tensor(self, key):
    values = dict(self.values)
    del values[key]
    error = self._assert_refused(self._crafted(values), ValueError)
    self.assertIn(key, str(error))

  def test_bad_values_refused_under_mirrored_strategy(self):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    model, opt = self._model_and_optimizer(strategy)
    variables = list(model.weights) + list(opt.variables) + [
        opt._loss_scale.current_loss_scale, opt._loss_scale.counter]  # pylint: disable=protected-access

    def per_replica():
      return [[x.numpy() for x in strategy.experimental_local_results(
          v.value if isinstance(v, keras.Variable) else v)]
              for v in variables]

    before = per_replica()
    self.assertLen(before[0], 2)
    prefix = self._crafted(
        dict(self.values, **_value_edits()["loss_scale_a_string"]))
    with self.assertRaisesRegex(legacy.RestoreError, "one number"):
      legacy.restore_checkpoint(prefix, model, opt)
    for a, b in zip(before, per_replica()):
      np.testing.assert_array_equal(a, b)

  @parameterized.parameters("_chain", "_cycles", "_lattice")
  def test_absurd_graph_restores_exactly(self, name):
    # Nodes without variables, however arranged, change nothing: bounded
    # work, no RecursionError, and the same values as the original.
    graph = object_graph(self.values)
    globals()[name](graph)
    prefix = self._crafted(with_graph(self.values, graph))
    model, opt = _model(self.record), _optimizer(self.record)
    report = legacy.restore_checkpoint(prefix, model, opt)
    check_restored(self, model, opt, self.record)
    self.assertEqual(report.unmatched_checkpoint, [])


# ---------------------------------------------------------------------------
# Malformed configs in H5 files and SavedModels.


def _h5_edits():
  def model_config(text):
    def edit(f):
      f.attrs["model_config"] = text
    return edit

  def training_config(text):
    def edit(f):
      f.attrs["training_config"] = text
    return edit

  def layers(value):
    def edit(f):
      config = json.loads(f.attrs["model_config"])
      config["config"]["layers"] = value
      f.attrs["model_config"] = json.dumps(config)
    return edit

  def weight_names(f):
    f["model_weights"]["d1"].attrs["weight_names"] = "d1/kernel:0"

  return {
      "model_config_a_list": model_config("[1, 2]"),
      "model_config_config_a_string": model_config(
          '{"class_name": "Functional", "config": "x"}'),
      "layers_an_int": layers(3),
      "layer_a_list": layers([[1]]),
      "layer_config_a_list": layers([{"class_name": "Dense", "config": []}]),
      "class_name_a_list": layers([{"class_name": [], "config": {}}]),
      "training_config_a_list": training_config("[]"),
      "training_config_null": training_config("null"),
      "optimizer_config_a_list": training_config(
          '{"loss": "mse", "optimizer_config": []}'),
      "optimizer_options_a_list": training_config(
          '{"loss": "mse", "optimizer_config": {"class_name": "Adam", '
          '"config": [1]}}'),
      "weight_names_a_string": weight_names,
      "deep_model_config": model_config(nested_json(100000)),
      "moderately_deep_model_config": model_config(nested_json(500)),
      "deep_training_config": training_config(nested_json(100000)),
      "model_config_not_utf8": model_config(np.bytes_(b"\xff\xfe{")),
  }


def _sm_edits():
  with open(os.path.join(SM_FIXTURE, "saved_model.pb"), "rb") as f:
    proto = _private_api.saved_model_pb2.SavedModel.FromString(f.read())
  base = json.loads(
      proto.meta_graphs[0].object_graph_def.nodes[0].user_object.metadata)
  return {
      "metadata_a_list": "[]",
      "metadata_a_string": '"Sequential"',
      "metadata_null": "null",
      "config_a_list": dict(base, config=[]),
      "training_config_a_string": dict(base, training_config="adam"),
      "deep_metadata": nested_json(100000),
      "moderately_deep_metadata": '{"config": ' + nested_json(900) + "}",
  }


class MalformedConfigTest(parameterized.TestCase):

  @pytest.fixture(autouse=True)
  def _tmp(self, tmp_path):
    self.tmp = str(tmp_path)

  def _assert_value_error(self, path):
    with self.assertRaises(ValueError) as cm:
      legacy.load_model(path)
    self.assertIn(type(cm.exception), (ValueError, legacy.RestoreError))
    self.assertIn(path, str(cm.exception))
    return cm.exception

  @parameterized.parameters(*sorted(_h5_edits()))
  def test_h5(self, name):
    path = edited_h5(self.tmp, _h5_edits()[name])
    error = self._assert_value_error(path)
    if name.startswith(("deep", "moderately")):
      self.assertIn("nests deeper than", str(error))
    else:
      self.assertNotIn("nests deeper than", str(error))

  @parameterized.parameters(*sorted(_sm_edits()))
  def test_saved_model(self, name):
    path = saved_model_with_metadata(self.tmp, _sm_edits()[name])
    error = self._assert_value_error(path)
    if name.startswith(("deep", "moderately")):
      self.assertIn("nests deeper than", str(error))


  def test_h5_dataset_of_absurd_size_is_never_read(self):
    # A compressed dataset can claim gigabytes in a small file; one whose
    # shape does not fit its variable is refused unread.
    def edit(f):
      group = f["model_weights"]["d1"]["d1"]
      del group["kernel:0"]
      group.create_dataset("kernel:0", shape=(4000, 4000), dtype="float32",
                           compression="gzip", chunks=(500, 500))
    path = edited_h5(self.tmp, edit)
    read, names = h5py.Dataset.__getitem__, []

    def spy(dataset, *args, **kwargs):
      names.append(dataset.name)
      return read(dataset, *args, **kwargs)

    with mock.patch.object(h5py.Dataset, "__getitem__", spy):
      with self.assertRaises(legacy.RestoreError) as cm:
        legacy.load_model(path)
    self.assertIn(path, str(cm.exception))
    self.assertIn("shape (4000, 4000)", str(cm.exception))
    self.assertIn("/model_weights/d1/d1/bias:0", names)
    self.assertNotIn("/model_weights/d1/d1/kernel:0", names)


# ---------------------------------------------------------------------------
# Arguments.


class ArgumentTest(parameterized.TestCase):

  @pytest.fixture(autouse=True)
  def _tmp(self, tmp_path):
    self.tmp = str(tmp_path)

  def setUp(self):
    super().setUp()
    self.record = _load("demo")
    self.location = _location("demo", self.record)

  def _built(self):
    model, opt = _model(self.record), _optimizer(self.record)
    opt.build(model.trainable_variables)
    return model, opt

  def test_bytes_paths_accepted(self):
    model, opt = _model(self.record), _optimizer(self.record)
    legacy.restore_checkpoint(self.location.encode("utf-8"), model, opt)
    check_restored(self, model, opt, self.record)
    prefix = tf.train.latest_checkpoint(self.location)
    model, opt = _model(self.record), _optimizer(self.record)
    report = legacy.restore_checkpoint(prefix.encode("utf-8"), model, opt)
    self.assertEqual(report.source, prefix)
    check_restored(self, model, opt, self.record)
    h5 = legacy.load_model(H5_FIXTURE.encode("utf-8"))
    self.assertEqual(
        [w.numpy().tolist() for w in h5.weights],
        [w.numpy().tolist() for w in legacy.load_model(H5_FIXTURE).weights])
    sm, report = legacy.load_model(SM_FIXTURE.encode("utf-8"),
                                   return_report=True)
    self.assertEqual(report.unmatched_objects, [])
    self.assertIsNotNone(sm.optimizer)
    served = legacy.load_saved_model(SM_FIXTURE.encode("utf-8"))
    self.assertIn("serving_default", served.signatures)

  @parameterized.parameters("restore_checkpoint", "load_model",
                            "load_saved_model")
  def test_non_utf8_bytes_path(self, function):
    path = b"/tmp/\xff\xfe"
    args = ((keras.Sequential(), None) if function == "restore_checkpoint"
            else ())
    with self.assertRaisesRegex(ValueError, "path must be UTF-8"):
      getattr(legacy, function)(path, *args)

  @parameterized.parameters("restore_checkpoint", "load_model",
                            "load_saved_model")
  def test_path_of_wrong_type(self, function):
    args = ((keras.Sequential(), None) if function == "restore_checkpoint"
            else ())
    with self.assertRaisesRegex(TypeError, "path must be a str, bytes or "
                                "os.PathLike path, got int"):
      getattr(legacy, function)(3, *args)

  @parameterized.named_parameters(
      ("model_none_and_no_optimizer", None, None,
       "got model=None and optimizer=None"),
      ("model_a_string", "seq", "OPT", "model must be a Keras 3 model"),
      ("model_a_list", [], "OPT", "model must be a Keras 3 model"),
      ("optimizer_a_string", "MODEL", "sgd", "optimizer must be this "
       "package's LossScaleOptimizer, a Keras 3 optimizer"),
      ("optimizer_v1", "MODEL", "v1", "tf.compat.v1.train.Optimizer"),
      ("optimizer_class", "MODEL", "class", "optimizer must be"))
  def test_restore_checkpoint_objects(self, model_arg, opt_arg, pattern):
    model, opt = self._built()
    before = snapshot(model, opt)
    model_value = model if model_arg == "MODEL" else model_arg
    opt_value = {
        "OPT": opt,
        "v1": tf.compat.v1.train.GradientDescentOptimizer(0.1),
        "class": keras.optimizers.SGD}.get(opt_arg, opt_arg)
    with self.assertRaisesRegex(TypeError, pattern):
      legacy.restore_checkpoint(self.location, model_value, opt_value)
    assert_unchanged(before, snapshot(model, opt))

  @parameterized.parameters(
      ("sgd", r"Pass an optimizer object, e\.g\. LossScaleOptimizer\("
       r"keras\.optimizers\.get\('sgd'\)\)\."),
      ("v1", r"TF1 optimizers .* restore their own checkpoints with "
       r"tf\.train\.Checkpoint or tf\.compat\.v1\.train\.Saver\."))
  def test_restore_checkpoint_optimizer_refusal_hints(self, opt_arg, hint):
    model, _ = self._built()
    opt = (tf.compat.v1.train.GradientDescentOptimizer(0.1)
           if opt_arg == "v1" else opt_arg)
    with self.assertRaisesRegex(TypeError, hint):
      legacy.restore_checkpoint(self.location, model, opt)

  @parameterized.parameters("False", 0, 1, None, "yes", np.bool_(True))
  def test_allow_partial_must_be_a_bool(self, value):
    # A fixed optimizer for a dynamic checkpoint: allow_partial=True would
    # restore the rest; a truthy "False" must not.
    model = _model(self.record)
    opt = legacy.LossScaleOptimizer(
        keras.optimizers.SGD(0.002, momentum=0.9), dynamic=False,
        initial_scale=8)
    opt.build(model.trainable_variables)
    before = snapshot(model, opt)
    with self.assertRaisesRegex(TypeError,
                                "allow_partial must be a bool .*got"):
      legacy.restore_checkpoint(self.location, model, opt,
                                allow_partial=value)
    assert_unchanged(before, snapshot(model, opt))

  def test_allow_partial_string_under_mirrored_strategy(self):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
      model = _model(self.record)
      opt = legacy.LossScaleOptimizer(
          keras.optimizers.SGD(0.002, momentum=0.9), dynamic=False,
          initial_scale=8)
      opt.build(model.trainable_variables)
    kernel = model.trainable_variables[0]
    before = [x.numpy() for x in
              strategy.experimental_local_results(kernel.value)]
    with self.assertRaisesRegex(TypeError, "allow_partial must be a bool"):
      legacy.restore_checkpoint(self.location, model, opt,
                                allow_partial="False")
    after = [x.numpy() for x in
             strategy.experimental_local_results(kernel.value)]
    self.assertLen(after, 2)
    for a, b in zip(before, after):
      np.testing.assert_array_equal(a, b)
    self.assertEqual(int(opt.iterations.numpy()), 0)

  @parameterized.product(flag=["compile", "safe_mode", "allow_partial",
                               "return_report"],
                         value=["False", 0, None])
  def test_load_model_flags_must_be_bools(self, flag, value):
    with self.assertRaisesRegex(TypeError, f"{flag} must be a bool"):
      legacy.load_model(H5_FIXTURE, **{flag: value})

  def test_load_saved_model_safe_mode_must_be_a_bool(self):
    with mock.patch.object(tf.saved_model, "load") as load:
      with self.assertRaisesRegex(TypeError, "safe_mode must be a bool"):
        legacy.load_saved_model(SM_FIXTURE, safe_mode="False")
    load.assert_not_called()
