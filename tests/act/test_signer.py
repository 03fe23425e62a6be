"""The signing key is loaded by reference and never appears in logs, errors, metrics or the DB."""

from __future__ import annotations

import io
import json
import pickle
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_account import Account
from eth_typing import HexStr
from keeper_harness import KEEPER_KEYS, Escrows, MakeKeeper, address_of, make_rpc
from prometheus_client import generate_latest
from support import keeper_books
from support.rpc_proxy import RpcProxy

from keeper.act import Keeper, KeeperSettings, Signer, load_signer
from keeper.domain.model import BlockHeader
from keeper.errors import ConfigError
from keeper.obs.logging import clear_secrets, configure_logging
from keeper.obs.metrics import Metrics
from keeper.rpc.client import RpcClient

KEY = KEEPER_KEYS[0]


async def rpc_head(rpc: RpcClient) -> BlockHeader:
    block = await rpc.get_block("latest")
    assert block is not None
    return block


@pytest.fixture
def log_buffer() -> Iterator[io.StringIO]:
    """JSON logs at debug into a buffer; the default setup is restored afterwards."""
    buffer = io.StringIO()
    configure_logging("json", "debug", buffer)
    yield buffer
    configure_logging()


def leaks(text: str, *secrets: str) -> list[str]:
    """Which secrets (with or without 0x, any case) occur in ``text``."""
    low = text.lower()
    return [s for s in secrets if s.lower().removeprefix("0x") in low]


class TestLoading:
    """Env var and keystore loading, with errors that name the source but not the secret."""

    def test_env_var(self) -> None:
        """The key in the named variable yields its address."""
        signer = load_signer(private_key_env="K", environ={"K": KEY})
        assert signer.address == address_of(KEY)

    @pytest.mark.parametrize("value", ["", "0x1234", KEY[:-2] + "zz"])
    def test_bad_env_var_names_variable_not_value(self, value: str) -> None:
        """A missing or malformed key is a ConfigError naming the variable, not echoing it."""
        with pytest.raises(ConfigError) as err:
            load_signer(private_key_env="KEEPER_PRIVATE_KEY", environ={"KEEPER_PRIVATE_KEY": value})
        assert "KEEPER_PRIVATE_KEY" in str(err.value)
        shown = "".join(traceback.format_exception(err.value))  # chained causes included
        assert not leaks(shown, KEY) and (not value or value[2:] not in shown)

    def test_keystore(self, tmp_path: Path) -> None:
        """An encrypted keystore with its passphrase file gives the same signer."""
        store, pw = tmp_path / "ks.json", tmp_path / "pw"
        store.write_text(
            json.dumps(Account.encrypt(HexStr(KEY), "correct horse", kdf="scrypt", iterations=2))
        )
        pw.write_text("correct horse\n")
        signer = load_signer(keystore=str(store), keystore_password_file=str(pw))
        assert signer.address == address_of(KEY)

    def test_keystore_wrong_passphrase(self, tmp_path: Path) -> None:
        """A wrong passphrase is a ConfigError that shows neither passphrase nor key."""
        store, pw = tmp_path / "ks.json", tmp_path / "pw"
        store.write_text(
            json.dumps(Account.encrypt(HexStr(KEY), "correct horse", kdf="scrypt", iterations=2))
        )
        pw.write_text("battery staple")
        with pytest.raises(ConfigError) as err:
            load_signer(keystore=str(store), keystore_password_file=str(pw))
        shown = "".join(traceback.format_exception(err.value))
        assert not leaks(shown, KEY, "battery staple", "correct horse")

    def test_nothing_configured(self) -> None:
        """Without a key source the keeper cannot send, and says which keys to set."""
        with pytest.raises(ConfigError, match="private_key_env or keystore"):
            load_signer(environ={})

    def test_repr_and_pickle_hide_the_key(self) -> None:
        """repr/str show the address only, and pickling is refused."""
        signer = Signer(KEY)
        assert repr(signer) == str(signer) == f"Signer(address={address_of(KEY)})"
        with pytest.raises(TypeError):
            pickle.dumps(signer)


async def test_key_never_leaves_the_process(
    escrows: Escrows, rpc: RpcClient, make_keeper: MakeKeeper, tmp_path: Path
) -> None:
    """Logs at debug, errors, the database and the metrics of a busy keeper never hold the key."""
    buffer = io.StringIO()
    configure_logging("json", "debug", buffer)
    signer = load_signer(private_key_env="KEEPER_PRIVATE_KEY", environ={"KEEPER_PRIVATE_KEY": KEY})
    clear_secrets()  # prove we never emit it, not only that the redactor would catch it
    metrics = Metrics()
    expiry = escrows.now() + 100
    ids = escrows.funded_jobs(3, expiry)
    escrows.control.mine_at(expiry)
    errors: list[str] = []
    db = tmp_path / "scan.db"
    base = make_keeper(db=db)
    async with RpcProxy(escrows.url) as proxy, make_rpc(proxy.url, attempts=1) as flaky:
        proxy.rules.on("eth_sendRawTransaction", drop_reply=1)
        keeper = Keeper(
            settings=KeeperSettings(
                max_fee_cap=10**11, confirmations=1, multicall=escrows.d.multicall
            ),
            chain_id=31337,
            rpc=flaky,
            db=base.store.conn,
            signer=signer,
            metrics=metrics,
            contracts=escrows.d.contract_configs(),
        )
        for _ in range(3):
            await keeper.tick(await rpc_head(rpc), escrows.jobs(ids), [])
            escrows.control.mine()
        proxy.rules.on("eth_getTransactionCount", error=5, error_message="boom")
        try:
            await keeper.tick(await rpc_head(rpc), escrows.jobs(ids), [])
        except Exception as exc:  # the failure surfaces to the daemon: it must not carry the key
            errors.append(repr(exc) + str(exc))
    assert {i.outcome for i in keeper_books.all_intents(keeper.store)} == {"confirmed"}
    dump = "\n".join(keeper.store.conn.iterdump())
    scraped = generate_latest(metrics.registry).decode()
    everything = "\n".join([buffer.getvalue(), dump, scraped, *errors, repr(keeper), repr(signer)])
    assert "keeper_action_confirmed" in buffer.getvalue() and errors
    assert leaks(everything, KEY) == []
    assert 'keeper_actions_total{action="claimRefund"' in scraped
