"""Endpoint URLs are secrets: redacted for names, scrubbed from messages, hidden from repr."""

from __future__ import annotations

import pytest

from keeper.rpc import EndpointConfig, redact_url
from keeper.rpc.config import scrub


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://eth-mainnet.g.alchemy.com/v2/AbCdEfGh12345678",
            "https://eth-mainnet.g.alchemy.com",
        ),
        (
            "https://mainnet.infura.io/v3/0123456789abcdef0123456789abcdef",
            "https://mainnet.infura.io",
        ),
        (
            "https://user:pa55word@rpc.example.org:8545/path?apikey=zzz#frag",
            "https://rpc.example.org:8545",
        ),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        ("wss://[::1]:8546/ws", "wss://[::1]:8546"),
        ("not a url", "<redacted>"),
        ("http://host:notaport/x", "<redacted>"),
        ("", "<redacted>"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    """Only scheme, host and port survive; anything unparsable is fully redacted."""
    assert redact_url(url) == expected


class TestScrub:
    def test_whole_url_and_its_secret_parts(self) -> None:
        """The URL, its key-bearing path, query and password are all replaced."""
        url = "https://alice:hunter2hunter2@rpc.example.org/v3/KEYKEYKEY123?token=TOKTOKTOK99"
        text = f"error at {url}; path /v3/KEYKEYKEY123; q token=TOKTOKTOK99; pw hunter2hunter2"
        cleaned = scrub(text, (url,))
        for secret in ("KEYKEYKEY123", "TOKTOKTOK99", "hunter2hunter2"):
            assert secret not in cleaned
        assert url not in cleaned

    def test_short_pieces_are_left_alone(self) -> None:
        """A trivial path like "/" is not treated as a secret (it would garble every message)."""
        assert scrub("a/b", ("http://127.0.0.1:8545/",)) == "a/b"


class TestEndpointConfig:
    def test_repr_hides_url(self) -> None:
        """repr (and so any logged config) never shows the URL."""
        config = EndpointConfig("main", "https://x.example/v2/SECRETSECRET")
        assert "SECRETSECRET" not in repr(config) and "main" in repr(config)

    def test_from_url_names_by_redacted_host(self) -> None:
        """Without a name, the endpoint is named by its redacted URL."""
        assert EndpointConfig.from_url("https://x.example/v2/KEY").name == "https://x.example"
        assert EndpointConfig.from_url("https://x.example/v2/KEY", name="primary").name == "primary"

    def test_rejects_bad_settings(self) -> None:
        """Empty names and non-positive rates are configuration errors."""
        with pytest.raises(ValueError):
            EndpointConfig("", "http://x")
        with pytest.raises(ValueError):
            EndpointConfig("a", "http://x", rate=0)
