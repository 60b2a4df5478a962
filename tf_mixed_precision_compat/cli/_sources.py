"""Where `convert` finds the model and the optimizer in a TF 2.x checkpoint.

Found in any layout the object graph tells (docs/migration.md), then bound by
`legacy/`'s matcher and gate, given those two nodes instead of the root's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from tf_mixed_precision_compat import legacy
from tf_mixed_precision_compat.cli import _plan
from tf_mixed_precision_compat.legacy import _entry_points
from tf_mixed_precision_compat.legacy import _gate
from tf_mixed_precision_compat.legacy import _layout
from tf_mixed_precision_compat.legacy import _match
from tf_mixed_precision_compat.legacy import _read_checkpoint

ROOT = "."  # How `--model-path` names the checkpoint's root.
_VALUE = _read_checkpoint.VALUE_SUFFIX
# Model and optimizer at the native checkpoint's root.
NATIVE = (("model",), ("optimizer",))


class NotConvertible(ValueError):
  """The checkpoint's layout is not one `convert` can write (exit code 1)."""


@dataclasses.dataclass
class Layout:
  """Where a checkpoint keeps what `convert` restores and carries over.

  Attributes:
    prefix: The checkpoint's prefix.
    reader: Its `tf.train.CheckpointReader`.
    graph: The checkpoint's `_read_checkpoint.ObjectGraph`.
    optimizer_node: The optimizer's node.
    inner_key: The checkpoint key prefix of its inner optimizer's state.
    optimizer_names: The optimizer's object path, a tuple of names.
    model_node: The model's node, or None (an optimizer-only checkpoint).
    model_names: Its object path, a tuple of names (`()`: the root), or None.
    extras: `{path (tuple of names): node}` of the scalar variables outside
      model and optimizer, `save_counter` aside.
  """
  prefix: str
  reader: Any
  graph: Any
  optimizer_node: int
  inner_key: str
  optimizer_names: tuple = ()
  model_node: Optional[int] = None
  model_names: Optional[tuple] = None
  extras: dict = dataclasses.field(default_factory=dict)

  @property
  def optimizer_path(self) -> str:
    """The optimizer's path, dotted (`trainer.optimizer`)."""
    return dotted(self.optimizer_names)

  @property
  def model_path(self) -> Optional[str]:
    """The model's path, dotted (`.`: the root), or None."""
    return None if self.model_names is None else dotted(self.model_names)


def dotted(path: tuple) -> str:
  """An object path as `--model-path` takes it.

  Example:

  >>> dotted(("trainer", "model")), dotted(())
  ('trainer.model', '.')
  """
  return ".".join(path) or ROOT


def _paths(graph: Any) -> dict:
  """`{node id: its shortest path from the root}`."""
  return {node: min(found, key=len)
          for node, found in graph.paths(0).items() if found}


def _resolve(graph: Any, path: str, option: str) -> int:
  """The node `path` (dotted, from the root) names, or a usage error."""
  node = 0
  for name in ([] if path in (ROOT, "") else path.split(".")):
    child = graph.child(node, name)
    if child is None:
      names = [n for n, _ in graph.children(node)]
      raise _plan.UsageError(f"{option} {path}: no {name!r} there; its "
                             f"children are {names}")
    node = child
  return node


def optimizer_nodes(graph: Any) -> list[int]:
  """The nodes of TF 2.x Keras optimizers (the wrapper, for TF 2.2's)."""
  wrapper_of = {child: node for node in range(len(graph.nodes))
                for name, child in graph.children(node)
                if name == "base_optimizer"}
  return sorted({wrapper_of.get(node, node)
                 for node in range(len(graph.nodes))
                 if graph.variable_child(node, "iter") is not None})


def model_nodes(graph: Any) -> list[int]:
  """Nodes of outermost TF 2.x Sequential/functional models (`layer-N`)."""
  found = [node for node in range(len(graph.nodes))
           if any(_match.LAYER_INDEX.match(name)
                  for name, _ in graph.children(node))]
  inner = {n for node in found
           for n in graph.paths(node, skip=_match.MODEL_ALIASES) if n != node}
  return [node for node in found if node not in inner]


