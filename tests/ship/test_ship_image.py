"""The container image, built with podman and run the way an operator runs it.

`scripts/podman-image build` builds the Dockerfile on a local Debian bookworm base
(no registry is reachable here) with this machine's pip settings as build secrets.
Both images are tagged by a hash of their inputs, so only the first run after a
change pays for debootstrap and the build (minutes); later runs find the image.

The container runs `keeper run` (the image's default command) on the host network
against anvil behind the fault-injecting proxy: as uid 10001, its config mounted
read-only, its database on a named volume. It refunds an expired job for real; a
second refund's reply is held by the proxy, and `podman stop` (SIGTERM) must end
the container with exit code 0 inside the grace period, the intent persisted; a
new container on the same volume then confirms that very transaction.

No engine, or one that cannot start a container, fails here with the engine's own
words: the image is what operators run, so it is never skipped.
"""

from __future__ import annotations

import configparser
import importlib.machinery
import importlib.util
import itertools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from act.keeper_harness import KEEPER_KEYS, Escrows, address_of
from ship_support import (
    EXPIRED,
    KEY_ENV,
    ROOT,
    clean_env,
    dockerfile_healthcheck,
    free_port,
    http_get,
    keeper_toml,
    wait_for,
)
from support.rpc_proxy import RpcProxy

from keeper.devnet.anvil import AnvilProcess
from keeper.devnet.deploy import deploy_all

SCRIPT = ROOT / "scripts" / "podman-image"
KEEPER_UID = 10001
GRACE_SECONDS = 10  # `podman stop`'s default, like docker's

# a cold run debootstraps the base and builds the image (minutes); warm, seconds
pytestmark = pytest.mark.timeout(1200)


