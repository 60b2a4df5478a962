"""The libcst transformer behind `migrate`: finds and rewrites API uses.

libcst keeps every comment and all formatting outside the rewritten
expressions. Names are resolved through the file's imports
(`QualifiedNameProvider`), so `mixed_precision.Policy` after `from
tensorflow.keras.mixed_precision import experimental as mixed_precision` is
recognised. Methods (`get_scaled_loss`, ...) are recognised by name, on
receivers the whole-file facts (`_facts.py`) say hold an optimizer or a
policy. A use is rewritten only where the Keras 3 code does what the TF 2.x
code did; every other use is a "manual" finding that says what to change.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import libcst as cst
from libcst import matchers as m
from libcst.metadata import PositionProvider
from libcst.metadata import QualifiedNameProvider

from tf_mixed_precision_compat.cli import _api_table as table
from tf_mixed_precision_compat.cli import _facts
from tf_mixed_precision_compat.cli._facts import code

_DYNAMIC_ARGS = {"initial_loss_scale": "initial_scale",
                 "increment_period": "dynamic_growth_steps"}
_V1 = "tf.compat.v1.mixed_precision."
_NO_LOSS_SCALE = (
    "Keras 3 policies hold no loss scale; the loss scale is the "
    "optimizer's (keras.optimizers.LossScaleOptimizer, dynamic only)")
_PRIVATE_MODULES = ("tensorflow.python.keras.mixed_precision",
                    "tensorflow.python.training.experimental.loss_scale",
                    "tensorflow.python.training.experimental.mixed_precision")
_BUILT = (
    "Keras 3 creates the scale variable when the optimizer is built; built "
    "here, scale_loss in a tf.function reads the (restored) variable "
    "instead of baking in initial_scale, and `dynamic_scale` exists before "
    "the first step")
_FIXED = (
    "a fixed loss scale has no Keras 3 counterpart (Keras 3's "
    "LossScaleOptimizer is dynamic only, and a fixed TF scale applied "
    "non-finite steps): multiply the loss by the scale and divide the "
    "gradients by it yourself, or move to dynamic scaling (behaviour "
    "changes)")


@dataclasses.dataclass
class Finding:
  """One API use: where, what, its replacement, and whether it was rewritten.

  `status` is "rewrite" (keeps behaviour; applied with --write), "native"
  (Keras 3 has the name; left as is) or "manual" (no exact rewrite: the
  change says what to do).
  """
  line: int
  column: int
  api: str
  replacement: str
  change: str
  status: str
  old_api: bool = True  # False: a note on Keras 3 code (no TF 2.x API left)


def _expr(text: str) -> cst.BaseExpression:
  return cst.parse_expression(text)


def _kwarg(key: str, value: cst.BaseExpression) -> cst.Arg:
  return cst.Arg(keyword=cst.Name(key), value=value, equal=cst.AssignEqual(
      cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))


def _is_string(node: Any, *values: str) -> bool:
  return isinstance(node, cst.SimpleString) and \
      node.evaluated_value in values


def _special(name: str) -> bool:
  """Names rewritten as whole calls (arguments change), not as names."""
  return name in table.GRAPH_REWRITE or name == table.GRAPH_REWRITE_OFF[0] \
      or name in table.FUNCTIONS and name.startswith("keras.") and (
          name.endswith(("LossScaleOptimizer", "get_layer_policy",
                         "experimental.Policy")))


def _is_old_lso(name: str) -> bool:
  return name in table.FUNCTIONS and name.endswith("LossScaleOptimizer") \
      and name.startswith("keras.")


class Migrator(cst.CSTTransformer):
  """Collects `Finding`s and rewrites the uses that keep behaviour."""

  METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

  def __init__(self, facts: _facts.Facts) -> None:
    super().__init__()
    self.facts = facts
    self.findings: list[Finding] = []
    self.needs_keras = False
    self.needs_tf = False
    self._scopes: list[str] = ["<module>"]
    self._call_funcs: set[cst.CSTNode] = set()
    self._before: list[cst.BaseStatement] = []  # for the current statement
    self._dropped: set[tuple[int, int]] = set()  # findings inside dropped args

  # Bookkeeping.
  def _names(self, node: cst.CSTNode) -> list[str]:
    return sorted(table.normalise(q.name) for q in
                  self.get_metadata(QualifiedNameProvider, node, set()))

  def _pos(self, node: cst.CSTNode) -> tuple[int, int]:
    pos = self.get_metadata(PositionProvider, node).start
    return pos.line, pos.column + 1

  def _add(self, node: cst.CSTNode, api: str, replacement: Optional[str],
           change: str, status: str) -> None:
    self.findings.append(Finding(*self._pos(node), api,
                                 replacement if replacement is not None
                                 else "(none)", change, status))

  def _drop_findings_in(self, node: cst.CSTNode) -> None:
    """Forgets findings inside an argument the rewrite removes."""
    start = self.get_metadata(PositionProvider, node)
    first = (start.start.line, start.start.column + 1)
    last = (start.end.line, start.end.column + 1)
    self.findings = [f for f in self.findings
                     if not first <= (f.line, f.column) <= last]

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    self._scopes.append(f"{node.name.value}@{self._pos(node)[0]}")

  def leave_FunctionDef(self, original: cst.FunctionDef,
                        updated: cst.FunctionDef) -> cst.FunctionDef:
    self._scopes.pop()
    return updated

  @property
  def scope(self) -> str:
    return self._scopes[-1]

  def visit_Call(self, node: cst.Call) -> None:
    self._call_funcs.add(node.func)

  # Imports: names there are declarations, not uses; TF's private modules
  # of the old API are gone.
  def visit_Import(self, node: cst.Import) -> bool:
    for alias in node.names:
      self._private_module(node, code(alias.name))
    return False

  def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
    if node.module is not None:
      self._private_module(node, code(node.module))
    return False

  def _private_module(self, node: cst.CSTNode, module: str) -> None:
    if module.startswith(_PRIVATE_MODULES):
      self._add(node, module, None, "not rewritten: a private TensorFlow "
                "module of the old API, gone in TF 2.21: subclass or use "
                "keras.optimizers.LossScaleOptimizer (its `inner_optimizer`, "
                "`dynamic_scale`, `step_counter`) instead", "manual")

  # Names: function and class endpoints.
  def leave_Call(self, original: cst.Call, updated: cst.Call
                 ) -> cst.BaseExpression:
    for name in self._names(original.func):
      if name in table.GRAPH_REWRITE:
        return self._graph_rewrite(original, updated, name)
      if name == table.GRAPH_REWRITE_OFF[0]:
        self._add(original, name, table.GRAPH_REWRITE_OFF[1],
                  table.GRAPH_REWRITE_OFF[2], "rewrite")
        self.needs_tf = True
        return _expr(table.GRAPH_REWRITE_OFF[1])
      if _special(name) and name.endswith("LossScaleOptimizer"):
        return self._lso(original, updated, name)
      if _special(name) and name.endswith("Policy"):
        return self._policy(original, updated, name)
      if _special(name):
        return self._layer_policy(original, updated, name)
    return self._method_call(original, updated)

  def leave_Attribute(self, original: cst.Attribute,
                      updated: cst.Attribute) -> cst.BaseExpression:
    for name in self._names(original):
      if name in table.NATIVE:
        self._add(original, name, "unchanged", "Keras 3 has it", "native")
      elif _is_old_lso(name) and original not in self._call_funcs:
        return self._replace_name(original, updated, name)
      elif name in table.FUNCTIONS and not _special(name):
        return self._replace_name(original, updated, name)
    return self._method_attribute(original, updated)

  def leave_Name(self, original: cst.Name, updated: cst.Name
                 ) -> cst.BaseExpression:
    for name in self._names(original):
      if (name in table.FUNCTIONS and not _special(name) or _is_old_lso(name)
          and original not in self._call_funcs):
        return self._replace_name(original, updated, name)
    return updated

  def _replace_name(self, original: cst.CSTNode, updated: Any,
                    name: str) -> Any:
    replacement, change = table.FUNCTIONS[name]
    if replacement is None:
      self._add(original, name, None, change, "manual")
      return updated
    if _is_old_lso(name):  # A class reference (isinstance, a type check).
      change = "the same check: Keras 3's class is the optimizer's type"
    self._add(original, name, replacement, change, "rewrite")
    if replacement.startswith("keras."):
      self.needs_keras = True
    return _expr(replacement)

  # Loss-scale optimizers and policies.
  def _lso_args(self, original: cst.Call, updated: cst.Call, name: str
                ) -> tuple[Optional[list[cst.Arg]], str]:
    """Keras 3 arguments for a TF 2.3/2.4 LossScaleOptimizer call.

    Returns `(arguments, "")`, or `(None, why not)`.
    """
    order = (["optimizer", "loss_scale"] if "experimental" in name else
             ["inner_optimizer", "dynamic", "initial_scale",
              "dynamic_growth_steps"])
    named: dict = {}
    for i, (arg, new) in enumerate(zip(original.args, updated.args)):
      if arg.star or i >= len(order) and arg.keyword is None:
        return None, "arguments Keras 3 cannot express"
      named[arg.keyword.value if arg.keyword else order[i]] = (arg, new)
    inner = named.pop(order[0], None)
    if inner is None:
      return None, "no inner optimizer given"
    out = [inner[1]]
    if "loss_scale" in named:
      value = named.pop("loss_scale")[0].value
      extra, why = self._loss_scale_args(value)
      if extra is None:
        return None, why
      self._drop_findings_in(value)
      out += extra
    dynamic = named.pop("dynamic", None)
    if dynamic is not None and not m.matches(dynamic[0].value,
                                             m.Name("True")):
      return None, _FIXED
    for key, (_, new) in named.items():
      out.append(_kwarg(key, new.value))
    return out, ""

  def _resolve_loss_scale(self, value: cst.BaseExpression
                          ) -> _facts.LossScale:
    """`value` as the loss scale it stands for: an alias or a policy's."""
    if isinstance(value, cst.Name):
      found = self.facts.lookup(self.scope, value.value)
      if found is not None and found.kind == "loss_scale":
        value = found.value  # type: ignore[assignment]
    if isinstance(value, cst.Attribute) and value.attr.value == "loss_scale":
      policy = value.value
      if self.facts.kind_of(policy, self.scope) != "policy":
        return None
      held = self.facts.policy_loss_scale(policy, self.scope)
      if held == "default":
        return (cst.SimpleString("'dynamic'") if
                self.facts.policy_is_float16(policy, self.scope) else None)
      return held
    return value

  def _loss_scale_args(self, value: cst.BaseExpression
                       ) -> tuple[Optional[list[cst.Arg]], str]:
    resolved = self._resolve_loss_scale(value)
    if resolved is None or isinstance(resolved, str):
      return None, ("the loss scale is not known from this file (a variable "
                    "or a policy's): if it is 'dynamic', drop the argument; "
                    "if a DynamicLossScale, pass its initial_loss_scale and "
                    "increment_period as initial_scale and "
                    "dynamic_growth_steps; " + _FIXED)
    if _is_string(resolved, "dynamic"):
      return [], ""
    if not (isinstance(resolved, cst.Call) and any(
        n.endswith("DynamicLossScale") for n in self._names(resolved.func))):
      return None, _FIXED
    arguments = _facts.dynamic_arguments(resolved)
    if arguments is None:
      return None, "DynamicLossScale arguments Keras 3 cannot express"
    out = []
    for key, arg in arguments.items():
      if key == "multiplier":
        if not m.matches(arg.value, m.Integer("2") | m.Float("2.0")):
          return None, "Keras 3's dynamic scale grows and shrinks by 2 only"
        continue
      out.append(_kwarg(_DYNAMIC_ARGS[key], arg.value))
    return out, ""

  def _lso(self, original: cst.Call, updated: cst.Call, name: str
           ) -> cst.BaseExpression:
    replacement, change = table.FUNCTIONS[name]
    args, why = self._lso_args(original, updated, name)
    if args is None:
      self._add(original, name, replacement, f"not rewritten: {why}",
                "manual")
      return updated
    self._add(original, name, replacement, change, "rewrite")
    self.needs_keras = True
    # The kept arguments keep their own spacing; the last loses its comma
    # only when arguments after it were dropped.
    if len(args) < len(updated.args):
      args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(func=_expr(str(replacement)), args=args)

  def _policy(self, original: cst.Call, updated: cst.Call, name: str
              ) -> cst.BaseExpression:
    """TF 2.3's `Policy(name, loss_scale=...)`: the loss scale moves."""
    replacement, change = table.FUNCTIONS[name]
    held = _facts.policy_call_loss_scale(original)
    float16 = _facts.policy_name(original) == "mixed_float16"
    dropped = [i for i, arg in enumerate(original.args) if (
        arg.keyword.value == "loss_scale" if arg.keyword else i == 1)]
    keep = [new for i, new in enumerate(updated.args) if i not in dropped]
    if dropped:
      why = self._policy_loss_scale_problem(held, float16)
      if why is not None:
        self._add(original, name, replacement, why, "manual")
        return updated
      for i in dropped:
        self._drop_findings_in(original.args[i])
      change = ("same dtypes; its loss scale dropped (a policy holds none "
                "now; Keras 3's compile gives a mixed_float16 model's "
                "optimizer the same dynamic one)")
    self._add(original, name, replacement, change, "rewrite")
    self.needs_keras = True
    if keep:
      keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(func=_expr(str(replacement)), args=keep)

  def _policy_loss_scale_problem(self, held: _facts.LossScale,
                                 float16: bool) -> Optional[str]:
    """Why dropping a policy's loss scale would change the job, or None."""
    if not (held == "default" or isinstance(held, (
        cst.SimpleString, cst.Integer, cst.Float, cst.Call)) or isinstance(
            held, cst.Name) and held.value == "None"):
      # A helper's parameter or a flag: a compile() in another file may
      # read it, and a number there was a fixed scale Keras 3 cannot give.
      return (_NO_LOSS_SCALE + ". This one is only known at run time: if "
              "it is 'dynamic' (or None for a policy other than "
              "mixed_float16), drop the argument; if it is None for "
              "mixed_float16, also pass auto_scale_loss=False to compile(); "
              "a number was a fixed scale: " + _FIXED)
    if not self.facts.has_compile:
      return None  # Only compile() read a policy's loss scale.
    if held == "default" or _is_string(held, "dynamic") and float16:
      return None  # Keras 3's compile wraps mixed_float16 the same way.
    if _is_string(held, "dynamic"):
      return (_NO_LOSS_SCALE + ". compile() wrapped the optimizer of this "
              "(not mixed_float16) policy: drop the argument and compile "
              "with keras.optimizers.LossScaleOptimizer(optimizer)")
    if isinstance(held, cst.Name) and held.value == "None":
      if not float16:
        return None  # Neither TF 2.3 nor Keras 3 wraps it in compile().
      return (_NO_LOSS_SCALE + ". This policy asked for none, but Keras 3's "
              "compile() wraps a mixed_float16 model's optimizer: drop the "
              "argument and pass auto_scale_loss=False to compile()")
    if isinstance(held, cst.Call) and not held.args and float16:
      return None  # DynamicLossScale(): Keras 3's defaults are TF's.
    if isinstance(held, cst.Call):
      return (_NO_LOSS_SCALE + f". compile() used {code(held)}: drop the "
              "argument and compile with keras.optimizers."
              "LossScaleOptimizer(optimizer, initial_scale=..., "
              "dynamic_growth_steps=...) carrying its initial_loss_scale "
              "and increment_period")
    return _NO_LOSS_SCALE + ". compile() used this scale: " + _FIXED

  def _policy_read(self, original: cst.Attribute, updated: cst.Attribute
                   ) -> cst.BaseExpression:
    """`policy.loss_scale`: TF's own LossScale object, as the policy held."""
    api = "Policy.loss_scale"
    held = self.facts.policy_loss_scale(original.value, self.scope)
    if held == "default":
      held = (cst.SimpleString("'dynamic'") if self.facts.policy_is_float16(
          original.value, self.scope) else cst.Name("None"))
    if held is None or isinstance(held, str):
      self._add(original, api, None, _NO_LOSS_SCALE + ": read the "
                "optimizer's `dynamic_scale`, or delete this read", "manual")
      return updated
    if isinstance(held, cst.Name) and held.value == "None":
      new = "None"
    elif _is_string(held, "dynamic"):
      new = _V1 + "DynamicLossScale()"
    elif isinstance(held, (cst.Integer, cst.Float)):
      new = f"{_V1}FixedLossScale({code(held)})"
    elif isinstance(held, cst.Call) and _facts.dynamic_arguments(held):
      new = (_V1 + "DynamicLossScale(" + ", ".join(
          code(a.value) if a.keyword is None else
          f"{a.keyword.value}={code(a.value)}" for a in held.args) + ")")
    else:
      self._add(original, api, None, _NO_LOSS_SCALE, "manual")
      return updated
    self._drop_findings_in(original.value)
    self._add(original, api, new, "the loss scale object this policy held: "
              "TF's own class, still shipped under tf.compat.v1 "
              "(a fresh one, as each TF 2.3 policy made its own)", "rewrite")
    self.needs_tf = True
    return _expr(new)

  def _layer_policy(self, original: cst.Call, updated: cst.Call, name: str
                    ) -> cst.BaseExpression:
    if len(updated.args) != 1 or updated.args[0].keyword is not None:
      self._add(original, name, None, table.FUNCTIONS[name][1], "manual")
      return updated
    self._add(original, name, "layer.dtype_policy", "same policy object",
              "rewrite")
    return cst.Attribute(value=updated.args[0].value,
                         attr=cst.Name("dtype_policy"))

  # The graph rewrite.
  def _graph_rewrite(self, original: cst.Call, updated: cst.Call, name: str
                     ) -> cst.BaseExpression:
    api = name
    family = (self.facts.optimizer_family(original.args[0].value, self.scope)
              if original.args and original.args[0].keyword is None
              else None)
    if family == "v1" or family is None and name.startswith("tf.compat.v1."):
      # The tf.compat.v1 endpoint of graph jobs: TF's own v1 function,
      # which refuses (loudly) a Keras optimizer should it be one.
      new = _V1 + "enable_mixed_precision_graph_rewrite"
      self._add(original, api, new, "the same TF function, still shipped "
                "(tf.compat.v1 optimizers only)", "rewrite")
      return updated.with_changes(func=_expr(new))
    lso = table.FUNCTIONS[
        "keras.mixed_precision.experimental.LossScaleOptimizer"][0]
    args, why = ((None, "the optimizer's kind (Keras or tf.compat.v1) is "
                  "not known from this file") if family is None else
                 self._lso_args(original, updated, "experimental"))
    if args is None:
      self._add(original, api, None, f"not rewritten: {why}. For a Keras "
                f"optimizer: {table.GRAPPLER_ON}, then wrap it in {lso}; "
                f"for a tf.compat.v1 one: {_V1}"
                "enable_mixed_precision_graph_rewrite", "manual")
      return updated
    self._add(original, api, f"{table.GRAPPLER_ON}; {lso}(...)",
              table.GRAPH_REWRITE_CHANGES + table.METHODS[
                  "loss_scale"][1], "rewrite")
    self.needs_keras = self.needs_tf = True
    self._before.append(cst.parse_statement(table.GRAPPLER_ON + "\n"))
    if len(args) < len(updated.args):
      args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(func=_expr(str(lso)), args=args)

  # Methods and attributes of optimizers.
  def _method_call(self, original: cst.Call, updated: cst.Call
                   ) -> cst.BaseExpression:
    func = original.func
    if not isinstance(func, cst.Attribute):
      return updated
    attr = func.attr.value
    optimizer = self.facts.kind_of(func.value, self.scope) == "optimizer"
    if attr == "get_scaled_loss" and len(original.args) == 1:
      self._add(original, "LossScaleOptimizer.get_scaled_loss",
                "scale_loss", table.METHODS[attr][1], "rewrite")
      return updated.with_changes(func=updated.func.with_changes(
          attr=cst.Name("scale_loss")))
    if attr == "get_unscaled_gradients" and len(original.args) == 1 and \
        not self.facts.unscaled_only_applied(original):
      self._add(original, "LossScaleOptimizer.get_unscaled_gradients", None,
                "not rewritten: the unscaled gradients go on to other code "
                "(clipping, accumulation, all-reduce, logging) before "
                "apply_gradients, and Keras 3's apply_gradients unscales by "
                "itself: divide them by the optimizer's `dynamic_scale` "
                "here and multiply the processed gradients by it again "
                "before apply_gradients, or clip with the inner optimizer's "
                "`global_clipnorm`/`clipnorm`", "manual")
      return updated
    if attr == "get_unscaled_gradients" and len(original.args) == 1:
      self._add(original, "LossScaleOptimizer.get_unscaled_gradients",
                "(the gradients as they are)", table.METHODS[attr][1],
                "rewrite")
      return updated.args[0].value
    if attr == "variables" and not original.args and (
        optimizer or _facts.looks_like_optimizer(func.value)) and \
        self.facts.optimizer_family(func.value, self.scope) != "v1":
      self._add(original, "Optimizer.variables()", "variables",
                "Keras 3's `variables` is a list property (a method in TF "
                "2.x); a LossScaleOptimizer's list also holds its scale and "
                "counter", "rewrite")
      return updated.func
    if attr == "apply_gradients" and len(original.args) > 1:
      return self._apply_extra_args(original, updated)
    new_func = updated.func
    if attr == "loss_scale" and not original.args and m.matches(
        new_func, m.Call(func=m.Attribute(attr=m.Name("convert_to_tensor")))):
      return new_func  # TF 2.3's `loss_scale()` call: the same tensor.
    return updated

  def _apply_extra_args(self, original: cst.Call, updated: cst.Call
                        ) -> cst.BaseExpression:
    """TF 2.x's `name` and `experimental_aggregate_gradients` arguments."""
    api = "LossScaleOptimizer.apply_gradients"
    keys = [a.keyword.value if a.keyword else ("name" if i == 1 else "")
            for i, a in enumerate(original.args)]
    if not self.facts.is_lso(original.func.value,  # type: ignore
                             self.scope):
      return updated  # Another optimizer's own signature: left alone.
    aggregate = [a for a, k in zip(original.args, keys)
                 if k == "experimental_aggregate_gradients"]
    if any(k not in ("", "name", "experimental_aggregate_gradients")
           for k in keys[1:]) or aggregate and not m.matches(
               aggregate[0].value, m.Name("True")):
      self._add(original, api, None, "Keras 3's apply_gradients takes the "
                "gradients and variables only, and aggregates across "
                "replicas itself: drop the other arguments (for "
                "experimental_aggregate_gradients=False, pass gradients "
                "not yet summed across replicas)", "manual")
      return updated
    self._add(original, api, "apply_gradients(grads_and_vars)",
              "TF 2.x's other arguments dropped: `name` named the ops only, "
              "and aggregating across replicas is what Keras 3 does",
              "rewrite")
    first = updated.args[0].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(args=[first])

  def _method_attribute(self, original: cst.Attribute,
                        updated: cst.Attribute) -> cst.BaseExpression:
    attr = original.attr.value
    if attr not in ("loss_scale", "dynamic_counter", "lr", "_optimizer",
                    "_loss_scale"):
      return updated
    kind = self.facts.kind_of(original.value, self.scope)
    if attr.startswith("_"):
      return self._private_attribute(original, updated, kind)
    if attr == "lr":
      if kind != "optimizer":
        return updated
      self._add(original, "Optimizer.lr", "learning_rate", "the same "
                "hyperparameter: Keras 3 dropped the `lr` alias", "rewrite")
      return updated.with_changes(attr=cst.Name("learning_rate"))
    if attr == "loss_scale" and kind == "policy":
      return self._policy_read(original, updated)
    replacement, change = table.METHODS[attr]
    if kind == "config":
      return updated  # A setting (flags.loss_scale), not the API.
    if kind != "optimizer":
      self._add(original, "LossScaleOptimizer." + attr, replacement,
                "not rewritten: not known to be a loss-scale optimizer or a "
                "policy. " + change, "manual")
      return updated
    renamed = updated.with_changes(attr=cst.Name(str(replacement)))
    if attr == "dynamic_counter":
      self._add(original, "LossScaleOptimizer." + attr, replacement, change,
                "rewrite")
      return renamed
    # TF 2.3's `loss_scale()` and TF 2.4's `loss_scale` gave a tensor
    # (also of a mirrored variable, which `float()` cannot take).
    self._add(original, "LossScaleOptimizer." + attr,
              "tf.convert_to_tensor(<optimizer>.dynamic_scale)", change,
              "rewrite")
    self.needs_tf = True
    return cst.Call(func=_expr("tf.convert_to_tensor"),
                    args=[cst.Arg(value=renamed)])

  def _private_attribute(self, original: cst.Attribute,
                         updated: cst.Attribute, kind: str
                         ) -> cst.BaseExpression:
    """TF 2.x's private `_optimizer` / `_loss_scale` of a loss-scale one."""
    if kind != "optimizer":
      return updated
    api = "LossScaleOptimizer." + original.attr.value
    if original.attr.value == "_optimizer":
      self._add(original, api, "inner_optimizer", "the same wrapped "
                "optimizer, public in Keras 3", "rewrite")
      return updated.with_changes(attr=cst.Name("inner_optimizer"))
    self._add(original, api, None, "not rewritten: TF 2.x's private loss "
              "scale object has no Keras 3 counterpart (its scale is "
              "`dynamic_scale`, its counter `step_counter`; a custom "
              "update rule needs a LossScaleOptimizer subclass)", "manual")
    return updated

  # Statements: the package import, builds, the graph rewrite's option.
  def leave_Module(self, original: cst.Module, updated: cst.Module
                   ) -> cst.Module:
    manual = any(f.status == "manual" and f.old_api for f in self.findings)
    for statement in original.body:
      if _imports_package(statement):
        self.findings.append(Finding(
            self._pos(statement)[0], 1, "import tf_mixed_precision_compat",
            "(kept: some uses need manual work)" if manual else "(removed)",
            "kept until the uses marked MANUAL are changed by hand" if manual
            else "the package is no longer needed",
            "manual" if manual else "rewrite"))
    if manual:
      return updated
    # Statements only get added around others, never replace an import.
    return updated.with_changes(body=[
        s for s in updated.body if not _imports_package(s)])

  def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
    self._before = []

  def leave_SimpleStatementLine(
      self, original: cst.SimpleStatementLine,
      updated: cst.SimpleStatementLine) -> Any:
    """Statements Keras 3 needs around this one."""
    line = self._pos(original)[0]
    before = self._before + [s for s in (
        self._build_for_checkpoint(call, line) for call in m.findall(
            original, m.Call(func=m.Attribute(attr=m.Name("Checkpoint")))))
                             if s is not None]
    self._before = []
    after = [s for s in (self._build_after(name, scope) for name, at, scope
                         in self.facts.lso_sites if at == line)
             if s is not None]
    if not before and not after:
      return updated
    if before:  # Blank lines and comments above the statement go first.
      before[0] = before[0].with_changes(leading_lines=updated.leading_lines)
      updated = updated.with_changes(leading_lines=())
    return cst.FlattenSentinel([*before, updated, *after])

  def _pos_of_site(self, name: str, scope: str) -> int:
    return next(at for n, at, where in self.facts.lso_sites
                if (n, where) == (name, scope))

  def _build_attribute(self, name: str, scope: str
                       ) -> Optional[cst.BaseStatement]:
    """`self.optimizer.build(self.model.trainable_variables)`, if one model.

    Only where the same method bound exactly one model attribute before the
    optimizer: a trainer of several models, or of a model from elsewhere,
    is reported instead.
    """
    line = self._pos_of_site(name, scope)
    models = self.facts.self_models(scope, line)
    # The variables its apply_gradients names, if the same method bound
    # their owner before the optimizer (self.generator, self._model, ...).
    root, _, attr = self.facts.apply_vars.get(name, "").rpartition(".")
    found = self.facts.assigned.get((scope, root))
    if attr in ("trainable_variables", "trainable_weights") and \
        root.startswith("self.") and found is not None and found.line < line:
      models = [root]
    if len(models) != 1:
      self._build_reported(name, line, "<the model's trainable variables>",
                           "which model it trains is not known here")
      return None
    return self._build_inserted(name, line,
                                f"{models[0]}.trainable_variables")

  def _build_inserted(self, name: str, line: int, var_list: str
                      ) -> cst.BaseStatement:
    self.findings.append(Finding(
        line, 1, f"{name} = LossScaleOptimizer(...)",
        f"{name}.build({var_list}) inserted after it", _BUILT, "rewrite"))
    return cst.parse_statement(f"{name}.build({var_list})\n")

  def _build_reported(self, name: str, line: int, var_list: str,
                      why: str) -> None:
    # A note on Keras 3 code: it does not keep the package's import.
    self.findings.append(Finding(
        line, 1, f"{name} = LossScaleOptimizer(...)", "(none)",
        f"build it once {var_list} exist, before the first step: "
        f"`{name}.build({var_list})` (Keras 3 creates the scale variable "
        "when the optimizer is built; unbuilt, scale_loss in a tf.function "
        f"bakes in initial_scale). Not inserted: {why}", "manual", False))

  def _build_after(self, name: str, scope: str
                   ) -> Optional[cst.BaseStatement]:
    """`opt.build(model.trainable_variables)` right after the optimizer."""
    if name in self.facts.built_after:
      return None
    if "." in name:
      return self._build_attribute(name, scope)
    var_list = self.facts.apply_vars.get(name)
    found = self.facts.lookup(scope, name)
    if var_list is None or found is None:
      return None
    root, _, attr = var_list.partition(".")
    line = found.line
    if self.facts.is_factory(scope) and (scope, root) not in \
        self.facts.assigned:
      return None  # Built where the factory's caller keeps the optimizer.
    if attr not in ("trainable_variables", "trainable_weights") or \
        not self.facts.is_model(root, scope, line):
      self._build_reported(
          name, line, var_list,
          f"{var_list} is not known to be a model's variables here")
      return None
    return self._build_inserted(name, line, var_list)

  def _build_for_checkpoint(self, call: Any, line: int
                            ) -> Optional[cst.BaseStatement]:
    """A compiled model's optimizer, built before a checkpoint names it."""
    if not any(n in ("tf.train.Checkpoint", "tf.compat.v2.train.Checkpoint")
               for n in self._names(call.func)):
      return None
    for arg in call.args:
      if arg.keyword is not None and arg.keyword.value == "optimizer" and \
          m.matches(arg.value, m.Attribute(value=m.Name(),
                                           attr=m.Name("optimizer"))):
        model = arg.value.value.value
        if model in self.facts.built_guards or model == "self":
          return None
        self.findings.append(Finding(
            line, 1, f"tf.train.Checkpoint(optimizer={model}.optimizer)",
            f"{model}.optimizer built before it (if not yet)",
            "Keras 3 creates a compiled model's optimizer variables at its "
            "first step; built first, the checkpoint restores (or saves) "
            "them as TF 2.x's did", "rewrite"))
        return cst.parse_statement(
            f"if not {model}.optimizer.built: {model}.optimizer.build("
            f"{model}.trainable_variables)\n")
    return None


