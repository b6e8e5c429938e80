"""Where things are, for tests in any folder: the repository root, the tests folder, the test peers."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PEERS = TESTS / "peers"
