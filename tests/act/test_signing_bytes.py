"""The keeper's own transaction signing and keystore opening give eth_account's exact bytes.

keeper.act.eip1559 and keeper.act.keystore replace eth_account in the daemon
(its import is 18 MB); eth_account stays the reference here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from eth_typing import HexStr
from eth_utils import to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from keeper.act import Signer, load_signer
from keeper.act.eip1559 import rlp
from keeper.act.keystore import KeystoreError, decrypt_keystore
from keeper.errors import ConfigError

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

keys = st.integers(1, SECP256K1_N - 1).map(lambda k: "0x" + k.to_bytes(32, "big").hex())
u256 = st.integers(0, 2**256 - 1)
transactions = st.fixed_dictionaries({
    "type": st.just(2),
    "chainId": st.integers(1, 2**64),
    "nonce": st.integers(0, 2**64 - 1),
    "to": st.binary(min_size=20, max_size=20).map(lambda b: "0x" + b.hex()),
    "value": u256,
    "data": st.binary(max_size=300),
    "gas": st.integers(21_000, 2**63),
    "maxFeePerGas": u256,
    "maxPriorityFeePerGas": u256,
})  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(key=keys, tx=transactions)
def test_signed_bytes_equal_eth_account(key: str, tx: dict[str, Any]) -> None:
    """Same address, raw transaction and hash as eth_account for any key and type-2 fields."""
    mine = Signer(key)
    reference = Account.from_key(key)
    theirs = reference.sign_transaction({**tx, "to": to_checksum_address(tx["to"])})
    assert mine.address == reference.address.lower()
    signed = mine.sign(tx)
    assert signed.raw == bytes(theirs.raw_transaction)
    assert signed.tx_hash == "0x" + theirs.hash.hex()


def test_sign_refuses_other_transaction_types() -> None:
    """A legacy or access-list transaction is refused, not signed as type 2."""
    signer = Signer("0x" + "11" * 32)
    with pytest.raises(ValueError, match="type 2"):
        signer.sign({"type": 0, "chainId": 1, "nonce": 0, "to": "0x" + "00" * 20, "gas": 1,
                     "maxFeePerGas": 1, "maxPriorityFeePerGas": 1})  # fmt: skip


@pytest.mark.parametrize(
    ("item", "encoded"),
    [
        (b"", "80"), (0, "80"), (b"\x00", "00"), (15, "0f"), (1024, "820400"),
        (b"dog", "83646f67"), ([], "c0"), ([b"cat", b"dog"], "c88363617483646f67"),
        ([[], [[]], [[], [[]]]], "c7c0c1c0c3c0c1c0"),
        (b"L" * 56, "b838" + "4c" * 56),
    ],
)  # fmt: skip
def test_rlp_examples(item: Any, encoded: str) -> None:
    """The examples of Ethereum's RLP specification, and the long-string boundary."""
    assert rlp(item).hex() == encoded


@pytest.mark.parametrize("kdf", ["scrypt", "pbkdf2"])
@pytest.mark.parametrize("password", ["correct horse", "pässwörd ✓", ""])
def test_keystore_opens_what_eth_account_writes(kdf: str, password: str, tmp_path: Path) -> None:
    """Both key derivations, non-ASCII and empty passphrases, through load_signer too."""
    key = "0x" + "42" * 32
    doc = Account.encrypt(HexStr(key), password, kdf=kdf, iterations=2 if kdf == "scrypt" else 5)
    assert decrypt_keystore(doc, password.encode()) == bytes.fromhex(key[2:])
    store, pw = tmp_path / "ks.json", tmp_path / "pw"
    store.write_text(json.dumps(doc))
    pw.write_text(password + "\n", encoding="utf-8")
    signer = load_signer(keystore=str(store), keystore_password_file=str(pw))
    assert signer.address == Account.from_key(key).address.lower()


def test_keystore_field_names_in_any_case() -> None:
    """geth once wrote "Crypto": field names are matched case-insensitively."""
    doc = Account.encrypt(HexStr("0x" + "42" * 32), "pw", kdf="pbkdf2", iterations=5)
    doc["Crypto"] = doc.pop("crypto")
    assert decrypt_keystore(doc, b"pw") == b"\x42" * 32


def _broken(change: Any) -> dict[str, Any]:
    key = HexStr("0x" + "42" * 32)
    doc: dict[str, Any] = Account.encrypt(key, "pw", kdf="scrypt", iterations=2)
    change(doc)
    return doc


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d.update(version=4), "version 3"),
        (lambda d: d.pop("crypto"), "crypto missing"),
        (lambda d: d["crypto"].update(cipher="aes-256-gcm"), "aes-128-ctr"),
        (lambda d: d["crypto"].update(kdf="argon2"), "unsupported kdf"),
        (lambda d: d["crypto"]["kdfparams"].update(n=3), "power of two"),
        (lambda d: d["crypto"]["kdfparams"].update(n=2**30), "more than 1 GiB"),
        (lambda d: d["crypto"]["kdfparams"].update(dklen=16), "dklen"),
        (lambda d: d["crypto"]["kdfparams"].update(salt=7), "kdfparams.salt"),
        (lambda d: d["crypto"].update(ciphertext="zz"), "ciphertext"),
        (lambda d: d["crypto"].update(mac="00" * 32), "MAC mismatch"),
    ],
)  # fmt: skip
def test_bad_keystore_named(change: Any, named: str, tmp_path: Path) -> None:
    """Each defect is a ConfigError naming the field at fault, with no secret in it."""
    doc = _broken(change)
    with pytest.raises(KeystoreError, match=named):
        decrypt_keystore(doc, b"pw")
    store, pw = tmp_path / "ks.json", tmp_path / "pw"
    store.write_text(json.dumps(doc))
    pw.write_text("pw")
    with pytest.raises(ConfigError, match=r"keeper\.keystore: ") as err:
        load_signer(keystore=str(store), keystore_password_file=str(pw))
    assert "42" * 8 not in str(err.value)
