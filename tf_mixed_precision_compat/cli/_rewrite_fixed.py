"""`migrate`'s plain-code form of TF 2.x's fixed loss scales in custom loops.

TF 2.3/2.4's fixed wrapper multiplied the loss by its scale, the gradients
by the scale's reciprocal, and applied every step through the inner
optimizer. Keras 3 has no fixed scale, but a custom loop says exactly that
in plain code: the migrated file keeps the inner optimizer, notes its scale
(`_fixed_loss_scale`), and its scaled losses and unscaled gradients become
the same products (`_scaled_loss`, `_unscaled`). A scale known only at run
time ("dynamic" or a number, from a flag or a config) goes through
`_loss_scale_optimizer`, which builds either form.

Taken only where the file shows the whole loop: it scales or unscales
through the wrapper, nothing in it compiles a model or calls `minimize` or
`get_gradients` (Keras would scale nothing there), the wrapper is not
returned to other code, and no wrapper-only attribute is read.
"""

from __future__ import annotations

from typing import Optional

import libcst as cst
from libcst import matchers as m

from tf_mixed_precision_compat.cli import _api_table as table
from tf_mixed_precision_compat.cli._facts import code
from tf_mixed_precision_compat.cli._rewrite_base import RewriterBase
from tf_mixed_precision_compat.cli._rewrite_base import Substitute
from tf_mixed_precision_compat.cli._rewrite_grads import UNSCALED
from tf_mixed_precision_compat.cli._rewrite_scale import named_args

