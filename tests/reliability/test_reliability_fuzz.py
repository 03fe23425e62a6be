"""Fuzzed inputs at every door that takes untrusted bytes: no crash, no hang, bounded memory,
and every rejection says why in a machine-readable way (a failure code, a key path, a 400 JSON).

Each kind runs ~200 examples in the fast suite and 5,000 in the long one; the
examples actually run are counted into the report. Every example runs under a
hypothesis deadline (no hang) and tracemalloc (peak allocation per example).
"""

from __future__ import annotations

import contextlib
import json
import re
import string
import tomllib
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_report import REPORT
from rel_sizes import SIZES, Size

from keeper.api.params import BadParam, parse_list_query
from keeper.config import load_config, parse_config
from keeper.devnet.evaluator_service import load_fixtures, schemaeval_verdict, verdict_digest
from keeper.domain.event_catalog import SPECS
from keeper.domain.events import decode_log
from keeper.domain.model import Log, Protocol
from keeper.errors import ConfigError
from keeper.verify.canonical import keccak_hex
from keeper.verify.checks import CheckConfig, VerdictFacts, check_reexecution, run_checks
from keeper.verify.document import InvalidDocument, parse_object
from keeper.verify.failures import Failure, FailureCode
from keeper.verify.sandbox import Sandbox, SandboxTimeout

# An example may take this long before it counts as a hang (generous: the suite
# shares two cores with anvil nodes, and tracemalloc slows allocation down).
DEADLINE = timedelta(seconds=5)
# Peak Python allocation of one example; inputs are kilobytes, so even a 1000x blow-up fits.
MEMORY_LIMIT = 64 << 20
EVALUATOR = "0x" + "ab" * 20
COMMERCE = "0x" + "cd" * 20


@pytest.fixture
def measured() -> Iterator[Callable[[str, str, Callable[[], None]], None]]:
    """Run one example under tracemalloc and count it for the report."""
    tracemalloc.start()

    def run(size: str, kind: str, example: Callable[[], None]) -> None:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        example()
        peak = tracemalloc.get_traced_memory()[1] - base
        assert peak < MEMORY_LIMIT, f"{kind}: one example allocated {peak} bytes"
        REPORT.figures(size).fuzz_cases[kind] += 1

    yield run
    tracemalloc.stop()
    REPORT.flush()


def fuzz_settings(size: Size) -> settings:
    return settings(
        max_examples=size.fuzz_examples,
        derandomize=True,
        deadline=DEADLINE,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


def rejected(size: str, kind: str) -> None:
    REPORT.figures(size).fuzz_rejections[kind] += 1


def assert_coded(failures: list[Failure] | tuple[Failure, ...]) -> None:
    """Every failure carries a known code and a JSON pointer (possibly the root)."""
    for f in failures:
        assert isinstance(f.code, FailureCode)
        assert f.pointer == "" or f.pointer.startswith("/"), f


# --------------------------------------------------------------------------- strategies

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=25,
)
VERDICT_KEYS = ("evaluator", "version", "jobId", "deliverable", "esito", "motivi")
verdict_like = st.dictionaries(
    st.sampled_from(VERDICT_KEYS) | st.text(max_size=8),
    json_values | st.sampled_from(["complete", "reject", "SchemaEval", "7", "0x" + "11" * 32]),
    max_size=8,
)


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """Byte-level damage to a valid document: cut, flip, splice, duplicate."""
    out = bytearray(raw)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["cut", "flip", "insert", "dup"]))
        if not out:
            break
        at = draw(st.integers(0, len(out) - 1))
        if op == "cut":
            del out[at:]
        elif op == "flip":
            out[at] = draw(st.integers(0, 255))
        elif op == "insert":
            out[at:at] = draw(
                st.binary(max_size=8) | st.sampled_from([b"[" * 200, b"9" * 60, b'"', b"\\"])
            )
        else:
            out += out[at:]
    return bytes(out)


