"""NPU Console desktop application (PySide6): a view over the engine."""
