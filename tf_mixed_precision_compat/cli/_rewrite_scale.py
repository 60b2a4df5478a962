"""`migrate`'s rewrites of loss-scale optimizers, policies, graph rewrites.

The TF 2.3/2.4 calls whose arguments change on the way to Keras 3.
"""

from __future__ import annotations

import math
from typing import Any, Optional, TypeGuard

import libcst as cst
from libcst import matchers as m

from tf_mixed_precision_compat.cli import _api_table as table
from tf_mixed_precision_compat.cli import _facts
from tf_mixed_precision_compat.cli._facts import code
from tf_mixed_precision_compat.cli._rewrite_base import RewriterBase

_DYNAMIC_ARGS = {"initial_loss_scale": "initial_scale",
                 "increment_period": "dynamic_growth_steps"}
_V1 = "tf.compat.v1.mixed_precision."
_NO_LOSS_SCALE = (
    "Keras 3 policies hold no loss scale; the loss scale is the "
    "optimizer's (keras.optimizers.LossScaleOptimizer, dynamic only)")
_FIXED = (
    "Keras 3's form of a fixed loss scale is the inner optimizer's "
    "loss_scale_factor (scale_loss multiplies by it, apply divides by it and "
    "applies every step, as TF's fixed wrapper did), exact for a power of "
    "two: `optimizer.loss_scale_factor = S` and use the inner optimizer")


def _kwarg(key: str, value: cst.BaseExpression) -> cst.Arg:
  return cst.Arg(keyword=cst.Name(key), value=value, equal=cst.AssignEqual(
      cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))


_NOT_POWER_OF_TWO = (
    "the initial scale {start} {known}do Keras 3's division of the "
    "gradients by the scale and TF 2.x's multiplication by its reciprocal "
    "give the same bits; write keras.optimizers.LossScaleOptimizer(optimizer, "
    "initial_scale=...) with such a scale (the results change a little "
    "otherwise)")
_RUN_TIME = (
    "the loss scale is only known at run time ({value}): if it is "
    "'dynamic', drop the argument; if a DynamicLossScale, pass its "
    "initial_loss_scale and increment_period as initial_scale and "
    "dynamic_growth_steps; if a number, ")


_NEVER_SCALED = (
    "this optimizer unscales no gradient in this file (no "
    "get_unscaled_gradients, get_gradients, minimize or compile): TF 2.3/2.4 "
    "applied the gradients as given (scaled ones too) and only skipped "
    "non-finite steps, where keras.optimizers.LossScaleOptimizer divides "
    "every gradient by its scale. Keep the inner optimizer and skip "
    "non-finite steps yourself: `finite = tf.reduce_all([tf.reduce_all("
    "tf.math.is_finite(g)) for g in grads if g is not None])`, then "
    "`tf.cond(finite, lambda: opt.apply_gradients(...), tf.no_op)` (build "
    "the optimizer first: `opt.build(variables)`); or wrap it and scale the "
    "loss: `tape.gradient(opt.scale_loss(loss), variables)`")


def _number(node: cst.BaseExpression) -> Optional[float]:
  """The value of a number literal or of `a ** b`, `a * b` of them."""
  if isinstance(node, (cst.Integer, cst.Float)):
    return float(node.evaluated_value)
  if isinstance(node, cst.BinaryOperation):
    left, right = _number(node.left), _number(node.right)
    if left is None or right is None:
      return None
    if isinstance(node.operator, cst.Power) and abs(right) <= 64:
      return left ** right
    if isinstance(node.operator, cst.Multiply):
      return left * right
  return None


def _is_string(node: Any, *values: str) -> bool:
  return isinstance(node, cst.SimpleString) and \
      node.evaluated_value in values


def named_args(original: cst.Call, updated: cst.Call, name: str
                ) -> tuple[list[str], Optional[dict]]:
  """`(parameter order, {parameter: (arg, updated arg)})` of a
  LossScaleOptimizer call; None for the dict if Keras 3 cannot say them."""
  order = (["optimizer", "loss_scale"] if "experimental" in name else
           ["inner_optimizer", "dynamic", "initial_scale",
            "dynamic_growth_steps"])
  named: dict = {}
  for i, (arg, new) in enumerate(zip(original.args, updated.args)):
    if arg.star or i >= len(order) and arg.keyword is None:
      return order, None
    named[arg.keyword.value if arg.keyword else order[i]] = (arg, new)
  return order, named


