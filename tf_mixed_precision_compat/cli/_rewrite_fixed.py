"""`migrate`'s Keras 3 form of TF 2.x's fixed and run-time loss scales.

TF 2.3/2.4's fixed wrapper multiplied the loss by its scale, the gradients
by the scale's reciprocal, and applied every step through the inner
optimizer. Keras 3 says that with the inner optimizer's own
`loss_scale_factor`: `scale_loss` multiplies by it, `apply` divides by it
and applies every step (`fit` too). Dividing by a power of two is
multiplying by its reciprocal, bit for bit, so only such scales take it. The
migrated file keeps the inner optimizer with the factor set
(`_fixed_loss_scale`); a scale known only at run time ("dynamic" or a
number, from a flag or a config) goes through `_loss_scale_optimizer`,
which builds either and checks the number. The optimizer crosses files as
it is, so every `isinstance` check of TF 2.x's class becomes
`_is_loss_scaled`, true for both.

Not taken where the file reads a wrapper-only attribute of it.
"""

from __future__ import annotations

import math
from typing import Optional

import libcst as cst
from libcst import matchers as m

from tf_mixed_precision_compat.cli import _api_table as table
from tf_mixed_precision_compat.cli._facts import code
from tf_mixed_precision_compat.cli._rewrite_base import RewriterBase
from tf_mixed_precision_compat.cli._rewrite_base import Substitute
from tf_mixed_precision_compat.cli._rewrite_scale import named_args

FIXED_HELPER = '''

class _FixedScale(float):
  # migrate: a loss_scale_factor Keras 3's apply can divide IndexedSlices
  # by (its `g / factor` takes dense gradients only); they stay sparse.
  def __rtruediv__(self, grad):
    if isinstance(grad, tf.IndexedSlices):
      return tf.IndexedSlices(grad.values / float(self), grad.indices,
                              grad.dense_shape)
    return float.__rtruediv__(self, grad)


def _fixed_loss_scale(optimizer, scale):
  # migrate: TF 2.x's fixed loss scale as Keras 3's loss_scale_factor:
  # scale_loss multiplies by it, apply divides by it and applies every
  # step, non-finite ones too, as TF's wrapper did. Only a power of two
  # divides as TF multiplied by its reciprocal, bit for bit.
  if not scale >= 1 or math.frexp(scale)[0] != 0.5:
    raise ValueError("loss_scale must be a power of two, at least 1 (as "
                     "TF's was), for Keras 3's loss_scale_factor to keep "
                     f"TF 2.x's steps bit for bit, got: {scale!r}")
  optimizer.loss_scale_factor = _FixedScale(scale)
  return optimizer
'''
IS_LOSS_SCALED_HELPER = '''

def _is_loss_scaled(optimizer):
  # migrate: what isinstance(optimizer, LossScaleOptimizer) said in TF 2.x:
  # Keras 3's wrapper, or an optimizer with a fixed loss_scale_factor.
  return isinstance(optimizer, LOSS_SCALE_OPTIMIZER) or (
      getattr(optimizer, "loss_scale_factor", None) is not None)
'''
RUN_TIME_HELPER = '''

def _loss_scale_optimizer(optimizer, loss_scale):
  # migrate: TF 2.3's LossScaleOptimizer(optimizer, loss_scale) for a scale
  # known only at run time: "dynamic" or a number (a fixed scale).
  if isinstance(loss_scale, str) and loss_scale == "dynamic":
    return LOSS_SCALE_OPTIMIZER(optimizer)
  if isinstance(loss_scale, (int, float)) and not isinstance(loss_scale, bool):
    return _fixed_loss_scale(optimizer, loss_scale)
  raise ValueError("loss_scale must be 'dynamic' or a number (the values "
                   f"migrate wrote this for), got: {loss_scale!r}")
'''
NEW_LSO = "keras.mixed_precision.LossScaleOptimizer"
# Reading these of a fixed wrapper means code written for the wrapper
# object, which the inner optimizer does not have.
_WRAPPER_ONLY = ("dynamic", "dynamic_counter", "initial_scale",
                 "dynamic_growth_steps", "inner_optimizer", "_optimizer",
                 "_loss_scale")


