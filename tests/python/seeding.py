"""One base seed per test run, as the C++ tests do: fresh unless FP4MOE_TEST_SEED is set, and shown
in pytest's header (conftest.py) so a failure can be replayed with the same inputs. A test derives
each input stream from the base and its own salt, so call sites still draw different numbers."""

import os
import secrets

_MASK = (1 << 63) - 1  # torch.Generator.manual_seed and NumPy take any 63-bit value


def _base_seed():
    text = os.environ.get("FP4MOE_TEST_SEED", "")
    if not text:
        return secrets.randbits(64)
    value = int(text) if text.isascii() and text.isdigit() else -1  # (digits only, as the C++ tests take it)
    if not 0 <= value < 1 << 64:
        raise RuntimeError(f"FP4MOE_TEST_SEED = {text!r} is not a decimal integer in [0, 2**64)")
    return value


BASE_SEED = _base_seed()


def seed(salt):
    """The seed of one input stream: the run's base seed mixed with the call site's salt."""
    return (BASE_SEED ^ (int(salt) * 0x9E3779B97F4A7C15)) & _MASK
