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

from coincurve import PrivateKey

from keeper.act.eip1559 import address_of, sign_1559
from keeper.act.keystore import KeystoreError, decrypt_keystore
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
            secret = _key_bytes(key)
            account = PrivateKey(secret)
        except Exception:
            raise ConfigError("the keeper key is not a valid secp256k1 private key") from None
        # defence in depth: even a line that somehow carried the key is masked
        register_secret("0x" + secret.hex())
        self.__account = account
        self.address: str = address_of(account)

    def sign(self, tx: Mapping[str, Any]) -> SignedTx:
        """Sign a transaction dict (``type`` 2 fields, ``to`` as 0x hex in any case)."""
        if tx.get("type", 2) != 2:
            raise ValueError("the keeper signs EIP-1559 (type 2) transactions only")
        raw, tx_hash = sign_1559(
            self.__account,
            chain_id=tx["chainId"],
            nonce=tx["nonce"],
            max_priority_fee=tx["maxPriorityFeePerGas"],
            max_fee=tx["maxFeePerGas"],
            gas=tx["gas"],
            to=bytes.fromhex(str(tx["to"]).removeprefix("0x")),
            value=tx.get("value", 0),
            data=bytes(tx.get("data", b"")),
        )
        return SignedTx(raw=raw, tx_hash="0x" + tx_hash.hex())

    def __repr__(self) -> str:
        return f"Signer(address={self.address})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Signer is not picklable: it holds a private key")


def _key_bytes(key: bytes | str) -> bytes:
    """32 key bytes from bytes or 0x-prefixed (or bare) hex; ValueError names no digit."""
    if isinstance(key, str):
        digits = key.strip().removeprefix("0x")
        if len(digits) != 64:
            raise ValueError("a private key is 64 hex digits")
        key = bytes.fromhex(digits)
    if len(key) != 32:
        raise ValueError("a private key is 32 bytes")
    return bytes(key)


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
            key = decrypt_keystore(document, password.encode("utf-8"))
        except KeystoreError as exc:  # names the field at fault, never a value
            raise ConfigError(f"keeper.{exc}") from None
        except Exception:
            raise ConfigError("keeper.keystore: wrong passphrase or corrupt keystore") from None
        return Signer(key)
    raise ConfigError(
        "keeper.private_key_env: the keeper is enabled but no key is configured "
        "(set private_key_env or keystore, or dry_run = true)"
    )