class LossScaleRewrites(RewriterBase):
  """LossScaleOptimizer and Policy calls, policies' loss scales, the rewrite."""

  def _lso_args(self, original: cst.Call, updated: cst.Call, name: str
                ) -> tuple[Optional[list[cst.Arg]], str]:
    """Keras 3 arguments of a LossScaleOptimizer call, or `(None, why not)`."""
    order, named = named_args(original, updated, name)
    if named is None:
      return None, "arguments Keras 3 cannot express"
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
    return self._exact_start(out)

  @staticmethod
  def _exact_start(args: list[cst.Arg]) -> tuple[Optional[list[cst.Arg]],
                                                  str]:
    """`(args, "")` if their initial scale unscales as TF 2.x did."""
    start = next((a.value for a in args if a.keyword is not None and
                  a.keyword.value == "initial_scale"), None)
    if start is None:
      return args, ""  # Keras 3's default, 2**15, as TF's.
    value = _number(start)
    if value is None:
      return None, _NOT_POWER_OF_TWO.format(start=code(start), known=(
          "is only known at run time: if it is a power of two, "))
    if value >= 1 and math.frexp(value)[0] == 0.5:
      return args, ""
    return None, _NOT_POWER_OF_TWO.format(start=code(start), known=(
        "is not a power of two: only with one (e.g. "
        f"{2 ** round(math.log2(max(value, 1)))}), "))

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
      return None, _RUN_TIME.format(value="a variable or a policy's") + _FIXED
    if _is_string(resolved, "dynamic"):
      return [], ""
    if isinstance(resolved, (cst.Integer, cst.Float)) or m.matches(
        resolved, m.Call(func=m.Name("FixedLossScale") |
                         m.Attribute(attr=m.Name("FixedLossScale")))):
      return None, _FIXED
    arguments = (_facts.dynamic_arguments(resolved)
                 if self._is_dynamic_loss_scale(resolved) else None)
    if arguments is None:
      return None, _RUN_TIME.format(value=code(resolved)) + _FIXED
    out = []
    for key, arg in arguments.items():
      if key == "multiplier":
        if not m.matches(arg.value, m.Integer("2") | m.Float("2.0")):
          return None, "Keras 3's dynamic scale grows and shrinks by 2 only"
        continue
      if key not in _DYNAMIC_ARGS:
        return None, f"DynamicLossScale takes no argument {key!r}"
      out.append(_kwarg(_DYNAMIC_ARGS[key], arg.value))
    return out, ""

  def _is_dynamic_loss_scale(self, node: Any) -> TypeGuard[cst.Call]:
    """Whether `node` is a `DynamicLossScale(...)` call."""
    return isinstance(node, cst.Call) and any(
        n.endswith("DynamicLossScale") for n in self._names(node.func))

  def _lso(self, original: cst.Call, updated: cst.Call, name: str
           ) -> cst.BaseExpression:
    if original in self.fixed:
      return self.fixed_form(original, updated, name)  # type: ignore
    replacement, change = table.FUNCTIONS[name]
    args, why = self._lso_args(original, updated, name)
    if original in self.given_as_is:
      change += ("; this file never unscales what it applies: its "
                 "apply_gradients get the gradients times the scale, which "
                 "Keras 3 divides out, so they are applied as given")
    elif args is not None and self.facts.unscales_nothing(original):
      args, why = None, _NEVER_SCALED
    closest = (self._closest_lso(original, updated, name, why)
               if args is None and self.deviate else None)
    if closest is not None:
      args, change, mark = closest
      self._deviation(original, name, str(replacement), change, mark)
    elif args is None:
      if original in self.not_plain:
        why += ("; not written here: "
                + self.not_plain[original])
      self._add(original, name, replacement, f"not rewritten: {why}",
                "manual")
      return updated
    else:
      self._add(original, name, replacement, change, "rewrite")
    self.needs_keras = True
    # The kept arguments keep their own spacing; the last loses its comma
    # only when arguments after it were dropped.
    if len(args) < len(updated.args):
      args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(
        func=cst.parse_expression(str(replacement)), args=args)

  def _closest_lso(self, original: cst.Call, updated: cst.Call, name: str,
                   why: str) -> Optional[tuple[list[cst.Arg], str, str]]:
    """--deviate's Keras 3 arguments where none keep the behaviour.

    `(args, change, mark)`: Keras 3's dynamic scale, from a fixed scale's
    value when the source gives it; None where even that cannot be said.
    """
    keys, named = named_args(original, updated, name)
    if named is None or keys[0] not in named or why == _NEVER_SCALED:
      return None
    start = named.get("initial_scale", named.get("loss_scale"))
    value = None if start is None else self._resolve_loss_scale(start[0].value)
    if isinstance(value, cst.Call) and value.args and m.matches(
        value.func, m.Name("FixedLossScale") |
        m.Attribute(attr=m.Name("FixedLossScale"))):
      value = value.args[0].value
    if not isinstance(value, cst.BaseExpression):
      value = None
    number = None if value is None else _number(value)
    args = [named[keys[0]][1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]
    if value is None or number is None or number < 1:
      return args, ("the loss scale, known only at run time, dropped: Keras "
                    "3's dynamic scale from 2**15 (a number there was a "
                    "fixed scale)"), "run-time loss scale dropped (dynamic)"
    args.insert(0, args.pop().with_changes(comma=cst.Comma(
        whitespace_after=cst.SimpleWhitespace(" "))))
    args.append(_kwarg("initial_scale", value))
    if "dynamic_growth_steps" in named:
      args[-1] = args[-1].with_changes(comma=cst.Comma(
          whitespace_after=cst.SimpleWhitespace(" ")))
      args.append(_kwarg("dynamic_growth_steps",
                         named["dynamic_growth_steps"][1].value))
    if why == _FIXED:
      return args, (f"the fixed loss scale {code(value)} became Keras 3's "
                    "dynamic one from that value: an overflowing step is "
                    "now skipped and halves it, and finite steps grow it "
                    "(TF applied every step at the fixed scale)"), (
                        f"fixed loss scale {code(value)} now dynamic")
    return args, (f"Keras 3 divides the gradients by {code(value)} where TF "
                  "multiplied them by its reciprocal: gradients may differ "
                  "in their last bit"), "gradients divided by the scale"

  def _policy(self, original: cst.Call, updated: cst.Call, name: str
              ) -> cst.BaseExpression:
    """TF 2.3's `Policy(name, loss_scale=...)`: the loss scale moves."""
    replacement, change = table.FUNCTIONS[name]
    held = _facts.policy_call_loss_scale(original)
    float16 = _facts.policy_name(original) == "mixed_float16"
    dropped = [i for i, arg in enumerate(original.args) if (
        arg.keyword.value == "loss_scale" if arg.keyword else i == 1)]
    keep = [new for i, new in enumerate(updated.args) if i not in dropped]
    why = None
    if dropped:
      why = (None if self.facts.policy_only_read(original) else
             self._policy_loss_scale_problem(held, float16))
      if why is not None and not self.deviate:
        self._add(original, name, replacement, why, "manual")
        return updated
      for i in dropped:
        self._drop_findings_in(original.args[i])
      change = ("same dtypes; its loss scale dropped (a policy holds none "
                "now; Keras 3's compile gives a mixed_float16 model's "
                "optimizer the same dynamic one)" if self.facts.has_compile
                else "same dtypes; its loss scale dropped: only compile() "
                "read a policy's loss scale, and this file compiles nothing")
    if dropped and why is not None:
      self._deviation(original, name, str(replacement), change + ", where "
                      "TF used this one: " + why, "policy's loss scale "
                      "dropped")
    else:
      self._add(original, name, replacement, change, "rewrite")
    self.needs_keras = True
    if keep:
      keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(
        func=cst.parse_expression(str(replacement)), args=keep)

  def _policy_loss_scale_problem(self, held: _facts.LossScale,
                                 float16: bool) -> Optional[str]:
    """Why dropping a policy's loss scale would change the job, or None."""
    if not (held == "default" or isinstance(held, (
        cst.SimpleString, cst.Integer, cst.Float, cst.Call)) or isinstance(
            held, cst.Name) and held.value == "None"):
      if self.facts.is_program and not self.facts.has_compile:
        # A flag or a setting of a program that compiles nothing: as with a
        # number written here, no compile() reads the policy's scale.
        return None
      # In a library (a global policy's scale too), a compile() in its
      # callers' files may read it, and a number there was a fixed scale
      # Keras 3 cannot give.
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
    elif (self._is_dynamic_loss_scale(held) and
          _facts.dynamic_arguments(held) is not None):
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
    return cst.parse_expression(new)

  def _graph_rewrite(self, original: cst.Call, updated: cst.Call, name: str
                     ) -> cst.BaseExpression:
    family = (self.facts.optimizer_family(original.args[0].value, self.scope)
              if original.args and original.args[0].keyword is None
              else None)
    if family == "v1" or family is None and name.startswith("tf.compat.v1."):
      # The tf.compat.v1 endpoint of graph jobs: TF's own v1 function,
      # which refuses (loudly) a Keras optimizer should it be one.
      new = _V1 + "enable_mixed_precision_graph_rewrite"
      self._add(original, name, new, "the same TF function, still shipped "
                "(tf.compat.v1 optimizers only)", "rewrite")
      return updated.with_changes(func=cst.parse_expression(new))
    lso = table.FUNCTIONS[
        "keras.mixed_precision.experimental.LossScaleOptimizer"][0]
    args, why = ((None, "the optimizer's kind (Keras or tf.compat.v1) is "
                  "not known from this file") if family is None else
                 self._lso_args(original, updated, "experimental"))
    if args is None:
      self._add(original, name, None, f"not rewritten: {why}. For a Keras "
                f"optimizer: {table.GRAPPLER_ON}, then wrap it in {lso}; "
                f"for a tf.compat.v1 one: {_V1}"
                "enable_mixed_precision_graph_rewrite", "manual")
      return updated
    self._add(original, name, f"{table.GRAPPLER_ON}; {lso}(...)",
              table.GRAPH_REWRITE_CHANGES + table.METHODS[
                  "loss_scale"][1], "rewrite")
    self.needs_keras = self.needs_tf = True
    self._before.append(cst.parse_statement(table.GRAPPLER_ON + "\n"))
    if len(args) < len(updated.args):
      args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(func=cst.parse_expression(str(lso)), args=args)
