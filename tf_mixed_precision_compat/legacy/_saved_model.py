"""Reader stage: TF 2.3/2.4 Keras SavedModels, and serving them."""

import contextlib
import os

from google.protobuf import text_format
import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _config


class _RevivedOptimizer(tf.Module):
  """Stands in for a served SavedModel's optimizer (slots left untracked)."""

  def __init__(self):
    super().__init__()
    self.__dict__["_untracked_slots"] = []

  def add_slot(self, var, slot_name):
    del slot_name  # Positional: the loader restores slots by node.
    slot = tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False)
    self.__dict__["_untracked_slots"].append(slot)
    return slot


_registered: list[bool] = []
_OPTIMIZER_TYPE = "optimizer"


def serving_enabled():
  """Whether `tf.saved_model.load` revives TF 2.x optimizers (ours or not)."""
  load = tf.__internal__.saved_model.load
  return _OPTIMIZER_TYPE in load.registered_identifiers()


def enable_serving():
  """Lets `tf.saved_model.load` revive TF 2.x Keras optimizers (once)."""
  if serving_enabled():
    return  # e.g. tf_keras's, which replacing would change tf_keras's loads.
  load = tf.__internal__.saved_model.load
  load.register_revived_type(
      _OPTIMIZER_TYPE, lambda obj: False,  # Never used when saving.
      versions=[load.VersionedTypeRegistration(
          object_factory=lambda proto: _RevivedOptimizer(), version=1,
          min_producer_version=1, min_consumer_version=1, setter=setattr)])
  _registered.append(True)


def disable_serving():
  """Undoes `enable_serving()`; another library's registration stays."""
  if not _registered:
    return
  _private_api.unregister_revived_type(_OPTIMIZER_TYPE)
  _registered.clear()


@contextlib.contextmanager
def serving():
  """`enable_serving()` for the duration of a load, unless already enabled."""
  registered_here = not serving_enabled()
  enable_serving()
  try:
    yield
  finally:
    if registered_here:
      disable_serving()


def is_saved_model(path):
  return os.path.isdir(path) and (
      tf.io.gfile.exists(os.path.join(path, "saved_model.pb")) or
      tf.io.gfile.exists(os.path.join(path, "saved_model.pbtxt")))


def _read_proto(path):
  """The SavedModel proto of directory `path` (binary or text)."""
  pb_path = os.path.join(path, "saved_model.pb")
  text = not tf.io.gfile.exists(pb_path)
  if text:
    pb_path += "txt"
  with tf.io.gfile.GFile(pb_path, "rb") as f:
    data = f.read()
  proto = _private_api.saved_model_pb2.SavedModel()
  try:
    if text:
      text_format.Parse(data.decode("utf-8"), proto)
    else:
      proto.ParseFromString(data)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"{pb_path!r} is corrupted or truncated ({e}).") from None
  if not proto.meta_graphs:
    raise ValueError(f"{pb_path!r} holds no MetaGraph (corrupted?).")
  return proto


def root_metadata(path):
  """The Keras metadata JSON object of the SavedModel's root object."""
  if not tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
    raise ValueError(f"{path!r}: only binary saved_model.pb files are "
                     "supported (found saved_model.pbtxt).")
  nodes = _read_proto(path).meta_graphs[0].object_graph_def.nodes
  metadata = (nodes[0].user_object.metadata if nodes and
              nodes[0].WhichOneof("kind") == "user_object" else "")
  if not metadata:
    raise ValueError(
        f"{path!r} is a SavedModel without Keras metadata (not written by "
        "a Keras model.save()); serve it with tf.saved_model.load.")
  return _config.expect_dict(
      _config.parse_json(metadata, "Keras metadata", path),
      "Keras metadata", path)


def load_time_code(path):
  """Descriptions of the graph code the SavedModel's loading would run."""
  found = []
  for index, meta_graph in enumerate(_read_proto(path).meta_graphs):
    tags = list(meta_graph.meta_info_def.tags)
    nodes = meta_graph.object_graph_def.nodes
    if not nodes:
      found.append(f"MetaGraph {index} (tags {tags}) is in TF1 format: its "
                   "saver restore op and init op run at load")
    for node_id, node in enumerate(nodes):
      if node.WhichOneof("kind") == "resource":
        found.append(f"MetaGraph {index}, node {node_id}: a resource whose "
                     "_create_resource/_initialize functions run at load")
      if node.saveable_objects:
        found.append(f"MetaGraph {index}, node {node_id}: saveable objects "
                     f"{sorted(node.saveable_objects)} whose restore "
                     "functions run at load")
  return found


def check_load_time_code(path):
  """Refuses (`ValueError`) SavedModels whose loading runs their graph code;
  `OSError` for an unparsable `saved_model.pb`, as `tf.saved_model.load`."""
  try:
    found = load_time_code(path)
  except ValueError as e:
    raise OSError(str(e)) from None
  if found:
    raise ValueError(
        f"{path!r}: refusing to load: tf.saved_model.load would run graph "
        "functions stored in the file while loading (" + "; ".join(found) +
        "). Graph ops can read and write files. Pass safe_mode=False only if "
        "you trust the file.")


def _decode_tuples(value):
  """Undoes SavedModel JSON's `{"class_name": "__tuple__", "items": [...]}`."""
  if isinstance(value, dict):
    if value.get("class_name") == "__tuple__" and set(value) == {
        "class_name", "items"}:
      return [_decode_tuples(v) for v in value["items"]]
    return {k: _decode_tuples(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_decode_tuples(v) for v in value]
  return value


def model_and_training_config(path):
  """The model config and training config (or None) a SavedModel holds."""
  metadata = _decode_tuples(root_metadata(path))
  config = {"class_name": metadata.get("class_name"),
            "config": metadata.get("config")}
  training_config = _config.expect_dict(
      metadata.get("training_config"), "training_config", path,
      allow_none=True)
  return config, training_config
