"""NPU Console engine: everything that runs without a screen (no Qt imports here, ever)."""

__version__ = "0.1.0"