def podman(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("podman")
    if exe is None:
        pytest.fail("podman is not installed: `make deps-debian` installs podman and runc")
    environment = clean_env(**env)
    environment.setdefault("CONTAINERS_CONF", str(ROOT / "scripts" / "podman-containers.conf"))
    return subprocess.run(
        [exe, *args], capture_output=True, text=True, timeout=timeout, env=environment
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a podman call that must succeed; else fail with the engine's own reason."""
    if result.returncode != 0:
        pytest.fail(f"{' '.join(result.args[:3])} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


@pytest.fixture(scope="module")
def image() -> str:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: `make deps-debian` installs podman and runc")
    built = subprocess.run(
        [sys.executable, str(SCRIPT), "build"],
        capture_output=True,
        text=True,
        timeout=1100,
        env=clean_env(),
    )
    if built.returncode != 0:
        pytest.fail(f"the image did not build:\n{built.stderr[-8000:]}")
    return built.stdout.split()[-1]


def machine_pip_locations() -> list[str]:
    """Every value of this machine's pip configuration that names something local."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
    )
    values = [line.partition("=")[2].strip("'\"") for line in listed.stdout.splitlines()]
    return [word for value in values for word in value.split() if "/" in word]


PROBE = """
import importlib.util, json, os, shutil, keeper
from keeper.rpc.logs_reply import NATIVE
found = []
for top, dirs, files in os.walk("/"):
    if top in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for name in dirs + files:
        if name in ("pyproject.toml", "requirements.lock", "Dockerfile", ".git", "pip.conf"):
            found.append(os.path.join(top, name))
print(json.dumps({
    "uid": os.getuid(),
    "keeper": keeper.__file__,
    "tools": [t for t in ("gcc", "cc", "c++", "make", "ld", "as", "git", "curl", "wget")
              if shutil.which(t)],
    "modules": [m for m in ("setuptools", "wheel", "pytest", "mypy")
                if importlib.util.find_spec(m)],
    "dirs": [d for d in ("/src", "/wheels", "/opt/build", "/run/secrets") if os.path.exists(d)],
    "found": found,
    "native": NATIVE,
}))
"""


class TestImageContents:
    def test_only_the_runtime_ships(self, image: str) -> None:
        """No source tree, build venv, wheels, compiler or build backend is in the image; the
        getLogs scanner its build stage compiled is."""
        out = ok(
            podman("run", "--rm", "--network", "none", "--entrypoint", "python", image, "-c", PROBE)
        )
        found = json.loads(out)
        assert found["uid"] == KEEPER_UID
        assert found["keeper"].startswith("/opt/keeper/lib/python3.11/site-packages/keeper/")
        assert found["tools"] == []
        assert found["modules"] == []
        assert found["dirs"] == []
        assert found["found"] == []
        assert found["native"] is True

    def test_no_build_setting_is_baked_in(self, image: str) -> None:
        """The machine's pip settings (its index and CA bundle, without which nothing installs
        here) reached the build as secrets: none of them is in the image's history or config."""
        history = ok(podman("history", "--no-trunc", "--format", "{{.CreatedBy}}", image))
        config = ok(podman("image", "inspect", image))
        locations = machine_pip_locations()
        for location in locations:
            assert location not in history and location not in config, location
        env = json.loads(config)[0]["Config"]["Env"]
        assert not [e for e in env if e.startswith("PIP_")], env

    def test_image_config_is_the_dockerfiles(self, image: str) -> None:
        """Health check, stop signal, user and entry point survive the build (docker format)."""
        (config,) = json.loads(ok(podman("image", "inspect", image)))
        cfg = config["Config"]
        assert cfg["User"] == f"{KEEPER_UID}:{KEEPER_UID}"
        assert cfg["Entrypoint"] == ["keeper"]
        assert cfg["Cmd"] == ["run", "--config", "/etc/keeper/keeper.toml"]
        assert cfg["StopSignal"] in ("SIGTERM", "15")
        # podman reports a docker-format image's health check beside its config
        health = config["Healthcheck"]
        assert health["Test"] == ["CMD", "python", "-c", dockerfile_healthcheck()]
        assert health["Retries"] == 3
        assert "/data" in cfg["Volumes"]


def rows(database: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        return [tuple(r) for r in conn.execute(sql).fetchall()]
    finally:
        conn.close()


@pytest.fixture
def escrows() -> Iterator[Escrows]:
    with AnvilProcess() as node:
        yield Escrows(node.url, deploy_all(node.url))


@pytest.fixture
def volume() -> Iterator[str]:
    name = f"keeper-test-{uuid.uuid4().hex[:12]}"
    ok(podman("volume", "create", name))
    yield name
    podman("volume", "rm", "--force", name)


class Container:
    """One `podman run -d` of the image, removed at the end whatever happened."""

    def __init__(self, image: str, name: str, *args: str, **env: str) -> None:
        self.name = name
        ok(podman("run", "--detach", "--name", name, *args, image, **env))

    def inspect(self, fmt: str) -> str:
        return ok(podman("inspect", "--format", fmt, self.name)).strip()

    def logs(self) -> str:
        result = podman("logs", self.name)
        return (result.stdout + result.stderr)[-4000:]

    def running(self) -> bool:
        assert self.inspect("{{.State.Running}}") == "true", self.logs()
        return True

    def remove(self) -> None:
        podman("rm", "--force", "--time", "0", self.name)


def status_of(pid: str, field: str) -> list[str]:
    """A field of a host process's /proc status (rootful podman: no user namespace)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return line.split()[1:]
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def job_intents(base: str, contract: str, job_id: str) -> list[dict[str, Any]]:
    status, body = http_get(f"{base}/v1/jobs/{contract}/{job_id}")
    return list(json.loads(body)["intents"]) if status == 200 else []


def test_operator_run_refunds_reports_healthy_and_stops_cleanly(
    image: str, escrows: Escrows, volume: str, tmp_path: Path
) -> None:
    """`keeper run` in the container: healthy, a refund confirmed, SIGTERM mid-send exits 0,
    and a new container on the same volume confirms that send instead of making another."""
    commerce = escrows.d.commerce
    expiry = escrows.now() + 100
    (first_job,) = escrows.funded_jobs(1, expiry)
    escrows.control.mine_at(expiry)  # refundable by anyone now
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with RpcProxy(escrows.url) as proxy:
        config = keeper_toml(
            tmp_path / "keeper.toml",
            proxy.url,
            escrows.d.commerce,
            escrows.d.start_block,
            "/data/keeper.db",
        )  # the database on the data volume

        def start() -> Container:
            return Container(
                image,
                f"keeper-test-{uuid.uuid4().hex[:12]}",
                "--network=host",
                f"--user={KEEPER_UID}:{KEEPER_UID}",
                f"--volume={config}:/etc/keeper/keeper.toml:ro",
                f"--volume={volume}:/data",
                # the listen override the health check follows (9464 may be taken here)
                f"--env=KEEPER_API__LISTEN=127.0.0.1:{port}",
                f"--env={KEY_ENV}",  # the value comes from podman's environment, not argv
                **{KEY_ENV: KEEPER_KEYS[0]},
            )

        container = start()
        try:
            wait_for(
                lambda: container.running() and http_get(f"{base}/healthz")[0] == 200,
                90,
                "the container's /healthz",
            )
            pid = container.inspect("{{.State.Pid}}")
            assert status_of(pid, "Uid")[0] == str(KEEPER_UID)
            # keeper is PID 1 itself: no shell in between to swallow SIGTERM
            assert status_of(pid, "NSpid")[-1] == "1"
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            assert argv[1:4] == [b"/opt/keeper/bin/keeper", b"run", b"--config"], argv
            health = podman("healthcheck", "run", container.name)
            assert health.returncode == 0, health.stdout + health.stderr
            assert container.inspect("{{.State.Health.Status}}") == "healthy"
            write = podman(  # read-only even for root in the container, not just by mode
                "exec",
                "--user=0",
                container.name,
                "python",
                "-c",
                "open('/etc/keeper/keeper.toml', 'a')",
            )
            assert write.returncode != 0 and "Read-only file system" in write.stderr

            def refunded() -> bool:
                container.running()
                escrows.control.mine()  # the confirmation block (keeper.confirmations = 1)
                intents = job_intents(base, commerce, first_job)
                return [(i["status"], i["outcome"]) for i in intents] == [("done", "confirmed")]

            wait_for(refunded, 90, "the containerised keeper to confirm the refund", interval=0.5)
            [intent] = job_intents(base, commerce, first_job)
            receipt = escrows.control.call("eth_getTransactionReceipt", intent["tx_hash"])
            assert receipt["status"] == "0x1" and receipt["to"] == commerce
            assert receipt["from"] == address_of(KEEPER_KEYS[0])
            [job] = escrows.jobs([first_job])
            assert int(job.status) == EXPIRED

            # a second refund whose reply never comes: the send is in flight at SIGTERM
            proxy.rules.on("eth_sendRawTransaction", drop_reply=1, drop_mode="timeout", delay=120)
            sent_before = len(proxy.requests_for("eth_sendRawTransaction"))
            expiry = escrows.now() + 100
            (second_job,) = escrows.funded_jobs(1, expiry)
            escrows.control.mine_at(expiry)
            wait_for(
                lambda: (
                    container.running()
                    and len(proxy.requests_for("eth_sendRawTransaction")) > sent_before
                ),
                60,
                "the keeper to broadcast the second refund",
            )
            [signed_raw] = proxy.requests_for("eth_sendRawTransaction")[sent_before]
            stop = podman("stop", "--time", str(GRACE_SECONDS), container.name, timeout=60)
            assert stop.returncode == 0, stop.stderr
            logs = container.logs()
            # within the grace period: past it podman sends SIGKILL and the code is 137
            # (podman's own time around the stop is not the daemon's, so it is not timed)
            assert container.inspect("{{.State.ExitCode}}") == "0", logs
            assert "daemon_stopped" in logs
        finally:
            container.remove()

        database = Path(
            ok(podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume)).strip()
        )
        database /= "keeper.db"
        assert os.stat(database).st_uid == KEEPER_UID  # written by the container's user
        assert rows(database, "PRAGMA integrity_check") == [("ok",)]
        intents = rows(
            database,
            "SELECT subject, status, tx_hash FROM keeper_intents WHERE action = 'claimRefund' "
            "ORDER BY id",
        )
        assert [(s, st) for s, st, _ in intents] == [(first_job, "done"), (second_job, "inflight")]
        [(raw, tx_hash)] = rows(
            database,
            "SELECT a.raw_tx, a.tx_hash FROM keeper_attempts a "
            "JOIN keeper_attempt_intents ai ON ai.attempt_id = a.id "
            f"JOIN keeper_intents i ON i.id = ai.intent_id WHERE i.subject = '{second_job}'",
        )
        assert raw == signed_raw  # recorded before it was broadcast, kept through the stop

        # a new container on the same volume (an upgrade, a reschedule) finishes that intent
        proxy.rules.clear()
        sent_before = len(proxy.requests_for("eth_sendRawTransaction"))
        container = start()
        try:

            def second_refunded() -> bool:
                container.running()
                escrows.control.mine()
                intents = job_intents(base, commerce, second_job)
                return [(i["status"], i["outcome"]) for i in intents] == [("done", "confirmed")]

            wait_for(second_refunded, 90, "the new container to confirm the held refund")
            [intent] = job_intents(base, commerce, second_job)
            assert intent["tx_hash"] == tx_hash  # the recorded transaction, not a new one
            stop = podman("stop", "--time", str(GRACE_SECONDS), container.name, timeout=60)
            assert stop.returncode == 0, stop.stderr
            assert container.inspect("{{.State.ExitCode}}") == "0", container.logs()
        finally:
            container.remove()
        resent = proxy.requests_for("eth_sendRawTransaction")[sent_before:]
        assert all(params == [signed_raw] for params in resent)  # the same bytes, if any
    [job] = escrows.jobs([second_job])
    assert int(job.status) == EXPIRED
    keeper = address_of(KEEPER_KEYS[0])
    nonce = escrows.control.call("eth_getTransactionCount", keeper, "latest")
    assert int(nonce, 16) == 2  # two refunds, two transactions ever mined from the keeper


def load_script() -> Any:
    """scripts/podman-image as a module (it has no .py suffix: it is a command)."""
    loader = importlib.machinery.SourceFileLoader("podman_image", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class TestBuildSettings:
    """The parts of scripts/podman-image that read this machine's apt and pip settings."""

    def test_mirror_is_the_one_apt_uses_for_the_suite(self, tmp_path: Path) -> None:
        """deb822 and one-line sources are read; -security and disabled entries are not it."""
        script = load_script()
        (tmp_path / "sources.list.d").mkdir()
        (tmp_path / "sources.list.d" / "debian.sources").write_text(
            "Types: deb\nURIs: http://security.example/debian-security\n"
            "Suites: bookworm-security\nComponents: main\n\n"
            "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n"
            "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n\n"
            "# a comment\nTypes: deb\nURIs: http://mirror.example/debian/\n"
            "Suites: bookworm bookworm-updates\nComponents: main\n"
        )
        assert script.debian_mirror(tmp_path) == "http://mirror.example/debian"
        (tmp_path / "sources.list").write_text(
            "# deb http://commented.example/debian bookworm main\n"
            "deb [signed-by=/k.gpg] http://list.example/debian bookworm main\n"
        )
        assert script.debian_mirror(tmp_path) == "http://list.example/debian"
        assert script.debian_mirror(tmp_path / "none") == script.FALLBACK_MIRROR

    def test_pip_settings_become_secrets_and_loopback_urls(self, tmp_path: Path) -> None:
        """The CA bundle is a secret; local indexes, links and files are served over HTTP."""
        script = load_script()
        ca = tmp_path / "ca.pem"
        ca.write_text("-----BEGIN CERTIFICATE-----\n")
        (tmp_path / "pypi/simple/demo").mkdir(parents=True)
        (tmp_path / "pypi/files").mkdir()
        (tmp_path / "pypi/files/demo-1.0-py3-none-any.whl").write_bytes(b"wheel bytes")
        (tmp_path / "pypi/simple/demo/index.html").write_text(
            '<a href="../../files/demo-1.0-py3-none-any.whl">demo</a>'
        )
        (tmp_path / "wheels").mkdir()
        (tmp_path / "wheels/other-2.0-py3-none-any.whl").write_bytes(b"other")
        (tmp_path / "constraints.txt").write_text("torch<=2\n")
        settings = {
            "global": {
                "cert": str(ca),
                "extra-index-url": f"https://index.example/simple file://{tmp_path}/pypi/simple",
                "find-links": str(tmp_path / "wheels"),
                "constraint": str(tmp_path / "constraints.txt"),
                "timeout": "60",
            }
        }
        work = tmp_path / "work"
        work.mkdir()
        with script.LocalLocations(work) as local:
            options = script.pip_build_options(settings, work, local)
            secrets = dict(
                value.removeprefix("id=").split(",src=")
                for flag, value in itertools.pairwise(options)
                if flag == "--secret"
            )
            assert secrets == {"pip-cert": str(ca), "pip.conf": str(work / "pip.conf")}
            assert [o for o in options if o.startswith("--volume")] == []
            conf = configparser.ConfigParser()
            conf.read(secrets["pip.conf"])
            got = dict(conf["global"])
            assert str(tmp_path) not in "".join(got.values())
            assert got["cert"] == "/run/secrets/pip-cert"
            assert got["timeout"] == "60"
            remote, served = got["extra-index-url"].split()
            assert remote == "https://index.example/simple"
            assert served.startswith(local.base) and served.endswith("/simple/")
            page = http_get(served + "demo/")
            assert page[0] == 200 and "../../files/demo-1.0" in page[1]
            wheel = served + "demo/../../files/demo-1.0-py3-none-any.whl"
            assert http_get(wheel) == (200, "wheel bytes")
            listing = http_get(got["find-links"])
            assert listing[0] == 200 and "other-2.0-py3-none-any.whl" in listing[1]
            assert http_get(got["constraint"]) == (200, "torch<=2\n")
