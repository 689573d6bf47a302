"""A real keyring backend that keeps passwords in memory: what the console sees on a desktop
with Secret Service or KWallet, without touching the developer's own keyring.

The class is made inside memory_keyring(), after keyring has chosen its own backend: keyring
registers every KeyringBackend subclass, and one defined at import would win its discovery."""

from __future__ import annotations

import contextlib


def _memory_backend_class():
    from keyring.backend import KeyringBackend
    from keyring.errors import PasswordDeleteError

    class MemoryKeyring(KeyringBackend):
        priority = 1

        def __init__(self):
            super().__init__()
            self.passwords: dict[tuple[str, str], str] = {}

        def get_password(self, service, username):
            return self.passwords.get((service, username))

        def set_password(self, service, username, password):
            self.passwords[(service, username)] = password

        def delete_password(self, service, username):
            if self.passwords.pop((service, username), None) is None:
                raise PasswordDeleteError("not stored")

    return MemoryKeyring


@contextlib.contextmanager
def memory_keyring():
    import keyring

    previous = keyring.get_keyring()  # keyring's own choice, made before our class exists
    backend = _memory_backend_class()()
    keyring.set_keyring(backend)
    try:
        yield backend
    finally:
        keyring.set_keyring(previous)