FIXED_HELPER = '''

_FIXED_LOSS_SCALES = {}  # id -> (optimizer, scale): held, so ids stay its


def _fixed_loss_scale(optimizer, scale):
  # migrate: TF 2.x's fixed loss scale in plain code: the optimizer itself
  # (TF's wrapper applied every step through it, non-finite ones too), its
  # scale noted for _scaled_loss and _unscaled.
  _FIXED_LOSS_SCALES[id(optimizer)] = (optimizer, float(scale))
  return optimizer


def _loss_scale(optimizer):
  # migrate: the scale TF 2.x's wrapper had, as a float32 tensor where
  # fixed.
  if id(optimizer) in _FIXED_LOSS_SCALES:
    return tf.constant(_FIXED_LOSS_SCALES[id(optimizer)][1], tf.float32)
  return _scale(optimizer)


def _scaled_loss(loss, optimizer):
  # migrate: TF 2.x's get_scaled_loss: the loss (or what a callable
  # returns) times the scale, in the loss's dtype.
  if callable(loss):
    return lambda: _scaled_loss(loss(), optimizer)
  return loss * tf.cast(_loss_scale(optimizer), loss.dtype)
'''
IS_LOSS_SCALED_HELPER = '''

def _is_loss_scaled(optimizer):
  # migrate: what isinstance(optimizer, LossScaleOptimizer) said in TF 2.x.
  return isinstance(optimizer, LOSS_SCALE_OPTIMIZER) or (
      id(optimizer) in _FIXED_LOSS_SCALES)
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
# Reading these of a fixed wrapper means code written for the wrapper
# object, which the plain form does not keep.
_WRAPPER_ONLY = ("dynamic", "dynamic_counter", "initial_scale",
                 "dynamic_growth_steps", "inner_optimizer", "_optimizer",
                 "_loss_scale")
_USES = m.Call(func=m.Attribute(attr=m.Name("get_scaled_loss") |
                                m.Name("get_unscaled_gradients")))
_NOT_IN_A_LOOP = m.Call(func=m.Attribute(attr=m.Name("minimize") |
                                         m.Name("get_gradients")))


class FixedScaleRewrites(RewriterBase):
  """Fixed and run-time loss scales of custom loops, in plain code."""

  needs_run_time = False
  needs_is_loss_scaled = False

  def scan_fixed(self, module: cst.Module) -> None:
    """Notes the wrappers that take the plain form: the file's own loop.

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
      if why_not is None and sites.returned(call):
        owner = function.name.value if function is not None else "it"
        self.not_plain[call] = (f"{owner} returns it to its callers, whose "
                                "loops are not in this file")
      elif why_not is not None:
        self.not_plain[call] = why_not
      else:
        self.fixed[call] = kind
    if self.fixed:
      self.rescaled |= {code(c.func.value)  # type: ignore[attr-defined]
                        for c in m.findall(module, UNSCALED)}

  def _file_not_plain(self, module: cst.Module) -> Optional[str]:
    """Why no wrapper of this file can take the plain form, or None."""
    if self.facts.has_compile:
      return "the file compiles a model, and fit() would scale nothing"
    if m.findall(module, _NOT_IN_A_LOOP):
      return "minimize() or get_gradients() scale inside the wrapper"
    if not m.findall(module, _USES):
      return ("no loop of this file scales a loss or unscales gradients "
              "through it")
    reads = [a.attr.value for a in m.findall(module, m.Attribute())
             if isinstance(a, cst.Attribute)]
    read = next((r for r in reads if r in _WRAPPER_ONLY), None)
    if read is not None:
      return f"the file reads the wrapper's `{read}`"
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
    self.needs_helper = self.needs_tf = self.needs_keras = True
    if kind == "fixed":
      self._add(original, name, "_fixed_loss_scale(optimizer, scale)",
                f"TF 2.x's fixed loss scale {code(value)} in plain code: "
                "the inner optimizer, which TF's wrapper applied every step "
                "through, and the job's scaled loss and unscaled gradients "
                "as the same products (_scaled_loss, _unscaled)", "rewrite")
      template = "_fixed_loss_scale(OPT, SCALE)"
    else:
      self.needs_run_time = True
      self._add(original, name, "_loss_scale_optimizer(optimizer, scale)",
                f"the loss scale {code(value)}, known at run time, builds "
                "what TF 2.3 built: 'dynamic' Keras 3's LossScaleOptimizer, "
                "a number TF's fixed scale in plain code (_fixed_loss_scale); "
                "anything else raises", "rewrite")
      template = "_loss_scale_optimizer(OPT, SCALE)"
    return cst.ensure_type(cst.parse_expression(template).visit(
        Substitute({"OPT": inner, "SCALE": value})), cst.Call)

  def scaled_loss_form(self, original: cst.Call, updated: cst.Call
                       ) -> cst.BaseExpression:
    """`opt.get_scaled_loss(loss)` where a wrapper took the plain form."""
    self._add(original, "LossScaleOptimizer.get_scaled_loss",
              "_scaled_loss(loss, opt)", "the same product: the loss times "
              "the scale (fixed, or Keras 3's dynamic one), in its dtype",
              "rewrite")
    template = cst.parse_expression("_scaled_loss(LOSS, OPT)")
    return cst.ensure_type(template.visit(Substitute({
        "LOSS": updated.args[0].value,
        "OPT": updated.func.value})), cst.Call)  # type: ignore[attr-defined]

  def is_loss_scaled_form(self, original: cst.Call, updated: cst.Call
                          ) -> Optional[cst.BaseExpression]:
    """`isinstance(opt, LossScaleOptimizer)` where a wrapper is plain code."""
    if not self.fixed or not m.matches(original, m.Call(
        func=m.Name("isinstance"), args=[m.Arg(keyword=None),
                                         m.Arg(keyword=None)])):
      return None
    kind = original.args[1].value
    if not any(table.is_tf2_lso(n) for n in self._names(kind)):
      return None
    self._drop_findings_in(kind)
    self.needs_is_loss_scaled = True
    self._add(original, "isinstance(x, LossScaleOptimizer)",
              "_is_loss_scaled(x)", "the same answer: True for Keras 3's "
              "wrapper and for an optimizer with a fixed scale noted, as "
              "for TF 2.x's wrappers", "rewrite")
    return cst.Call(func=cst.Name("_is_loss_scaled"),
                    args=[updated.args[0].with_changes(
                        comma=cst.MaybeSentinel.DEFAULT)])

  def fixed_helper_statements(self) -> list[cst.BaseStatement]:
    """The plain-code helpers, once, after `_rewrite_grads`' ones."""
    if not self.fixed or not self.needs_helper:
      return []
    text = FIXED_HELPER + (
        IS_LOSS_SCALED_HELPER if self.needs_is_loss_scaled else "") + (
            RUN_TIME_HELPER if self.needs_run_time else "")
    body: list[cst.BaseStatement] = list(cst.parse_module(text.replace(
        "LOSS_SCALE_OPTIMIZER", "keras.optimizers.LossScaleOptimizer")).body)
    body[0] = body[0].with_changes(leading_lines=[cst.EmptyLine()] * 2)
    return body


class _Sites(cst.CSTVisitor):
  """Each call's innermost function, and what each function returns."""

  def __init__(self) -> None:
    super().__init__()
    self._stack: list[Optional[cst.FunctionDef]] = [None]
    self.function: dict[cst.Call, Optional[cst.FunctionDef]] = {}
    self.returns: dict[Optional[cst.FunctionDef], list[cst.CSTNode]] = {}
    self.bound: dict[cst.Call, set[str]] = {}  # -> the names it is bound to

  def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
    self._stack.append(node)

  def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
    self._stack.pop()

  def visit_Call(self, node: cst.Call) -> None:
    self.function[node] = self._stack[-1]

  def visit_Return(self, node: cst.Return) -> None:
    if node.value is not None:
      self.returns.setdefault(self._stack[-1], []).append(node.value)

  def visit_Assign(self, node: cst.Assign) -> None:
    if isinstance(node.value, cst.Call):
      self.bound[node.value] = {code(t.target) for t in node.targets}

  def returned(self, call: cst.Call) -> bool:
    """Whether `call`'s function hands what it makes back to its caller."""
    names = self.bound.get(call, set())
    for value in self.returns.get(self.function.get(call), []):
      inside = m.findall(value, m.Call() | m.Name() | m.Attribute())
      if any(n is call or code(n) in names for n in inside) or \
          code(value) in names:
        return True
    return False