def _subclassed_model_node(layout: Layout, model: Any,
                           paths: dict) -> Optional[int]:
  """The one node (two names deep at most) `model` restores from completely.

  A subclassed model names its layers by attribute: only a trial match tells.
  """
  covered = layout.graph.variable_node_set([layout.optimizer_node])
  fits = [node for node, path in paths.items()
          if len(path) <= 2 and node != layout.optimizer_node and
          node not in covered and layout.graph.variable(node) is None and
          _layout.maps_completely(layout.reader, layout.graph, layout.prefix,
                                  node, model, [layout.optimizer_node])]
  return fits[0] if len(fits) == 1 else None


def _locate_optimizer(graph: Any, paths: dict, given: Optional[str]) -> int:
  if given is not None:
    node = _resolve(graph, given, "--optimizer-path")
    if node not in optimizer_nodes(graph):
      raise _plan.UsageError(f"--optimizer-path {given}: not a TF 2.x Keras "
                             "optimizer (it has no `iter`)")
    return node
  found = optimizer_nodes(graph)
  if len(found) != 1:
    raise NotConvertible(
        f"{len(found)} TF 2.x Keras optimizers in the checkpoint "
        f"({', '.join(dotted(paths[n]) for n in found if n in paths)}): "
        "convert writes one; name it with --optimizer-path (dotted, e.g. "
        "trainer.optimizer)" if found else
        "No TF 2.x Keras optimizer in the checkpoint (no `iter` "
        "variable): convert writes a model with its optimizer's state")
  return found[0]


def _locate_model(layout: Layout, paths: dict, given: Optional[str],
                  model: Any, weights_h5: Optional[str]) -> Optional[int]:
  if given is not None:
    return _resolve(layout.graph, given, "--model-path")
  if weights_h5 is not None:
    return None  # The weights come from the H5 file.
  found = model_nodes(layout.graph)
  if len(found) > 1:
    raise NotConvertible(
        f"{len(found)} Keras models in the checkpoint "
        f"({', '.join(dotted(paths.get(n, ())) for n in found)}): name "
        "the one --model builds with --model-path (dotted, e.g. "
        "trainer.model; `.` for the root)")
  if found:
    return found[0]
  node = _subclassed_model_node(layout, model, paths)
  if node is None:
    # The usual entry: the restore then says why it does not fit.
    node = layout.graph.child(0, "model")
  if node is None and not _has_weights_outside(layout):
    raise NotConvertible(
        "The checkpoint holds no model weights, only the optimizer's: pass "
        "--weights-h5 FILE, the H5 file the job's model.save_weights wrote")
  if node is None:
    raise NotConvertible(
        "Cannot tell where the model is in the checkpoint (no node restores "
        "into --model completely): name it with --model-path (dotted, e.g. "
        "trainer.model; `.` for the root), or see `inspect --model`")
  return node


def _has_weights_outside(layout: Layout) -> bool:
  """Whether any non-scalar variable lies outside the optimizer."""
  covered = layout.graph.variable_node_set([layout.optimizer_node])
  shapes = layout.reader.get_variable_to_shape_map()
  return any(node not in covered and
             len(shapes[layout.graph.variable(node)[0]]) > 0
             for node in layout.graph.variable_nodes_under(0))


def written_paths(layout: Layout) -> tuple[tuple, str]:
  """`((model path, optimizer path), why not the old paths)` in the new one.

  The old paths, so that the job's own resume code restores it; the root's
  `model` and `optimizer` when the model was the root or absent (no job code
  restores those as they were) or one lies inside the other.

  Example:

  >>> layout = Layout("p", None, None, 1, "k", ("trainer", "optimizer"), 2,
  ...                 ("trainer", "model"))
  >>> written_paths(layout)
  ((('trainer', 'model'), ('trainer', 'optimizer')), '')
  >>> layout.model_names = ()
  >>> written_paths(layout)[1]
  "the model was the checkpoint's root"
  """
  model, optimizer = layout.model_names, layout.optimizer_names
  if model is None:
    return NATIVE, "the checkpoint holds no model"
  if not model:
    return NATIVE, "the model was the checkpoint's root"
  if _overlap(model, optimizer):
    return NATIVE, "the optimizer was inside the model"
  return (model, optimizer), ""


def _overlap(path: tuple, other: tuple) -> bool:
  """Whether one of two object paths lies at or below the other."""
  return path[:len(other)] == other or other[:len(path)] == path