def _imports_package(statement: cst.CSTNode) -> bool:
  if not isinstance(statement, cst.SimpleStatementLine):
    return False
  for small in statement.body:
    if isinstance(small, cst.Import) and any(
        code(a.name).startswith("tf_mixed_precision_compat")
        for a in small.names):
      return True
    if isinstance(small, cst.ImportFrom) and small.module is not None and (
        code(small.module).startswith("tf_mixed_precision_compat")):
      return True
  return False


def migrate_source(source: str) -> tuple[str, list[Finding]]:
  """Rewrites `source`; returns the new code and every finding.

  Args:
    source: A Python module's text.

  Returns:
    `(new source, findings)`; the new source differs only where a finding
    has status "rewrite". Rewriting the new source again changes nothing.

  Raises:
    libcst.ParserSyntaxError: If `source` is not valid Python.

  Example:

  >>> code, found = migrate_source(
  ...     "from tensorflow.keras.mixed_precision import experimental as mp\\n"
  ...     "mp.set_policy('mixed_float16')  # fp16\\n")
  >>> print(code, end="")
  import keras
  <BLANKLINE>
  keras.mixed_precision.set_global_policy('mixed_float16')  # fp16
  """
  # pylint: disable=g-import-not-at-top
  from libcst.codemod import CodemodContext
  from libcst.codemod.visitors import AddImportsVisitor
  from libcst.metadata import MetadataWrapper
  wrapper = MetadataWrapper(cst.parse_module(source))
  facts = _facts.Facts()
  wrapper.visit(facts)
  migrator = Migrator(facts)
  new = wrapper.visit(migrator)
  context = CodemodContext()
  if migrator.needs_keras:
    AddImportsVisitor.add_needed_import(context, "keras")
  if migrator.needs_tf:
    AddImportsVisitor.add_needed_import(context, "tensorflow", asname="tf")
  if migrator.needs_keras or migrator.needs_tf:
    new = AddImportsVisitor(context).transform_module(new)
  new = _remove_unused_experimental(new, context)
  return new.code, sorted(migrator.findings,
                          key=lambda f: (f.line, f.column))


def _remove_unused_experimental(module: cst.Module, context: Any
                                ) -> cst.Module:
  # pylint: disable-next=g-import-not-at-top
  from libcst.codemod.visitors import RemoveImportsVisitor
  # Imports inside functions too: a job may import the old API where it
  # sets the policy.
  for small in m.findall(module, m.ImportFrom()):
    if isinstance(small, cst.ImportFrom):
      if small.module is not None and \
          not isinstance(small.names, cst.ImportStar):
        mod = code(small.module)
        for alias in small.names:
          # Names the rewrites replaced leave their imports unused; unused
          # imports of the old API are removed (it no longer exists).
          asname = alias.asname.name if alias.asname else None
          if ("mixed_precision" in mod or "experimental" in mod) and \
              isinstance(alias.name, cst.Name) and (
                  asname is None or isinstance(asname, cst.Name)):
            RemoveImportsVisitor.remove_unused_import(
                context, mod, alias.name.value,
                asname.value if isinstance(asname, cst.Name) else None)
  return RemoveImportsVisitor(context).transform_module(module)
