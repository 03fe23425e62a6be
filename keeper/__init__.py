"""escrow-keeper: indexer, verdict verifier and keeper for on-chain job escrows."""

__version__ = "0.1.0"
__all__ = ["__version__"]
