"""The keeper's signing key: loaded by reference, used locally, never shown.

The key comes from an environment variable named in the config, or from an
encrypted JSON keystore with its passphrase in a file. Everything that could
echo it is closed off: ``repr``/``str`` show the address only, errors name the
variable or file (never its content) and are raised ``from None`` so no
traceback carries the underlying exception's arguments.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account import Account
from eth_utils.address import to_checksum_address

from keeper.errors import ConfigError
from keeper.obs.logging import register_secret

__all__ = ["SignedTx", "Signer", "load_signer"]


@dataclass(frozen=True, slots=True)
class SignedTx:
    """A signed transaction as it is persisted before broadcast."""

    raw: bytes
    tx_hash: str  # lowercase 0x hex


class Signer:
    """Signs EIP-1559 transactions for one address."""

    __slots__ = ("__account", "address")

    def __init__(self, key: bytes | str) -> None:
        try:
            account = Account.from_key(key)
        except Exception:
            raise ConfigError("the keeper key is not a valid secp256k1 private key") from None
        # defence in depth: even a line that somehow carried the key is masked
        register_secret("0x" + bytes(account.key).hex())
        self.__account = account
        self.address: str = str(account.address).lower()

    def sign(self, tx: Mapping[str, Any]) -> SignedTx:
        """Sign a transaction dict (``type`` 2 fields, checksummed or lowercase ``to``)."""
        fields = dict(tx)
        if isinstance(fields.get("to"), str):
            fields["to"] = to_checksum_address(fields["to"])
        signed = self.__account.sign_transaction(fields)
        return SignedTx(raw=bytes(signed.raw_transaction), tx_hash="0x" + signed.hash.hex())

    def __repr__(self) -> str:
        return f"Signer(address={self.address})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Signer is not picklable: it holds a private key")


def load_signer(
    *,
    private_key_env: str = "",
    keystore: str = "",
    keystore_password_file: str = "",
    environ: Mapping[str, str] | None = None,
) -> Signer:
    """The signer named by the ``[keeper]`` config: an env var, or a keystore plus passphrase."""
    env = os.environ if environ is None else environ
    if private_key_env:
        value = env.get(private_key_env, "").strip()
        if not value:
            raise ConfigError(
                f"keeper.private_key_env: environment variable {private_key_env} is empty"
            )
        try:
            return Signer(value)
        except ConfigError:
            raise ConfigError(
                f"keeper.private_key_env: {private_key_env} does not hold a valid private key"
            ) from None
    if keystore:
        if not keystore_password_file:
            raise ConfigError("keeper.keystore_password_file is required with keeper.keystore")
        try:
            document = json.loads(Path(keystore).read_text(encoding="utf-8"))
            password = Path(keystore_password_file).read_text(encoding="utf-8").rstrip("\r\n")
            register_secret(password)
        except (OSError, ValueError):
            raise ConfigError(
                "keeper.keystore: cannot read the keystore or its passphrase file"
            ) from None
        try:
            key = Account.decrypt(document, password)
        except Exception:
            raise ConfigError("keeper.keystore: wrong passphrase or corrupt keystore") from None
        return Signer(bytes(key))
    raise ConfigError(
        "keeper.private_key_env: the keeper is enabled but no key is configured "
        "(set private_key_env or keystore, or dry_run = true)"
    )