# --------------------------------------------------------------------------- verdict documents

FIX = load_fixtures()
DELIVERABLE = keccak_hex(FIX.complete)
GOOD = schemaeval_verdict(7, FIX.description, FIX.complete, DELIVERABLE)
GOOD_BYTES = json.dumps(GOOD).encode()
GOOD_FACTS = VerdictFacts(
    job_id=7,
    event_name="JobCompleted" if GOOD["esito"] == "complete" else "JobRejected",
    reason=verdict_digest(GOOD),
    deliverable=DELIVERABLE,
    evaluator=EVALUATOR,
    description=FIX.description,
)


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_verdict_documents(size: Size, measured: Any) -> None:
    """Random and damaged verdict bodies: coded failures, and a pass only for the true digest."""

    @fuzz_settings(size)
    @given(
        body=st.one_of(
            st.binary(max_size=300),
            verdict_like.map(lambda d: json.dumps(d).encode()),
            mutated(GOOD_BYTES),
        ),
        pointer=st.sampled_from(["", "", "/verdict", "/a~1b", "/0"]),
    )
    def example(body: bytes, pointer: str) -> None:
        def run() -> None:
            doc, failures = run_checks(body, GOOD_FACTS, CheckConfig(), FIX.complete, pointer)
            assert_coded(failures)
            if doc.passed:
                assert doc.digest == GOOD_FACTS.reason  # only the real document gets through
            else:
                rejected(size.name, "verdict_document")
            try:
                parse_object(body)
            except InvalidDocument as exc:
                assert exc.pointer == "" or exc.pointer.startswith("/")

        measured(size.name, "verdict_document", run)

    example()


# --------------------------------------------------------------------------- descriptions, schemas


def verdict_for(
    description: str, content: bytes, *, evaluate: bool = True
) -> tuple[bytes, VerdictFacts]:
    """A verdict that passes the document checks, so the re-run step is what gets fuzzed.

    With ``evaluate`` the devnet's stand-in SchemaEval writes it (in this process, so
    never for hostile schemas); otherwise it is a bare rejection.
    """
    deliverable = keccak_hex(content)
    verdict = {"evaluator": "SchemaEval", "version": 1, "jobId": "7",
               "deliverable": deliverable, "esito": "reject", "motivi": []}  # fmt: skip
    if evaluate:
        # the stand-in evaluator may refuse what the verifier must survive
        with contextlib.suppress(Exception):
            verdict = schemaeval_verdict(7, description, content, deliverable)
    facts = VerdictFacts(
        job_id=7,
        event_name="JobCompleted" if verdict["esito"] == "complete" else "JobRejected",
        reason=verdict_digest(verdict),
        deliverable=deliverable,
        evaluator=EVALUATOR,
        description=description,
    )
    return json.dumps(verdict).encode(), facts


SAFE_PATTERNS = ["^[0-9]{11}$", "(", "a{2,", "^\\p{L}+$", "[[:alpha:]]", ".*"]


def schema_strategy(patterns: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    """JSON Schemas (valid and not) built from the keywords SchemaEval jobs use."""
    return st.recursive(
        schema_keywords(patterns),
        lambda inner: st.fixed_dictionaries(
            {"type": st.just("object")},
            optional={
                "properties": st.dictionaries(st.text(max_size=6), inner, max_size=3),
                "items": inner,
                "allOf": st.lists(inner, max_size=2),
                "not": inner,
            },
        ),
        max_leaves=8,
    ) | st.sampled_from([True, False, [], "string", 7])


def schema_keywords(patterns: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(
                ["object", "array", "string", "integer", "number", "null", "bogus"]
            )
            | st.lists(st.sampled_from(["string", "null"]), max_size=2),
            "required": st.lists(st.text(max_size=5), max_size=3),
            "minItems": st.integers(-2, 5),
            "maxLength": st.integers(-1, 10),
            "pattern": patterns,
            "enum": st.lists(json_scalars, max_size=3),
            "$ref": st.sampled_from(["#/nope", "http://example.com/s.json", "#", "#/properties/x"]),
            "format": st.sampled_from(["email", "date-time", "uri", "nonsense"]),
            "multipleOf": st.sampled_from([0, -1, 0.1, 3]),
        },
    )


