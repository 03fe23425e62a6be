"""The image's install path, run without a container engine.

A fresh venv gets requirements.lock (hashes checked), a second one the pinned
build backend, the project is built into a wheel from a copy of exactly what
the Dockerfile copies, and the wheel is installed with nothing resolved. The
installed console script then runs the devnet and the daemon, so a missing
dependency, package-data file or entry point fails here instead of in an
operator's `docker build`. The lock's files are kept in pytest's cache between
runs (still hash-checked on every install): about 35 s when cached, a minute when not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from ship_support import (
    ROOT,
    Installed,
    clean_env,
    dockerfile_healthcheck,
    free_port,
    http_get,
    install_like_the_dockerfile,
    metric_total,
    wait_for,
)

from keeper.devnet.anvil import AnvilProcess


@pytest.fixture(scope="module")
def installed(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Installed:
    wheelhouse = request.config.cache.mkdir("ship-wheelhouse")
    return install_like_the_dockerfile(tmp_path_factory.mktemp("image"), wheelhouse)


def run(
    installed: Installed, *args: str, cwd: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [installed.keeper, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=clean_env(**env),
    )


class TestInstalledPackage:
    def test_version_is_the_project_version(self, installed: Installed, tmp_path: Path) -> None:
        """`keeper --version` of the installed script prints pyproject's version."""
        version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
        result = run(installed, "--version", cwd=tmp_path)
        assert (result.returncode, result.stdout.strip()) == (0, f"keeper {version}")

    def test_code_and_package_data_come_from_the_wheel(
        self, installed: Installed, tmp_path: Path
    ) -> None:
        """The venv imports keeper from its own site-packages, with every data file present."""
        probe = (
            "import json, keeper, pathlib; p = pathlib.Path(keeper.__file__).parent; "
            "print(json.dumps({'file': str(p), "
            "'artifacts': len(list((p / 'devnet' / 'artifacts').glob('*.json'))), "
            "'openapi': json.loads((p / 'api' / 'openapi.json').read_text())['openapi'], "
            "'page': (p / 'api' / 'page.html').stat().st_size, "
            "'typed': (p / 'py.typed').exists()}))"
        )
        result = subprocess.run(
            [installed.python, "-c", probe],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=clean_env(),
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        found = json.loads(result.stdout)
        assert Path(found["file"]).is_relative_to(installed.venv)
        source_artifacts = list((ROOT / "keeper/devnet/artifacts").glob("*.json"))
        assert found["artifacts"] == len(source_artifacts) > 0
        assert found["openapi"].startswith("3.")
        assert found["page"] > 0 and found["typed"]

    def test_config_check_of_the_shipped_example(
        self, installed: Installed, tmp_path: Path
    ) -> None:
        """The example config the image carries passes the installed `keeper config check`."""
        result = run(
            installed,
            "config",
            "check",
            "--config",
            str(ROOT / "config/keeper.example.toml"),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["chain"]["chain_id"] == 84532


@pytest.fixture
def devnet_anvil() -> Iterator[AnvilProcess]:
    with AnvilProcess() as node:
        yield node


class TestInstalledDaemon:
    def test_devnet_and_daemon_run_and_stop_cleanly(
        self, installed: Installed, devnet_anvil: AnvilProcess, tmp_path: Path
    ) -> None:
        """The installed keeper deploys, indexes and serves on the devnet, then stops on SIGTERM."""
        port = free_port()
        workdir = tmp_path / "devnet"
        log = (tmp_path / "devnet.log").open("w")
        proc = subprocess.Popen(
            [installed.keeper, "devnet", "--rpc", devnet_anvil.url, "--workdir", str(workdir)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=clean_env(KEEPER_API__LISTEN=f"127.0.0.1:{port}", KEEPER_LOG__FORMAT="json"),
        )
        base = f"http://127.0.0.1:{port}"
        try:

            def indexed_events() -> bool:
                assert proc.poll() is None, (tmp_path / "devnet.log").read_text()[-3000:]
                status, body = http_get(f"{base}/metrics")
                return status == 200 and metric_total(body, "keeper_events_total") > 0

            wait_for(indexed_events, 90, "the installed daemon to index devnet events")
            assert http_get(f"{base}/healthz")[0] == 200
            probe = subprocess.run(  # the image's HEALTHCHECK, with the installed interpreter
                [installed.python, "-c", dockerfile_healthcheck()],
                env=clean_env(KEEPER_API__LISTEN=f"0.0.0.0:{port}"),
                timeout=30,
            )
            assert probe.returncode == 0
            config = workdir / "keeper.toml"
            check = run(installed, "config", "check", "--config", str(config), cwd=tmp_path)
            assert check.returncode == 0, check.stderr
            assert json.loads(check.stdout)["chain"]["chain_id"] == 31337
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0, (tmp_path / "devnet.log").read_text()[-3000:]
            assert time.monotonic() - started < 10
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
        status = run(installed, "status", "--config", str(config), "--json", cwd=tmp_path)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["events"]["total"] > 0
