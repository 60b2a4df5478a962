"""Front end: `tf.train.Checkpoint.restore` of TF 2.2-2.4 Keras checkpoints."""

import functools

import tensorflow as tf

from tf_mixed_precision_compat.legacy import _args
from tf_mixed_precision_compat.legacy import _deferred
from tf_mixed_precision_compat.legacy import _gate
from tf_mixed_precision_compat.legacy import _layout
from tf_mixed_precision_compat.legacy import _read_checkpoint


def read_or_restore(original, checkpoint, save_path, args, kwargs,
                    make_checkpoint):
  """TF's `original` (`read` or v1 `restore`), or the legacy restore's
  `LoadStatus`; `make_checkpoint(**objects)`: one for what TF restores."""
  prefix = _args.path_or_none(save_path)
  if (not prefix or not tf.io.gfile.exists(prefix + ".index") or
      not tf.executing_eagerly()):
    return original(checkpoint, save_path, *args, **kwargs)  # TF decides.
  try:
    reader = tf.train.load_checkpoint(prefix)
    graph = _read_checkpoint.read_object_graph(reader, prefix)
  except ValueError:
    return original(checkpoint, save_path, *args, **kwargs)
  parts = _layout.split(checkpoint, reader, graph, prefix)
  if parts is None:
    return original(checkpoint, save_path, *args, **kwargs)
  legacy = _deferred.LegacyRestore(reader, graph, prefix, parts)
  # Checked before TF restores the other entries, so that a mismatch leaves
  # every value as it was.
  legacy.check()
  if any(not _layout.model_built(m) for _, m in parts.models):
    # The models' part waits for their build: should it fail, what TF's part
    # and the save counter got now is put back (never a partial state).
    legacy.roll_back = _deferred.Snapshot(
        list(parts.others.values()) + [checkpoint.save_counter]).roll_back
  native, native_keys = None, []
  if parts.others:
    native = original(make_checkpoint(**parts.others), save_path, *args,
                      **kwargs)
    # TF would list the Keras objects restored above as "could not be found"
    # at exit; what its part leaves unrestored, this restore's checks name.
    native.expect_partial()
    native_keys = _native_keys(graph, parts)
  key = graph.variable_child(0, _layout.SAVE_COUNTER)
  if key is not None:
    with tf.init_scope():
      checkpoint.save_counter.assign(reader.get_tensor(key))
  legacy.start()
  return _gate.LoadStatus(legacy, native, native_keys)


def _native_keys(graph, parts):
  """[(variable node, key)] of the root entries TF's part restores."""
  legacy = graph.variable_node_set(parts.legacy_nodes)
  entries = dict(graph.children(0))
  return [(node, graph.variable(node)[0])
          for name in parts.others if name in entries
          for node in graph.variable_nodes_under(entries[name])
          if node not in legacy]


def patched_read(original, make_checkpoint=tf.train.Checkpoint):
  """`tf.train.Checkpoint.read` that restores TF 2.x Keras checkpoints."""

  @functools.wraps(original)
  def read(self, save_path, *args, **kwargs):
    return read_or_restore(original, self, save_path, args, kwargs,
                           make_checkpoint)

  return read


def patched_restore_v1(original):
  """`tf.compat.v1.train.Checkpoint.restore`, idem."""
  return patched_read(original, tf.compat.v1.train.Checkpoint)