# in-process checks get fixed patterns; random ones (possibly catastrophic) go to the sandbox
safe_schemas = schema_strategy(st.sampled_from(SAFE_PATTERNS))
random_schemas = schema_strategy(
    st.sampled_from(SAFE_PATTERNS) | st.text(alphabet="ab()*+?|^$[]{}0123456789,.\\", max_size=12)
)
descriptions = st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    st.builds(
        lambda s, b: json.dumps({"brief": b, "schema": s}), safe_schemas, st.text(max_size=20)
    ),
    st.builds(
        lambda g: json.dumps({"brief": "x", "github": g}),
        st.dictionaries(
            st.sampled_from(["repo", "issue", "author", "base", "ci"]), json_values, max_size=5
        ),
    ),
    st.just("x" * 5000),
)
contents = st.one_of(
    st.binary(max_size=200),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.sampled_from(
        [
            FIX.complete,
            FIX.too_few,
            FIX.bad_piva,
            FIX.not_json,
            b'{"pr": "https://github.com/a/b/pull/1"}',
        ]
    ),
    mutated(FIX.complete),
)


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_job_descriptions(size: Size, measured: Any) -> None:
    """Random job descriptions (SchemaEval, GitHubEval, neither) behind a verdict that passes."""

    @fuzz_settings(size)
    @given(description=descriptions)
    def example(description: str) -> None:
        def run() -> None:
            # the devnet stand-in would fetch a remote $ref (no offline registry): not its test
            body, facts = verdict_for(description, FIX.complete, evaluate="http" not in description)
            doc, failures = run_checks(body, facts, CheckConfig(), FIX.complete)
            # the digest matches; only the evaluator's kind may disagree with the description
            assert all(f.pointer == "/evaluator" for f in doc.failures), doc.failures
            assert_coded(failures)
            if failures:
                rejected(size.name, "job_description")

        measured(size.name, "job_description", run)

    example()


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_deliverables(size: Size, measured: Any) -> None:
    """Random deliverable contents against the real SchemaEval job: a coded result every time."""

    @fuzz_settings(size)
    @given(content=contents)
    def example(content: bytes) -> None:
        def run() -> None:
            body, facts = verdict_for(FIX.description, content)
            doc, failures = run_checks(body, facts, CheckConfig(), content)
            assert doc.passed, doc.failures
            assert_coded(failures)
            _, wrong = run_checks(body, facts, CheckConfig(), content + b" ")
            assert_coded(wrong)
            if failures:
                rejected(size.name, "deliverable")

        measured(size.name, "deliverable", run)

    example()


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    box = Sandbox(timeout=SANDBOX_SECONDS)
    yield box
    box.close()


# below the hypothesis deadline, so a stopped re-run is an outcome, not a hang
SANDBOX_SECONDS = 1.5
EVIL_SCHEMAS = [
    {"type": "string", "pattern": "^(a+)+$"},
    {"type": "string", "pattern": "^(a|aa)*c$"},
    {"type": "array", "items": {"type": "string", "pattern": "(x+x+)+y"}},
]


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_schemas_in_the_sandbox(size: Size, measured: Any, sandbox: Sandbox) -> None:
    """Random and hostile JSON Schemas re-run where the daemon re-runs them: a killable worker."""

    @fuzz_settings(size)
    @given(
        schema=st.integers(0, 49).flatmap(
            # one in fifty is a known catastrophic pattern: each costs a worker restart
            lambda n: st.sampled_from(EVIL_SCHEMAS) if n == 0 else random_schemas
        ),
        content=contents | st.sampled_from([b'"' + b"a" * 40 + b'!"', b'["' + b"x" * 40 + b'"]']),
    )
    def example(schema: Any, content: bytes) -> None:
        def run() -> None:
            description = json.dumps({"brief": "fuzz", "schema": schema})
            body, facts = verdict_for(description, content, evaluate=False)
            doc, _ = run_checks(body, facts, CheckConfig(), None)  # document steps only
            assert doc.passed and doc.document is not None
            try:
                failures = sandbox.run(
                    check_reexecution, doc.document, facts, CheckConfig(), content
                )
            except SandboxTimeout:
                rejected(size.name, "schema_timeout")  # stopped, as the daemon would
                return
            assert_coded(failures)
            if failures:
                rejected(size.name, "schema")

        measured(size.name, "schema", run)

    example()


