"""The device compatibility check TF 2.4 logged for `mixed_float16`.

Logged once per process, in TF 2.4's words (users and TF's tests match them):
whether this machine's GPUs run float16 fast.
"""

import itertools

import tensorflow as tf

__all__ = ["log_once"]

_PREFIX = "Mixed precision compatibility check (mixed_float16): "
_WARNING = _PREFIX + "WARNING"
_SUFFIX = ("If you will use compatible GPU(s) not attached to this host, e.g. "
           "by running a multi-worker model, you can ignore this warning. "
           "This message will only be logged once")

# Set once the check has been logged in this process (tests reset it).
logged = False


def _describe(details):
  """('name, compute capability X.Y' or similar, whether it runs fast)."""
  name = details.get("device_name", "Unknown GPU")
  capability = details.get("compute_capability")
  if not capability:
    return (name + ", no compute capability (probably not an Nvidia GPU)",
            False)
  major, minor = capability[0], capability[1]
  return (f"{name}, compute capability {major}.{minor}",
          tuple(capability) >= (7, 0))


def _grouped(descriptions):
  """Consecutive equal descriptions merged as 'description (xN)'."""
  out = []
  for text, group in itertools.groupby(descriptions):
    count = len(list(group))
    out.append(text if count == 1 else f"{text} (x{count})")
  return out


def _slow_gpus_warning(fast, slow):
  if fast:
    lead = ("Some of your GPUs may run slowly with dtype policy mixed_float16 "
            "because they do not all have compute capability of at least "
            "7.0. Your GPUs:\n")
  elif len(slow) == 1:
    lead = ("Your GPU may run slowly with dtype policy mixed_float16 because "
            "it does not have compute capability of at least 7.0. Your GPU:\n")
  else:
    lead = ("Your GPUs may run slowly with dtype policy mixed_float16 because "
            "they do not have compute capability of at least 7.0. Your "
            "GPUs:\n")
  listing = "".join(f"  {text}\n" for text in _grouped(fast + slow))
  return (f"{_WARNING}\n{lead}{listing}See https://developer.nvidia.com/"
          "cuda-gpus for a list of GPUs and their compute capabilities.\n"
          f"{_SUFFIX}")


def message(gpu_details):
  """The ("warning" or "info", text) TF 2.4 logged for `gpu_details`.

  `gpu_details`: per GPU, `tf.config.experimental.get_device_details`'s dict.
  """
  described = [_describe(d) for d in gpu_details]
  fast = [text for text, is_fast in described if is_fast]
  slow = [text for text, is_fast in described if not is_fast]
  if slow:
    return "warning", _slow_gpus_warning(fast, slow)
  if not fast:
    return "warning", (
        f"{_WARNING}\nThe dtype policy mixed_float16 may run slowly because "
        "this machine does not have a GPU. Only Nvidia GPUs with compute "
        "capability of at least 7.0 run quickly with mixed_float16.\n"
        f"{_SUFFIX}")
  if len(fast) == 1:
    return "info", (
        f"{_PREFIX}OK\nYour GPU will likely run quickly with dtype policy "
        "mixed_float16 as it has compute capability of at least 7.0. Your "
        f"GPU: {fast[0]}")
  return "info", (
      f"{_PREFIX}OK\nYour GPUs will likely run quickly with dtype policy "
      "mixed_float16 as they all have compute capability of at least 7.0")


def log_once():
  """Logs the check for this machine's GPUs, the first time only."""
  global logged
  if logged:
    return
  logged = True
  gpus = tf.config.list_physical_devices("GPU")
  level, text = message(
      [tf.config.experimental.get_device_details(g) for g in gpus])
  getattr(tf.get_logger(), level)(text)
