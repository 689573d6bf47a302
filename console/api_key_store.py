"""Where the console keeps the Server page's API key: the system keyring when `keyring` has a
working backend (Secret Service, KWallet, macOS Keychain, Windows Credential Locker), else a
file readable by the user alone (0600, in a 0700 folder under the state directory). Never in
the settings INI: a key found there (older versions put it there) is moved out on first read.
No Qt here."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..engine.atomic_files import atomic_write_text
from ..engine.paths import state_dir

log = logging.getLogger(__name__)

SERVICE = "npu-console"
ACCOUNT = "server-api-key"
LEGACY_SETTING = "server/api_key"


def usable_keyring():
    """The keyring backend to use, or None when only the fail/null backends are available."""
    try:
        import keyring
        from keyring.backends import fail, null
    except ImportError:
        return None
    try:
        backend = keyring.get_keyring()
    except Exception:  # noqa: BLE001 - a broken keyring setup: use the file
        return None
    if isinstance(backend, (fail.Keyring, null.Keyring)) or getattr(backend, "priority", 0) <= 0:
        return None
    return backend


def secrets_dir() -> Path:
    d = state_dir() / "secrets"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(d, 0o700)  # mkdir's mode is masked by the umask, and an old folder may be wider
    return d


def key_file() -> Path:
    return secrets_dir() / "api_key"


class ApiKeyStore:
    """load() / save(key) / where(); `settings` (a QSettings) only for moving an old key out.
    `account` and `path` name another key (a remembered server's: console/servers.py); the
    defaults are the Server page's own."""

    def __init__(self, settings=None, backend=None, account: str = ACCOUNT,
                 path: Path | None = None):
        self.settings = settings
        self.backend = backend if backend is not None else usable_keyring()
        self.account = account
        self._path = path

    def _file(self) -> Path:
        return self._path if self._path is not None else key_file()

    def where(self) -> str:
        return (f"system keyring ({type(self.backend).__name__})" if self.backend is not None
                else f"{self._file()} (mode 0600)")

    def load(self) -> str:
        legacy = self._take_legacy()
        if legacy:
            self.save(legacy)
            return legacy
        if self.backend is not None:
            try:
                return self.backend.get_password(SERVICE, self.account) or ""
            except Exception as exc:  # noqa: BLE001 - a locked or broken keyring
                log.warning("could not read the API key from the keyring: %s", exc)
                return ""
        try:
            return self._file().read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return ""

    def save(self, key: str) -> None:
        key = key.strip()
        if self.backend is not None:
            try:
                if key:
                    self.backend.set_password(SERVICE, self.account, key)
                else:
                    self._delete_from_keyring()
                return
            except Exception as exc:  # noqa: BLE001 - fall back to the private file
                log.warning("could not store the API key in the keyring (%s); using %s",
                            exc, self._file())
                self.backend = None
        if key:
            atomic_write_text(self._file(), key + "\n", mode=0o600)
        else:
            self._file().unlink(missing_ok=True)

    def _delete_from_keyring(self) -> None:
        try:
            self.backend.delete_password(SERVICE, self.account)
        except Exception as exc:  # noqa: BLE001 - usually: nothing stored, nothing to delete
            log.debug("no API key to delete from the keyring: %s", exc)

    def _take_legacy(self) -> str:
        s = self.settings
        if s is None or not s.contains(LEGACY_SETTING):
            return ""
        value = str(s.value(LEGACY_SETTING, "") or "").strip()
        s.remove(LEGACY_SETTING)
        s.sync()
        return value
