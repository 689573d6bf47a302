"""Remembered servers (File > Connect to server, File > Servers): a list of {url, name}, most
recent first, kept in the settings like the recent model folders; each server's API key is kept
as the Server page's own key is (console/api_key_store.py: the keyring, else a 0600 file), never
in the settings INI. No Qt here: `settings` is anything with value() / setValue() / sync()."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from ..engine.remote.urls import normalize_base_url
from .api_key_store import ApiKeyStore, secrets_dir

log = logging.getLogger(__name__)

SETTING = "servers/recent"
LIMIT = 10


@dataclass(frozen=True)
class SavedServer:
    url: str  # normalized base URL, the server's identity here
    name: str = ""  # what the user called it ("" shows the host)


def server_key_store(url: str, backend=None) -> ApiKeyStore:
    """Where the key of the server at `url` lives: keyring account "server:URL", or a 0600 file
    named by a digest of the URL (a URL is no file name)."""
    folder = secrets_dir() / "servers"
    folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:24]
    return ApiKeyStore(None, backend, account=f"server:{url}", path=Path(folder) / digest)


class ServerStore:
    def __init__(self, settings, backend=None, limit: int = LIMIT):
        self.settings = settings
        self.backend = backend  # None: ApiKeyStore picks the keyring or the file
        self.limit = limit

    def list(self) -> list[SavedServer]:
        raw = self.settings.value(SETTING, "") or ""
        try:
            items = json.loads(raw) if isinstance(raw, str) and raw else []
        except (ValueError, RecursionError):
            log.warning("the remembered servers in the settings are unreadable; starting afresh")
            return []
        out = []
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict) and isinstance(item.get("url"), str):
                out.append(SavedServer(item["url"], str(item.get("name") or "")))
        return out

    def get(self, url: str) -> SavedServer | None:
        url = normalize_base_url(url)
        return next((s for s in self.list() if s.url == url), None)

    def remember(self, url: str, name: str = "", api_key: str | None = None) -> SavedServer:
        """Put the server first (dropping the oldest beyond the limit, and its key); its key is
        replaced by `api_key` (None or "": no key)."""
        saved = SavedServer(normalize_base_url(url), name.strip())
        items = [saved] + [s for s in self.list() if s.url != saved.url]
        for dropped in items[self.limit:]:
            self._keys(dropped.url).save("")
        self._write(items[:self.limit])
        self._keys(saved.url).save(api_key or "")
        return saved

    def key(self, url: str) -> str:
        return self._keys(normalize_base_url(url)).load()

    def forget(self, url: str) -> bool:
        url = normalize_base_url(url)
        items = self.list()
        kept = [s for s in items if s.url != url]
        self._keys(url).save("")
        if len(kept) == len(items):
            return False
        self._write(kept)
        return True

    def where(self, url: str) -> str:
        return self._keys(normalize_base_url(url)).where()

    def _keys(self, url: str) -> ApiKeyStore:
        return server_key_store(url, self.backend)

    def _write(self, items: list[SavedServer]) -> None:
        self.settings.setValue(SETTING, json.dumps([asdict(s) for s in items]))
        self.settings.sync()
