"""`python -m impls.matmul_precision.default_child FRAMEWORK`: that framework's own float32 matmul setting in
this fresh interpreter (the impl's own_setting()), as the last stdout line: {"setting": ...}."""
from __future__ import annotations

import importlib
import sys

from impls._shared.child import as_child, say

if __name__ == "__main__":
    as_child()
    impl = importlib.import_module(f"impls.matmul_precision.{sys.argv[1]}_impl")
    say({"setting": impl.own_setting()})
