"""Hardhat Network as the sparse backfill benchmarks' node (``bench/hardhat/``).

anvil's work per block follows the whole state (bench/README.md, "The sparse
chains the targets name"), so a sparse chain of 200,000 events (12,500 blocks)
would take it most of an hour to build, and 1,000,000 events most of a day.
Hardhat Network's cost per block follows the block's own changes: the same
chains build in minutes. It is an archive node (every state kept) that answers
the standard calls the daemon makes, and the same dev accounts; only setting
code takes its own method. It serves getLogs and calls more slowly than anvil,
so its runs are compared with their own same-run ceilings, never with anvil's.
"""

from __future__ import annotations

from pathlib import Path

from keeper.devnet.anvil import AnvilProcess

__all__ = ["HARDHAT_DIR", "HardhatProcess", "find_hardhat"]

HARDHAT_DIR = Path(__file__).resolve().parent / "hardhat"


def find_hardhat() -> Path:
    """The pinned hardhat of ``bench/hardhat`` (``make bench`` installs it)."""
    found = HARDHAT_DIR / "node_modules" / ".bin" / "hardhat"
    if not found.exists():
        raise FileNotFoundError(
            f"hardhat not found at {found}: `make bench` installs it "
            "(npm ci --prefix bench/hardhat)"
        )
    return found


class HardhatProcess(AnvilProcess):
    """A private Hardhat Network node on a free loopback port (configured by
    ``bench/hardhat/hardhat.config.js``: the devnet's chain id and gas limit)."""

    name = "hardhat"
    cwd = HARDHAT_DIR  # hardhat runs only from inside its own npm project

    def command(self) -> list[str]:
        return [
            str(find_hardhat()),
            "node",
            "--hostname",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]

    def start(self, timeout: float = 90.0) -> HardhatProcess:
        super().start(timeout)
        return self
