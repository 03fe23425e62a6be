"""Verdict verification: check a verdict document against the chain without trusting the evaluator.

Pure parts decide: ``canonical`` (RFC 8785 bytes, keccak256 digests), ``document``
(bounded parsing of untrusted JSON), ``failures`` (codes, status, exit codes),
``checks`` (the pipeline for one verdict), ``schemaeval`` / ``githubeval``
(re-running the deterministic evaluators), ``report`` (reports and their
history chain). Edges act: ``sources`` (configured HTTP and directory
fetches), ``verdict`` (one verdict end to end and the retry policy, no
storage), ``evidence`` (task-market evidence), ``verifier`` (recording and the
daemon's step over the index), ``submission`` (documents posted to the API),
``command`` (``keeper verify``).
"""