def _extras(layout: Layout, paths: dict) -> dict:
  """`{path: node}` of the scalars to carry over; refuses other leftovers."""
  graph = layout.graph
  owned = graph.variable_node_set(
      [n for n in (layout.model_node, layout.optimizer_node) if n is not None])
  shapes = layout.reader.get_variable_to_shape_map()
  taken = written_paths(layout)[0]
  extras, outside = {}, []
  for node, path in sorted(paths.items(), key=lambda item: item[1]):
    info = graph.variable(node)
    if info is None or node in owned or path == (_layout.SAVE_COUNTER,):
      continue
    # Nor where the native checkpoint writes its model and optimizer.
    if len(shapes[info[0]]) > 0 or any(_overlap(path, p) for p in taken):
      outside.append(dotted(path))
    else:
      extras[path] = node
  if outside:
    raise NotConvertible(
        f"Variables outside the model ({layout.model_path}) and the "
        f"optimizer ({layout.optimizer_path}): {outside}; convert carries "
        "over only scalars (a step, an epoch) beside the model and the "
        "optimizer (name them with --model-path / --optimizer-path)")
  return extras


def find_optimizer(path: str,
                   optimizer_path: Optional[str] = None) -> Layout:
  """A `Layout` of where the checkpoint at `path` keeps its optimizer.

  Raises:
    NotConvertible: If there is no TF 2.x Keras optimizer, or several.
    _plan.UsageError: If `optimizer_path` names no optimizer.

  Example:

  >>> find_optimizer("/no/such/ckpt")
  Traceback (most recent call last):
  ...
  FileNotFoundError: No checkpoint at '/no/such/ckpt': ...
  """
  prefix = legacy.checkpoint_prefix(path)
  reader = legacy.open_checkpoint(prefix)
  graph = _read_checkpoint.read_object_graph(reader, prefix)
  paths = _paths(graph)
  node = _locate_optimizer(graph, paths, optimizer_path)
  step = graph.variable_child(_match.inner_optimizer_node(graph, node), "iter")
  return Layout(prefix, reader, graph, node, step[:-len("/iter" + _VALUE)],
                paths.get(node, ()))


def find(layout: Layout, model: Any, model_path: Optional[str] = None,
         weights_h5: Optional[str] = None) -> Layout:
  """Adds where the model is, and the scalars to carry over, to `layout`.

  Raises:
    NotConvertible: If the model cannot be told, or other variables than
      scalars lie outside model and optimizer.
    _plan.UsageError: If `model_path` names nothing, or `weights_h5` is
      given for a checkpoint that holds the model.
  """
  paths = _paths(layout.graph)
  if weights_h5 is not None and model_nodes(layout.graph):
    raise _plan.UsageError(
        "--weights-h5 is for checkpoints of the optimizer alone; this one "
        "holds the model's weights too")
  layout.model_node = _locate_model(layout, paths, model_path, model,
                                    weights_h5)
  if layout.model_node is not None:
    layout.model_names = paths.get(layout.model_node, ())
  layout.extras = _extras(layout, paths)
  return layout


def _slots(optimizer: Any) -> set:
  """Ids of the inner optimizer's slot variables."""
  inner = _match.inner_optimizer_of(optimizer)
  own = {id(inner.iterations), id(getattr(inner, "_learning_rate", None))}
  return {id(v) for v in inner.variables if id(v) not in own}


def restore(layout: Layout, model: Any, optimizer: Any,
            weights_h5: Optional[str] = None) -> Any:
  """Restores into the fresh `model` and `optimizer`; leftovers in the report.

  An optimizer-only checkpoint holds no slots (TF saved a slot only beside
  its variable): they stay at zero, as in the job's own resume.
  """
  graph = layout.graph
  if weights_h5 is not None:
    # TF 2.x `model.load_weights("w.h5")`: by topology.
    _entry_points.load_h5_weights(model, weights_h5)
  _match.build_optimizer(optimizer, [model])
  models = [] if layout.model_node is None else [(layout.model_node, model)]
  ignored = list(layout.extras.values()) + [
      node for name, node in graph.children(0)
      if name == _layout.SAVE_COUNTER]
  plan = _match.plan_restore(layout.reader, graph, layout.prefix, models,
                             [(layout.optimizer_node, optimizer)], ignored)
  expected = _match.expected_objects([m for _, m in models], [optimizer])
  if not models:
    slots = _slots(optimizer)
    expected = [(obj, text) for obj, text in expected if id(obj) not in slots]
  _gate.check(plan, expected, allow_partial=True)
  return _gate.assign(plan, [optimizer])