def not_a_power_of_two(value: cst.BaseExpression) -> bool:
  """Whether `value` is a number literal that is no power of two.

  Other values are checked where they are known, by `_fixed_loss_scale`.
  """
  try:
    number = float(code(value))
  except ValueError:
    return False
  return not (number >= 1 and math.frexp(number)[0] == 0.5)


class FixedScaleRewrites(RewriterBase):
  """Fixed and run-time loss scales as Keras 3's `loss_scale_factor`."""

  needs_fixed = False
  needs_run_time = False
  needs_is_loss_scaled = False
  needs_math = False

  def scan_fixed(self, module: cst.Module) -> None:
    """Notes the wrappers that take the factor form.

    The others' reasons go to `not_plain`, for their MANUAL findings.
    """
    why_not = self._file_not_plain(module)
    sites = _Sites()
    module.visit(sites)
    for call, function in sites.function.items():
      names = self._names(call.func)
      if not any(table.is_tf2_lso(n) for n in names):
        continue
      scope = "<module>" if function is None else \
          f"{function.name.value}@{self._pos(function)[0]}"
      kind = self._fixed_kind(call, names, scope)
      if kind is None:
        continue
      if kind[0] == "fixed" and not_a_power_of_two(kind[1].value):
        self.not_plain[call] = (
            f"{code(kind[1].value)} is not a power of two of at least 1, "
            "and Keras 3's "
            "loss_scale_factor divides the gradients by it where TF "
            "multiplied them by its reciprocal (the last bits differ); keep "
            "the inner optimizer without a factor and write the products "
            "yourself: `tape.gradient(loss * S, vars)`, each gradient times "
            "`1 / S`, then `apply_gradients`")
      elif why_not is not None:
        self.not_plain[call] = why_not
      else:
        self.fixed[call] = kind

  def _file_not_plain(self, module: cst.Module) -> Optional[str]:
    """Why no wrapper of this file can take the factor form, or None."""
    reads = [a.attr.value for a in m.findall(module, m.Attribute())
             if isinstance(a, cst.Attribute)]
    read = next((r for r in reads if r in _WRAPPER_ONLY), None)
    if read is not None:
      return (f"the file reads the wrapper's `{read}`, which the inner "
              "optimizer with a loss_scale_factor does not have")
    return None

  def _fixed_kind(self, call: cst.Call, names: list[str], scope: str
                  ) -> Optional[tuple[str, cst.Arg]]:
    name = next(n for n in names if table.is_tf2_lso(n))
    experimental = "experimental" in name
    order, args = named_args(call, call, name)
    if args is None or order[0] not in args or not set(args) <= {
        "optimizer", "loss_scale", "inner_optimizer", "dynamic",
        "initial_scale"}:
      return None
    named = {key: arg for key, (arg, _) in args.items()}
    if not experimental:
      dynamic = named.get("dynamic")
      if dynamic is None or not m.matches(dynamic.value, m.Name("False")) \
          or "initial_scale" not in named:
        return None
      return "fixed", named["initial_scale"]
    if "loss_scale" not in named:
      return None
    return self._experimental_kind(named["loss_scale"], scope)

  def _experimental_kind(self, arg: cst.Arg, scope: str
                         ) -> Optional[tuple[str, cst.Arg]]:
    value = arg.value
    if isinstance(value, cst.Name):
      found = self.facts.lookup(scope, value.value)
      if found is not None and found.kind == "loss_scale":
        value = found.value  # type: ignore[assignment]
    if isinstance(value, cst.Call) and value.args and m.matches(
        value.func, m.Name("FixedLossScale") |
        m.Attribute(attr=m.Name("FixedLossScale"))):
      value = value.args[0].value
    if isinstance(value, (cst.Integer, cst.Float)):
      return "fixed", cst.Arg(value=value)
    if isinstance(value, (cst.SimpleString, cst.Call)) or (
        isinstance(value, cst.Attribute) and
        self.facts.kind_of(value.value, scope) == "policy"):
      return None  # 'dynamic', a loss scale object, a policy's: elsewhere.
    return "run time", arg

  def fixed_form(self, original: cst.Call, updated: cst.Call, name: str
                 ) -> cst.BaseExpression:
    """The wrapper call as `_fixed_loss_scale` / `_loss_scale_optimizer`."""
    kind, scale = self.fixed[original]
    index = original.args.index(scale) if scale in original.args else None
    value = (updated.args[index].value if index is not None
             else scale.value)
    inner = updated.args[0].value
    if original.args[0].keyword is not None:
      inner = next(a.value for a in updated.args if a.keyword and
                   a.keyword.value in ("optimizer", "inner_optimizer"))
    self.needs_fixed = self.needs_math = self.needs_tf = True
    if kind == "fixed":
      self._add(original, name, "_fixed_loss_scale(optimizer, scale)",
                f"TF 2.x's fixed loss scale {code(value)} as Keras 3's "
                "loss_scale_factor of the inner optimizer: scale_loss "
                "multiplies by it, apply divides by it (a power of two: TF's "
                "reciprocal, bit for bit) and applies every step, as TF's "
                "wrapper did", "rewrite")
      template = "_fixed_loss_scale(OPT, SCALE)"
    else:
      self.needs_run_time = self.needs_keras = True
      self._add(original, name, "_loss_scale_optimizer(optimizer, scale)",
                f"the loss scale {code(value)}, known at run time, builds "
                "what TF 2.3 built: 'dynamic' Keras 3's LossScaleOptimizer, "
                "a power of two TF's fixed scale as loss_scale_factor "
                "(_fixed_loss_scale); anything else raises", "rewrite")
      template = "_loss_scale_optimizer(OPT, SCALE)"
    return cst.ensure_type(cst.parse_expression(template).visit(
        Substitute({"OPT": inner, "SCALE": value})), cst.Call)

  def is_loss_scaled_form(self, original: cst.Call, updated: cst.Call
                          ) -> Optional[cst.BaseExpression]:
    """`isinstance(opt, LossScaleOptimizer)`: fixed scales are TF's too."""
    if not m.matches(original, m.Call(
        func=m.Name("isinstance"), args=[m.Arg(keyword=None),
                                         m.Arg(keyword=None)])):
      return None
    kind = original.args[1].value
    names = [n for n in self._names(kind) if table.is_tf2_lso(n)]
    if not names or "experimental" in names[0] and (
        NEW_LSO in self.facts.called):
      return None  # TF 2.4's class is no instance of the experimental one.
    self._drop_findings_in(kind)
    self.needs_is_loss_scaled = self.needs_keras = True
    self._add(original, "isinstance(x, LossScaleOptimizer)",
              "_is_loss_scaled(x)", "the same answer: True for Keras 3's "
              "wrapper and for an optimizer with a fixed loss_scale_factor "
              "(migrate's form of TF 2.x's fixed wrapper, from this file or "
              "another), as for TF 2.x's wrappers", "rewrite")
    return cst.Call(func=cst.Name("_is_loss_scaled"),
                    args=[updated.args[0].with_changes(
                        comma=cst.MaybeSentinel.DEFAULT)])

  def fixed_helper_statements(self) -> list[cst.BaseStatement]:
    """The factor form's helpers, once, after `_rewrite_grads`' ones."""
    text = (FIXED_HELPER if self.needs_fixed else "") + (
        IS_LOSS_SCALED_HELPER if self.needs_is_loss_scaled else "") + (
            RUN_TIME_HELPER if self.needs_run_time else "")
    if not text:
      return []
    body: list[cst.BaseStatement] = list(cst.parse_module(text.replace(
        "LOSS_SCALE_OPTIMIZER", "keras.optimizers.LossScaleOptimizer")).body)
    body[0] = body[0].with_changes(leading_lines=[cst.EmptyLine()] * 2)
    return body


class _Sites(cst.CSTVisitor):
  """Each call's innermost function."""

  def __init__(self) -> None:
    super().__init__()
    self._stack: list[Optional[cst.FunctionDef]] = [None]
    self.function: dict[cst.Call, Optional[cst.FunctionDef]] = {}

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    self._stack.append(node)

  def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
    self._stack.pop()

  def visit_Call(self, node: cst.Call) -> None:
    self.function[node] = self._stack[-1]
