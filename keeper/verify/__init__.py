"""Verdict verification: check a verdict document against the chain without trusting the evaluator.

Pure parts decide: ``canonical`` (RFC 8785 bytes, keccak256 digests), ``document``
(bounded parsing of untrusted JSON), ``failures`` (codes, status, exit codes),
``checks`` (the pipeline for one verdict), ``schemaeval`` / ``githubeval``
(re-running the deterministic evaluators), ``report`` (reports and their
history chain). Edges act: ``sources`` (configured HTTP and directory
fetches), ``verifier`` (one verdict end to end, retry policy, recording),
``evidence`` (task-market evidence), ``pending`` (the daemon's step over the
index), ``submission`` (documents posted to the API), ``command`` (``keeper verify``).
"""
