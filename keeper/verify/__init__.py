"""Verdict verification: check a verdict document against the chain without trusting the evaluator.

Pure parts (``canonical``, ``document``, ``checks``, ``schemaeval``, ``githubeval``,
``report``) decide; edges (``sources``, ``verifier``, ``command``) fetch and read the chain.
"""
