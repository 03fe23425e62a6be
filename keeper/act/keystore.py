"""An encrypted JSON keystore (Web3 Secret Storage, version 3) opened with its passphrase.

The format geth, clef, eth_account and foundry's ``cast wallet`` write:
scrypt or PBKDF2-HMAC-SHA256 derives a key from the passphrase, the keccak of
its second half and the ciphertext is the MAC, AES-128-CTR the cipher. Done
here with pycryptodome and hashlib rather than eth_keyfile, whose import
brings eth_utils and pydantic into every daemon that signs (keeper.act.eip1559).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import Any

from Crypto.Cipher import AES
from Crypto.Protocol.KDF import scrypt
from Crypto.Util import Counter

from keeper.domain.hashing import keccak

__all__ = ["SCRYPT_MEMORY", "KeystoreError", "decrypt_keystore"]

# scrypt needs 128 * n * r bytes: a hostile keystore must not take the machine's memory
# (geth's "standard" parameters, n = 2**18 and r = 8, need 256 MiB)
SCRYPT_MEMORY = 1 << 30


class KeystoreError(ValueError):
    """The document is not a keystore this opens, or the passphrase is wrong (the MAC)."""


def _lower_keys(value: Any) -> Any:
    # field names are case-insensitive in the wild: geth once wrote "Crypto"
    if isinstance(value, Mapping):
        return {str(k).lower(): _lower_keys(v) for k, v in value.items()}
    return value


def _hex(value: Any, what: str) -> bytes:
    if not isinstance(value, str):
        raise KeystoreError(f"keystore: {what} is not a hex string")
    try:
        return bytes.fromhex(value.removeprefix("0x"))
    except ValueError:
        raise KeystoreError(f"keystore: {what} is not a hex string") from None


def _int(params: Mapping[str, Any], name: str) -> int:
    value = params.get(name)
    if type(value) is not int or value <= 0:
        raise KeystoreError(f"keystore: kdfparams.{name} is not a positive integer")
    return value


def _derive(crypto: Mapping[str, Any], password: bytes) -> bytes:
    kdf, params = crypto.get("kdf"), crypto.get("kdfparams")
    if not isinstance(params, Mapping):
        raise KeystoreError("keystore: kdfparams missing")
    salt = _hex(params.get("salt"), "kdfparams.salt")
    dklen = _int(params, "dklen")
    if dklen < 32:
        raise KeystoreError("keystore: kdfparams.dklen below 32")
    if kdf == "scrypt":
        n = _int(params, "n")
        r = _int(params, "r")
        if n & (n - 1):
            raise KeystoreError("keystore: kdfparams.n is not a power of two")
        if 128 * n * r > SCRYPT_MEMORY:
            raise KeystoreError("keystore: kdfparams n and r ask scrypt for more than 1 GiB")
        # pycryptodome takes str and encodes latin-1: the bytes pass through unchanged
        key = scrypt(password.decode("latin-1"), salt.decode("latin-1"), dklen, n, r,
                     _int(params, "p"))  # fmt: skip
        assert isinstance(key, bytes)
        return key
    if kdf == "pbkdf2":
        if params.get("prf") != "hmac-sha256":
            raise KeystoreError("keystore: pbkdf2 with a prf other than hmac-sha256")
        return hashlib.pbkdf2_hmac("sha256", password, salt, _int(params, "c"), dklen)
    raise KeystoreError(f"keystore: unsupported kdf {kdf!r}")


def decrypt_keystore(document: Any, password: bytes) -> bytes:
    """The private key in ``document``; KeystoreError says what is wrong, never the secret."""
    doc = _lower_keys(document)
    if not isinstance(doc, Mapping) or doc.get("version") != 3:
        raise KeystoreError("keystore: not a version 3 keystore")
    crypto = doc.get("crypto")
    if not isinstance(crypto, Mapping):
        raise KeystoreError("keystore: crypto missing")
    if crypto.get("cipher") != "aes-128-ctr":
        raise KeystoreError("keystore: cipher is not aes-128-ctr")
    cipherparams = crypto.get("cipherparams")
    if not isinstance(cipherparams, Mapping):
        raise KeystoreError("keystore: cipherparams missing")
    iv = _hex(cipherparams.get("iv"), "cipherparams.iv")
    ciphertext = _hex(crypto.get("ciphertext"), "ciphertext")
    mac = _hex(crypto.get("mac"), "mac")
    derived = _derive(crypto, password)
    if not hmac.compare_digest(keccak(derived[16:32] + ciphertext), mac):
        raise KeystoreError("keystore: MAC mismatch (wrong passphrase or corrupt keystore)")
    counter = Counter.new(128, initial_value=int.from_bytes(iv, "big"), allow_wraparound=True)
    return AES.new(derived[:16], AES.MODE_CTR, counter=counter).decrypt(ciphertext)
