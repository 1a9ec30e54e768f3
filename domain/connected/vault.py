"""Connected accounts' secrets, encrypted at rest with a key kept out of the
database: `KALENDS_SECRET_KEY`, else a key file created in `KALENDS_DATA_DIR`.
A database backup alone therefore reveals no provider credentials.

Fernet (AES-128-CBC with HMAC-SHA256, from `cryptography`) authenticates
what it decrypts, so a secret encrypted with another key is refused, not
misread.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

KEY_FILE = "secret.key"


class VaultError(Exception):
    """A secret that this key cannot decrypt (the key changed)."""


class Vault:
    def __init__(self, key_material: str) -> None:
        # Any long random string serves as the key: Fernet's 32 bytes come from its hash.
        digest = hashlib.sha256(key_material.encode()).digest()
        self._fernet = Fernet(base64.urlsafe_b64encode(digest))

    def seal(self, secret: str) -> bytes:
        return self._fernet.encrypt(secret.encode())

    def open(self, sealed: bytes) -> str:
        try:
            return self._fernet.decrypt(sealed).decode()
        except InvalidToken:
            raise VaultError(
                "a stored secret cannot be decrypted with this key (KALENDS_SECRET_KEY or the "
                "key file changed); connect the account again") from None


def load(secret_key: str | None, data_dir: Path) -> Vault:
    if secret_key:
        return Vault(secret_key)
    return Vault(_key_file(data_dir / KEY_FILE))


def _key_file(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written whole under a temporary name, then linked into place: a second
    # process starting at the same moment reads either nothing or the full key,
    # and the first link wins.
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, base64.urlsafe_b64encode(os.urandom(32)) + b"\n")
    finally:
        os.close(fd)
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    return path.read_text().strip()
