"""Re-run SchemaEval: hash, parse and validate the deliverable, then compare with the verdict.

SchemaEval checks, in order: keccak256(content) == on-chain deliverable, the
content is JSON, it validates against the job's JSON Schema 2020-12. We repeat
those steps and compare the outcome (``esito``) and the set of failing instance
locations with the pointers that prefix the verdict's ``motivi``
("/fornitori: Array has too few items"). Messages differ between validator
libraries, so prose never decides agreement.

Nothing is ever fetched: the schema is validated with a registry that knows
only the JSON Schema meta-schemas (bundled) and refuses every other URI, so a
remote ``$ref`` ends the re-run as ``not_reproducible`` instead of a request to
a host chosen by whoever wrote the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import referencing
import referencing.exceptions
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema_specifications import REGISTRY as _META_SCHEMAS  # type: ignore[import-untyped]

from keeper.domain.text import clipped
from keeper.verify.canonical import JsonValue, keccak_hex
from keeper.verify.document import DocumentLimits, InvalidDocument, escape_token, parse_json
from keeper.verify.failures import Failure, FailureCode
from keeper.verify.schema_refs import ref_loop

Esito = Literal["complete", "reject"]

# Enough to pinpoint every failing location of a real deliverable; bounds the
# work a hostile schema/content pair can cause (errors are generated lazily).
MAX_ERRORS = 1000


def _refuse(uri: str) -> referencing.Resource[Any]:
    # referencing builds its classes with attrs under its own alias, which mypy cannot see through
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


_OFFLINE: referencing.Registry[Any] = _META_SCHEMAS.combine(
    referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]
)


@dataclass(frozen=True, slots=True)
class Rederived:
    """What SchemaEval should have decided; ``locations`` is None when validation never ran."""

    esito: Esito
    locations: frozenset[str] | None
    why: str


def is_schemaeval(description: JsonValue) -> bool:
    """A SchemaEval job description: ``{"brief": ..., "schema": {...}}``."""
    return isinstance(description, dict) and "schema" in description and "github" not in description


def rerun(
    schema: JsonValue, content: bytes, deliverable: str, limits: DocumentLimits
) -> Rederived | Failure:
    """SchemaEval's three steps on ``content``; a Failure where we cannot repeat them faithfully."""
    if keccak_hex(content) != deliverable.lower():
        return Rederived("reject", None, "content does not hash to the on-chain deliverable")
    try:
        instance = parse_json(content, limits)
    except InvalidDocument as exc:
        if exc.syntax:
            return Rederived("reject", None, f"content is not JSON: {exc.detail}")
        return Failure(FailureCode.NOT_REPRODUCIBLE, "/deliverable", f"content: {exc}")
    if not isinstance(schema, (dict, bool)):
        return Failure(FailureCode.NOT_REPRODUCIBLE, "/esito", "job schema is not a schema")
    try:
        Draft202012Validator.check_schema(schema)
        loop = ref_loop(schema)
        if loop is not None:
            return Failure(
                FailureCode.NOT_REPRODUCIBLE,
                "/esito",
                f"job schema at {loop or '/'} reaches itself through $ref without descending "
                "into the instance: validation would never end",
            )
        validator = Draft202012Validator(schema, registry=_OFFLINE)
        locations: set[str] = set()
        for count, error in enumerate(validator.iter_errors(instance)):
            if count >= MAX_ERRORS:
                return Failure(FailureCode.NOT_REPRODUCIBLE, "/esito", "too many schema errors")
            locations.add("".join(f"/{escape_token(str(p))}" for p in error.absolute_path))
    except SchemaError as exc:
        return Failure(FailureCode.NOT_REPRODUCIBLE, "/esito", f"invalid job schema: {exc.message}")
    except referencing.exceptions.Unresolvable as exc:
        return Failure(
            FailureCode.NOT_REPRODUCIBLE, "/esito", f"schema $ref not resolvable offline: {exc}"
        )
    except Exception as exc:  # a pattern Python's re rejects, etc.: we cannot judge, say so
        return Failure(
            FailureCode.NOT_REPRODUCIBLE,
            "/esito",
            clipped(f"schema evaluation failed: {type(exc).__name__}: {exc}", 300),
        )
    except BaseException as exc:
        # Recursing near the interpreter's limit can make the resolver's native
        # (Rust) code panic, which surfaces as a BaseException: a schema fault all
        # the same, never a reason for the verifier to die.
        if type(exc).__name__ != "PanicException":
            raise
        return Failure(
            FailureCode.NOT_REPRODUCIBLE, "/esito", "schema evaluation failed: validator panicked"
        )
    if locations:
        return Rederived("reject", frozenset(locations), "content does not match the schema")
    return Rederived("complete", frozenset(), "content matches the schema")


def motivi_pointers(motivi: JsonValue) -> frozenset[str] | None:
    """The instance locations a verdict names: the ``<pointer>: `` prefix of each motivo.

    A motivo starting with ``/`` (or ``#/``) carries a pointer up to the first
    ": "; one starting with ":" names the root (""); other entries are prose
    (a hash or parse failure) and name no location. None if motivi is not a list.
    """
    if not isinstance(motivi, list):
        return None
    out: set[str] = set()
    for item in motivi:
        if not isinstance(item, str):
            continue
        text = item[1:] if item.startswith("#/") or item.startswith("#:") else item
        if text.startswith(":"):
            out.add("")
        elif text.startswith("/"):
            out.add(text.partition(": ")[0])
    return frozenset(out)


def compare(verdict: Mapping[str, JsonValue], derived: Rederived) -> list[Failure]:
    """Agreement on ``esito`` and, for a schema rejection, on the failing locations."""
    esito = verdict.get("esito")
    if esito != derived.esito:
        return [
            Failure(
                FailureCode.EVALUATOR_DISAGREES,
                "/esito",
                f"re-run says {derived.esito} ({derived.why}), verdict says {esito}",
            )
        ]
    if derived.esito == "reject" and derived.locations is None:
        # the re-run stopped before the schema (content not the deliverable, or not
        # JSON): a verdict naming schema locations claims a validation that the
        # evidence says could not have happened
        named = motivi_pointers(verdict.get("motivi"))
        if named:
            return [
                Failure(
                    FailureCode.EVALUATOR_DISAGREES,
                    "/motivi",
                    f"verdict names failing locations {sorted(named)} but the re-run never "
                    f"reached the schema: {derived.why}",
                )
            ]
    if derived.esito == "reject" and derived.locations is not None:
        named = motivi_pointers(verdict.get("motivi"))
        if named != derived.locations:
            missing = sorted(derived.locations - (named or frozenset()))
            extra = sorted((named or frozenset()) - derived.locations)
            return [
                Failure(
                    FailureCode.EVALUATOR_DISAGREES,
                    "/motivi",
                    f"failing locations differ: not named {missing}, named but valid {extra}",
                )
            ]
    return []


def check(
    verdict: Mapping[str, JsonValue],
    description: Mapping[str, JsonValue],
    content: bytes,
    deliverable: str,
    limits: DocumentLimits,
) -> list[Failure]:
    """Re-run SchemaEval for one job and compare with its verdict."""
    derived = rerun(description.get("schema"), content, deliverable, limits)
    if isinstance(derived, Failure):
        return [derived]
    return compare(verdict, derived)
