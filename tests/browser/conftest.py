"""The demo tests' saved models, shared with tests/test_demo.py."""

from test_demo import corpus, models  # noqa: F401  (fixtures)
