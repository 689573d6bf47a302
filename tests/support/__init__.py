"""Helpers the tests share: real engines and servers on loopback (api), GGUF files (gguf),
tiny random-weight models of the real transformers classes (models). Fakes of the parts that
cannot exist here stay in tests/fakes."""