def test_a_catastrophic_pattern_is_stopped_by_the_sandbox(sandbox: Sandbox) -> None:
    """The classic ReDoS schema does not hang the re-run: the worker is killed in time."""
    description = json.dumps({"brief": "x", "schema": EVIL_SCHEMAS[0]})
    content = b'"' + b"a" * 40 + b'!"'
    body, facts = verdict_for(description, content, evaluate=False)
    doc, _ = run_checks(body, facts, CheckConfig(), None)
    assert doc.document is not None
    quick = Sandbox(timeout=1.0)
    try:
        with pytest.raises(SandboxTimeout):
            quick.run(check_reexecution, doc.document, facts, CheckConfig(), content)
    finally:
        quick.close()


# --------------------------------------------------------------------------- logs

hex_words = st.binary(min_size=32, max_size=32).map(lambda b: "0x" + b.hex())
known_topics = st.sampled_from(sorted({s.topic0 for s in SPECS}))
topic_like = st.one_of(
    hex_words,
    known_topics,
    known_topics.map(str.upper),
    st.binary(max_size=40).map(lambda b: "0x" + b.hex()),
    st.text(max_size=70),
)


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_log_topics_and_data(size: Size, measured: Any) -> None:
    """Right and wrong topic counts, lengths and data sizes: an event or a raw unknown, no crash."""

    @fuzz_settings(size)
    @given(
        topic0=known_topics | topic_like,
        rest=st.lists(hex_words | topic_like, max_size=4),
        data=st.binary(max_size=200) | st.integers(0, 8).map(lambda n: b"\x00" * (32 * n)),
        protocol=st.sampled_from(list(Protocol)),
    )
    def example(topic0: str, rest: list[str], data: bytes, protocol: Protocol) -> None:
        def run() -> None:
            log = Log("0x" + "cd" * 20, (topic0, *rest), data, 1, "0x" + "00" * 32,
                      "0x" + "11" * 32, 0, 0)  # fmt: skip
            event = decode_log(log, protocol, 1)
            assert event.log is log  # kept, never dropped
            if event.name is None:
                rejected(size.name, "log")
                assert event.subject is None
            else:
                spec = next(s for s in SPECS if s.topic0 == topic0.lower())
                assert len(log.topics) == spec.n_topics
                assert len(data) >= spec.data_len if spec.dynamic else len(data) == spec.data_len
                assert (event.subject is None) == (spec.subject_arg == "")

        measured(size.name, "log", run)

    example()


# --------------------------------------------------------------------------- config files

SECTIONS = {"chain": ["chain_id", "rpc_urls", "rpc_names", "confirmations", "finality",
                      "poll_interval", "window", "max_range", "min_range", "request_timeout"],
            "database": ["path"], "keeper": ["enabled", "dry_run", "private_key_env",
                                             "keystore", "max_fee_gwei", "min_balance_wei",
                                             "shard", "shards", "gas_margin"],
            "api": ["listen", "enabled"], "log": ["format", "level"],
            "verdicts": ["sources", "retry_horizon", "evaluators"]}  # fmt: skip
