"""The embedded devnet: anvil, our contracts, a traffic generator, an evaluator stand-in.

Imported by nothing else in the package but the CLI's ``devnet`` command and tests.
"""
