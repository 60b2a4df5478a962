"""A failed (or partial) restore's lists, told as sentences grouped by layer.

Problems are explained from their records' kind and fields, never from their
message text; slots follow their variables, so they are summarised.
"""

from __future__ import annotations

from typing import Any

from tf_mixed_precision_compat.legacy import _problems
from tf_mixed_precision_compat.legacy import _read_checkpoint

_VALUE = _read_checkpoint.VALUE_SUFFIX
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


_SENTENCES = {
    _problems.SHAPE:
        "The old job's {key} has shape {found}, your model's {target} has "
        "shape {expected}: that layer has another size (units, input width "
        "or kernel size) than in the old job.",
    _problems.DTYPE:
        "The old job's {key} holds {found} values, your model's {target} "
        "holds {expected}: that layer (or the model's dtype policy) has "
        "another dtype than in the old job.",
    _problems.TWICE:
        "Both {key} and {other} of the old job would go into your {target}: "
        "your model has fewer layers with weights than the old job, or "
        "builds them in another order.",
    _problems.AMBIGUOUS:
        "The old job's {key} would go into several variables of your model "
        "({target}): your model shares or nests those layers otherwise.",
    _problems.STRUCTURE:
        "The old job's {key} belongs to its layer '{found}' but would go "
        "into your layer '{target}', while your model also has a layer "
        "'{found}': your model arranges its layers otherwise.",
    _problems.NO_MATCH:
        "None of the weights of your model '{target}' matches the old job's "
        "entries for it, so nothing would be restored: is it the same "
        "architecture?",
    _problems.VALUE: "{key}: {reason}",
}


def _problem(problem: _problems.Problem, targets: set) -> str:
  """The sentence for `problem`; adds the names it covers to `targets`."""
  targets.update((problem.key, problem.other, problem.target))
  fields = dict(vars(problem), key=_key(problem.key),
                other=_key(problem.other))
  return _SENTENCES[problem.kind].format(**fields)


def root_entries(keys: list) -> list[str]:
  """Plain variables at the checkpoint's root (a step, an epoch counter)."""
  return [_key(k) for k in keys if "/" not in _key(k)]


def _optimizer_key(key: str) -> bool:
  return key.startswith("optimizer/") or "/optimizer/" in key


def sentences(source: Any) -> list[str]:
  """Sentences for a `RestoreError` or `RestoreReport`'s mismatches.

  `source` has `unmatched_checkpoint`, `unmatched_objects` and optionally
  `problems`; the result is empty if everything fits.

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
  out = [_problem(p, targets) for p in problems if _SLOT not in p.key]
  slot_problems = [p for p in problems if _SLOT in p.key]
  if slot_problems and out:
    out.append("The optimizer's slots of those weights differ the same "
               f"way ({len(slot_problems)} values).")
  else:
    out += [_problem(p, targets) for p in slot_problems]
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