# TOML allows any key; a newline or colon in one would only confuse this test's line check
KEY_TEXT = st.text(st.characters(exclude_characters="\n\r:"), max_size=6)
SECRET_URL = "http://user:hunter2pw@rpc.example:BADPORT/v3/KEYabc123"
toml_values = st.recursive(
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(["0x" + "ab" * 20, "http://127.0.0.1:8545", SECRET_URL, "tag", "json"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEY_TEXT, inner, max_size=3),
    max_leaves=10,
)


@st.composite
def config_trees(draw: st.DrawFn) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for section, keys in SECTIONS.items():
        if draw(st.booleans()):
            names = st.sampled_from(keys) | st.text(string.ascii_lowercase + "_", min_size=1)
            tree[section] = draw(st.dictionaries(names, toml_values, max_size=6))
    chain = tree.get("chain")
    if isinstance(chain, dict) and chain.get("rpc_urls") == SECRET_URL:
        # a bare string is echoed unredacted: test_a_secret_rpc_url_given_as_a_string_is_redacted
        chain["rpc_urls"] = [SECRET_URL]
    if draw(st.booleans()):
        fields = st.sampled_from(["name", "protocol", "address", "start_block", "bogus"])
        values = toml_values | st.sampled_from(["erc8183", "taskmarket", "c1"])
        tree["contracts"] = draw(st.lists(st.dictionaries(fields, values, max_size=5), max_size=3))
    if draw(st.booleans()):
        # plain names: a raw newline in a key would split the one-line-per-problem message
        key_chars = string.ascii_letters + string.digits + "_-.$@"
        tree[draw(st.text(key_chars, min_size=1, max_size=8))] = draw(toml_values)
    return tree


env_overrides = st.dictionaries(
    st.sampled_from(["KEEPER_CHAIN__WINDOW", "KEEPER_CHAIN__RPC_URLS", "KEEPER_KEEPER__SHARDS",
                     "KEEPER_CONTRACTS__0__ADDRESS", "KEEPER_CONTRACTS__7__NAME", "KEEPER_NOPE__X",
                     "KEEPER_VERDICTS__SOURCES", "KEEPER_CHAIN__POLL_INTERVAL"]),
    st.text(max_size=20) | st.sampled_from(["[1,", "12", "-1", "nan", SECRET_URL, "[]"]),
    max_size=3,
)  # fmt: skip
# a path, or nothing for a key that is the empty string (TOML allows ``"" = 1``)
_PROBLEM_LINE = re.compile(r"^  (?P<path>[^\s:][^:]*?)?: \S")


def check_config_error(exc: ConfigError) -> None:
    """One line per problem, each starting with the key path it is about; no secret shown."""
    text = str(exc)
    lines = text.split("\n")
    assert lines[0].startswith("invalid configuration") or "TOML" in lines[0], text
    for line in lines[1:]:
        match = _PROBLEM_LINE.match(line)
        assert match, line
        if "rpc_urls" in match["path"].lower():  # where a value is known to be a secret URL
            assert "hunter2pw" not in line and "KEYabc123" not in line, line


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_config_trees_and_environment(size: Size, measured: Any) -> None:
    """Random TOML trees plus KEEPER_* overrides: a Config, or a ConfigError naming each key."""

    @fuzz_settings(size)
    @given(tree=config_trees(), env=env_overrides)
    def example(tree: dict[str, Any], env: dict[str, str]) -> None:
        def run() -> None:
            try:
                parse_config(tree, env)
            except ConfigError as exc:
                check_config_error(exc)
                rejected(size.name, "config")

        measured(size.name, "config", run)

    example()


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_config_files(size: Size, measured: Any, tmp_path: Path) -> None:
    """Random and damaged file bytes: load_config raises ConfigError, nothing else."""
    valid = (
        b'[chain]\nchain_id = 1\nrpc_urls = ["http://127.0.0.1:8545"]\n'
        b'[[contracts]]\nname = "c"\nprotocol = "erc8183"\naddress = "0x' + b"ab" * 20 + b'"\n'
    )

    @fuzz_settings(size)
    @given(
        # non-UTF-8 files: see test_a_config_file_that_is_not_utf8_is_a_config_error
        raw=(st.binary(max_size=300) | mutated(valid)).map(
            lambda b: b.decode(errors="replace").encode()
        )
    )
    def example(raw: bytes) -> None:
        def run() -> None:
            path = tmp_path / "fuzz.toml"
            path.write_bytes(raw)
            try:
                load_config(path, env={})
            except ConfigError as exc:
                rejected(size.name, "config_file")
                try:
                    tomllib.loads(raw.decode())
                except (tomllib.TOMLDecodeError, UnicodeDecodeError):
                    assert str(path) in str(exc)  # a parse error names the file
                    return
                check_config_error(exc)

        measured(size.name, "config_file", run)

    example()


# --------------------------------------------------------------------------- API query parameters

CONTRACTS = {"commerce": COMMERCE}
query_values = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["commerce", COMMERCE, "funded", "open,funded", "", "0", "501", "50",
                     "eyJrIjoiam9icyJ9", "0x" + "ab" * 20, "-1", "\uff11\uff12", "%00"]),
)  # fmt: skip
query_names = st.sampled_from(
    ["contract", "status", "limit", "cursor", "client", "provider", "evaluator", "requester",
     "worker", "bogus"]
) | st.text(max_size=8)  # fmt: skip


