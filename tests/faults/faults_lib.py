"""The fault tests share the end-to-end tests' helpers (tests/e2e/e2e_lib.py)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
