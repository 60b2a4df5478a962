"""Reader stage: a TF 2.x object-based checkpoint's object graph and values."""

import collections
import os

import tensorflow as tf

from tf_mixed_precision_compat import _private_api
from tf_mixed_precision_compat.legacy import _args

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
# Ends the key of a variable's value: `<path>/.ATTRIBUTES/VARIABLE_VALUE`.
VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
# Keras object graphs are a few levels deep (`model/layer_with_weights-0/
# kernel`, nested models add a few each) and reach a variable by a few
# paths; far more is hostile, and costs bounded work (the rest unmatched).
_MAX_PATH_LENGTH, _MAX_PATHS = 64, 16


def checkpoint_prefix(path) -> str:
  """The checkpoint prefix `path` designates.

  Args:
    path: A checkpoint prefix (`.../ckpt-3`) or a directory holding a
      `tf.train.CheckpointManager`'s `checkpoint` state file (its latest
      checkpoint is used).

  Returns:
    The prefix, whose `.index` file exists.

  Raises:
    OSError: (`FileNotFoundError`) if there is no such checkpoint.
    ValueError: If the directory's `checkpoint` state file is not text.
  """
  path = _args.path_arg(path)
  if os.path.isdir(path):
    try:
      prefix = tf.train.latest_checkpoint(path)
    except UnicodeDecodeError as e:  # TF parses the state file as text.
      raise ValueError(
          f"{os.path.join(path, 'checkpoint')!r}: not a checkpoint state "
          f"file (not text: {e.reason} at byte {e.start}).") from None
    if prefix is None:
      raise FileNotFoundError(
          f"No checkpoint found in directory {path!r} (no 'checkpoint' state "
          "file pointing at an existing checkpoint).")
    return prefix
  if not tf.io.gfile.exists(path + ".index"):
    raise FileNotFoundError(
        f"No checkpoint at {path!r}: {path + '.index'!r} does not exist.")
  return path


def open_checkpoint(prefix: str, what=None):
  """A reader of `prefix`, with errors naming the file (or `what`)."""
  try:
    return tf.train.load_checkpoint(prefix)
  except (tf.errors.OpError, ValueError) as e:
    what = what or f"checkpoint {prefix!r}"
    raise ValueError(f"Cannot read {what} (truncated or corrupted?): "
                     f"{e}") from None


class ObjectGraph:
  """A parsed `_CHECKPOINTABLE_OBJECT_GRAPH` with its variables' keys."""

  def __init__(self, serialized, source):
    corrupted = f"{source!r}: the checkpoint's object graph is corrupted"
    proto = _private_api.trackable_object_graph_pb2.TrackableObjectGraph()
    try:
      proto.ParseFromString(serialized)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"{corrupted} ({e}).") from None
    self.nodes = proto.nodes
    if not self.nodes:
      raise ValueError(f"{corrupted} (it has no root object).")
    for node in self.nodes:  # Every node id must name a node of the graph.
      ids = [ref.node_id for ref in node.children]
      for slot in node.slot_variables:
        ids += [slot.original_variable_node_id, slot.slot_variable_node_id]
      bad = [i for i in ids if not 0 <= i < len(self.nodes)]
      if bad:
        raise ValueError(f"{corrupted} (a reference to node {bad[0]} of "
                         f"{len(self.nodes)}).")

  def child(self, node_id, name):
    return next((c for n, c in self.children(node_id) if n == name), None)

  def children(self, node_id):
    return [(ref.local_name, ref.node_id)
            for ref in self.nodes[node_id].children]

  def variable(self, node_id):
    """(checkpoint key, full name) of a variable node, or None."""
    for attr in self.nodes[node_id].attributes:
      if attr.name == "VARIABLE_VALUE":
        return attr.checkpoint_key, attr.full_name
    return None

  def variable_child(self, node_id, name):
    """The checkpoint key of variable child `name` of `node_id`, or None."""
    child = self.child(node_id, name)
    info = None if child is None else self.variable(child)
    return None if info is None else info[0]

  def _walk(self, node_id, skip):
    """(node, its children's names but `skip`) of each node reachable."""
    seen, stack = set(), [node_id]
    while stack:
      current = stack.pop()
      if current in seen:
        continue
      seen.add(current)
      refs = [r for r in self.nodes[current].children
              if r.local_name not in skip]
      yield current, [r.local_name for r in refs]
      stack.extend(r.node_id for r in refs)
      stack.extend(s.slot_variable_node_id
                   for s in self.nodes[current].slot_variables)

  def variable_nodes_under(self, node_id, skip=frozenset()):
    """Variable node ids reachable from `node_id` (slots included)."""
    return [n for n, _ in self._walk(node_id, skip)
            if self.variable(n) is not None]

  def names_under(self, node_id, skip=frozenset()):
    """The child names met below `node_id`, not via `skip`."""
    return (name for _, names in self._walk(node_id, skip) for name in names)

  def variable_node_set(self, node_ids):
    """The variable nodes under any of `node_ids`, as a set."""
    return {n for node_id in node_ids
            for n in self.variable_nodes_under(node_id)}

  def keys_under(self, node_id):
    """The checkpoint keys of `variable_nodes_under(node_id)`."""
    return [self.variable(n)[0] for n in self.variable_nodes_under(node_id)]

  def paths(self, start, skip=frozenset()):
    """node id -> child-name paths from `start` (acyclic), not via `skip`."""
    result = collections.defaultdict(list)
    stack = [(start, (), frozenset({start}))]
    while stack:  # Depth-first, children in order, as a recursion would.
      node_id, path, on_path = stack.pop()
      if len(result[node_id]) >= _MAX_PATHS:
        continue
      result[node_id].append(path)
      if len(path) >= _MAX_PATH_LENGTH:
        continue
      for name, child in reversed(self.children(node_id)):
        if child not in on_path and name not in skip:
          stack.append((child, path + (name,), on_path | {child}))
    return result


def read_object_graph(reader, source):
  """The `ObjectGraph` of an open checkpoint, errors naming `source`."""
  try:
    keys = reader.get_variable_to_shape_map()
  except tf.errors.OpError as e:
    raise ValueError(f"{source!r} is not a readable checkpoint: {e}") from None
  if OBJECT_GRAPH_KEY not in keys:
    raise ValueError(
        f"{source!r} is not an object-based checkpoint (no "
        f"{OBJECT_GRAPH_KEY}); name-based TF1 checkpoints are restored "
        "with tf.compat.v1.train.Saver.")
  return ObjectGraph(read_value(reader, OBJECT_GRAPH_KEY, source), source)


def check_values(reader, prefix):
  """Reads every value of the checkpoint at `prefix` once: TF checks a
  value's checksum only when it is read (`ValueError` naming the file)."""
  shards = tf.io.gfile.glob(prefix + ".data-*")
  source = shards[0] if len(shards) == 1 else prefix + ".data-*"
  for key in sorted(reader.get_variable_to_shape_map()):
    read_value(reader, key, source)


def read_value(reader, key, source):
  """The value of checkpoint key `key`, errors naming `source`."""
  try:
    return reader.get_tensor(key)
  except (tf.errors.OpError, ValueError, RuntimeError, IndexError,
          OSError) as e:
    raise ValueError(
        f"{source!r}: cannot read {key!r} (truncated or corrupted "
        f"checkpoint data?): {e}") from None