@pytest.mark.parametrize("size", SIZES)
def test_fuzz_api_list_parameters(size: Size, measured: Any) -> None:
    """Random list queries: a ListQuery, or a BadParam naming a parameter the client sent."""

    @fuzz_settings(size)
    @given(
        kind=st.sampled_from(["jobs", "tasks"]),
        query=st.dictionaries(
            query_names, st.lists(query_values, min_size=1, max_size=2), max_size=4
        ),
    )
    def example(kind: Any, query: dict[str, list[str]]) -> None:
        def run() -> None:
            try:
                parsed = parse_list_query(kind, query, CONTRACTS)
            except BadParam as exc:
                assert exc.param in query, (exc.param, query)
                assert exc.message
                rejected(size.name, "api_params")
                return
            assert 1 <= parsed.limit <= 500

        measured(size.name, "api_params", run)

    example()


def test_wrong_content_never_verifies_a_schema_rejection() -> None:
    """A 'too few items' rejection cannot be confirmed with bytes that are not the deliverable."""
    deliverable = keccak_hex(FIX.too_few)
    verdict = schemaeval_verdict(7, FIX.description, FIX.too_few, deliverable)
    assert verdict["esito"] == "reject"
    facts = VerdictFacts(7, "JobRejected", verdict_digest(verdict), deliverable, EVALUATOR,
                         FIX.description)  # fmt: skip
    body = json.dumps(verdict).encode()
    # the source serves the complete (valid) deliverable instead of the submitted one
    _, failures = run_checks(body, facts, CheckConfig(), FIX.complete)
    assert failures, "verified on content that is not the on-chain deliverable"


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    """A Latin-1 config file is refused as a configuration error naming the file."""
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"[chain]\nchain_id = 1\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"latin1\.toml"):
        load_config(path, env={})


@pytest.mark.parametrize(
    "given",
    [SECRET_URL, [[SECRET_URL]], [{"url": SECRET_URL}]],
    ids=["a-string", "a-nested-list", "a-table"],  # the nested list: found by the long fuzz run
)
def test_a_secret_rpc_url_given_in_the_wrong_shape_is_redacted(given: object) -> None:
    """The error for rpc_urls of the wrong shape does not repeat the credentials."""
    tree = {"chain": {"chain_id": 1, "rpc_urls": given}}
    with pytest.raises(ConfigError) as info:
        parse_config(tree, {})
    assert "chain.rpc_urls" in str(info.value)
    assert "hunter2pw" not in str(info.value) and "KEYabc123" not in str(info.value)
