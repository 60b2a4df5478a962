"""A failed (or partial) restore's lists, told as sentences grouped by layer.

The package's `RestoreError` / `RestoreReport` name every checkpoint key and
Keras 3 variable; a user needs to know which layers differ and how. Slots
follow their variables, so they are summarised, not listed.
"""

from __future__ import annotations

import re
from typing import Any

_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
_SHAPE = re.compile(r"^(.*?): shape (\(.*?\)) in the checkpoint, (\(.*?\)) "
                    r"for (.*)$")
_BOTH = re.compile(r"^(.*?) and (.*?) both restore (.*)$")
_SLOT = ".OPTIMIZER_SLOT/"


def _key(key: str) -> str:
  return key[:-len(_VALUE)] if key.endswith(_VALUE) else key


def _by_layer(names: list[str]) -> str:
  """`a/b/kernel, a/b/bias` -> `a/b (kernel, bias)`."""
  groups: dict = {}
  for name in names:
    layer, _, weight = name.rpartition("/")
    groups.setdefault(layer or name, []).append(weight)
  return "; ".join(f"{layer} ({', '.join(ws)})" for layer, ws in
                   groups.items())


def _problem(text: str, targets: set) -> str:
  match = _SHAPE.match(text)
  if match:
    key, old, new, target = match.groups()
    targets.update((key, target))
    return (f"The old job's {_key(key)} has shape {old}, your model's "
            f"{target} has shape {new}: that layer has another size (units, "
            "input width or kernel size) than in the old job.")
  match = _BOTH.match(text)
  if match:
    first, second, target = match.groups()
    targets.update((first, second, target))
    return (f"Both {_key(first)} and {_key(second)} of the old job would go "
            f"into your {target}: your model has fewer layers with weights "
            "than the old job, or builds them in another order.")
  return text.replace(_VALUE, "")


def root_entries(keys: list) -> list[str]:
  """Plain variables at the checkpoint's root (a step, an epoch counter).

  Neither model nor optimizer: the job's own `tf.train.Checkpoint` restores
  them, and `convert` carries them over.
  """
  return [_key(k) for k in keys if "/" not in _key(k)]


def _optimizer_key(key: str) -> bool:
  return key.startswith("optimizer/") or "/optimizer/" in key


def sentences(source: Any) -> list[str]:
  """Sentences for a `RestoreError` or `RestoreReport`'s mismatches.

  Args:
    source: Anything with `unmatched_checkpoint` and `unmatched_objects`
      (and optionally `problems`) lists.

  Returns:
    One sentence per problem, grouped by layer; empty if everything fits.

  Example:

  >>> class Error:
  ...   problems = []
  ...   unmatched_checkpoint = ["model/layer_with_weights-1/kernel"]
  ...   unmatched_objects = ["bn/gamma", "bn/beta"]
  >>> for line in sentences(Error()):
  ...   print(line)
  The old job's weights model/layer_with_weights-1 (kernel) have no place ...
  Your model's bn (gamma, beta) get no value from the checkpoint ...
  """
  targets: set = set()
  problems = getattr(source, "problems", [])
  out = [_problem(p, targets) for p in problems if _SLOT not in p]
  slot_problems = [p for p in problems if _SLOT in p]
  if slot_problems and out:
    out.append("The optimizer's slots of those weights differ the same "
               f"way ({len(slot_problems)} values).")
  elif slot_problems:
    out += [_problem(p, targets) for p in slot_problems]
  else:
    for p in slot_problems:
      _problem(p, targets)
  root = root_entries(source.unmatched_checkpoint)
  extra = [_key(k) for k in source.unmatched_checkpoint
           if _SLOT not in k and not _optimizer_key(k) and _key(k) not in root]
  if extra:
    out.append(f"The old job's weights {_by_layer(extra)} have no place in "
               "your model (a layer your model lacks, or layers created in "
               "another order or nesting; TF 2.x numbered the layers that "
               "hold weights, layer_with_weights-N, in the order the model "
               "tracks them).")
  missing = [k for k in source.unmatched_objects if k not in targets
             and not k.startswith("optimizer/")]
  if missing:
    out.append(f"Your model's {_by_layer(missing)} get no value from the "
               "checkpoint (layers the old job did not have, or of another "
               "kind or structure).")
  slots = [k for k in source.unmatched_checkpoint + source.unmatched_objects
           if k not in targets and (_SLOT in k or _optimizer_key(k))
           and _key(k) not in root]
  if slots and not (extra or missing or out):
    out.append(f"{len(slots)} optimizer values (slots, hyperparameters) do "
               "not match: the optimizer class differs from the old job's "
               "(pass --optimizer).")
  return out
