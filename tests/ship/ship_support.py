"""Helpers for the ship tests: the Dockerfile's install steps outside a container, ports, HTTP."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

# the tests of this folder take it from here, with the rest of their helpers
from keeper.devnet.anvil import free_port as free_port

ROOT = Path(__file__).resolve().parents[2]

# The build stage copies exactly these into /src before building the wheel.
SOURCE_ITEMS = ("pyproject.toml", "README.md", "keeper")

# the environment variable the shipped keeper's signing key comes from
KEY_ENV = "SHIP_KEEPER_KEY"
EXPIRED = 5  # JobStatus.Expired


def keeper_toml(path: Path, rpc_url: str, commerce: str, start_block: int, database: str) -> Path:
    """An operator's keeper.toml for one ERC-8183 escrow, the key from ``KEY_ENV``; the
    API on a free port. The reply timeout outlasts any reply a test holds back, so only
    a signal can end that wait."""
    path.write_text(
        f"""[chain]
chain_id = 31337
rpc_urls = ["{rpc_url}"]
finality = "confirmations"
confirmations = 0
poll_interval = 0.2
request_timeout = 60

[database]
path = "{database}"

[[contracts]]
name = "commerce"
protocol = "erc8183"
address = "{commerce}"
start_block = {start_block}

[keeper]
enabled = true
private_key_env = "{KEY_ENV}"
confirmations = 1
min_balance_wei = 1000

[api]
listen = "127.0.0.1:{free_port()}"
"""
    )
    path.chmod(0o644)
    return path


@dataclass(frozen=True)
class Installed:
    """A venv built the way the image's /opt/keeper is: the lock, then the project wheel."""

    venv: Path
    wheel: Path

    @property
    def keeper(self) -> str:
        return str(self.venv / "bin" / "keeper")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed:\n{result.stdout}\n{result.stderr}")


def pip_for(venv: Path) -> list[str]:
    """Our own pip driving another venv's interpreter (skips ensurepip: seconds per venv)."""
    return [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]


def _venv(path: Path, lock: Path, wheelhouse: Path) -> Path:
    """A fresh venv holding exactly one lock file's requirements, hashes checked.

    Files come from ``wheelhouse`` when it has them all, else the index fills it
    first: the same hash-checked, resolution-free install as the image, without
    fetching ~60 files from the network on every run.
    """
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)])
    pip = pip_for(path)
    hashed = ["--require-hashes", "--no-deps", "-r", str(lock)]
    offline = [*pip, "install", "-q", "--no-compile", "--no-index", "--find-links", str(wheelhouse)]
    try:
        _run([*offline, *hashed])
    except RuntimeError:
        _run([*pip, "download", "-q", "-d", str(wheelhouse), *hashed])
        _run([*offline, *hashed])
    return path


def install_like_the_dockerfile(work: Path, wheelhouse: Path) -> Installed:
    """The build stage's steps: runtime and build venvs from their locks, wheel, install.

    The two venvs are independent, so they are made in parallel; ``--no-compile``
    only skips writing .pyc files, which the image would otherwise carry.
    """
    src = work / "src"
    src.mkdir(parents=True)
    for item in SOURCE_ITEMS:
        origin = ROOT / item
        if origin.is_dir():
            shutil.copytree(origin, src / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(origin, src / item)
    with ThreadPoolExecutor(2) as pool:
        runtime = pool.submit(_venv, work / "keeper", ROOT / "requirements.lock", wheelhouse)
        build = pool.submit(_venv, work / "build", ROOT / "requirements-build.lock", wheelhouse)
        venv, builder = runtime.result(), build.result()
    wheels = work / "wheels"
    builder_pip = pip_for(builder)
    _run(
        [
            *builder_pip,
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(src),
        ]
    )
    (wheel,) = wheels.glob("escrow_keeper-*.whl")
    venv_pip = pip_for(venv)
    _run([*venv_pip, "install", "-q", "--no-compile", "--no-deps", "--no-index", str(wheel)])
    return Installed(venv=venv, wheel=wheel)


def clean_env(**extra: str) -> dict[str, str]:
    """The environment minus any KEEPER_* override a developer may have exported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEPER_")}
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def http_get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    """(status, body) of a GET; (0, reason) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode()
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(exc)


def metric_total(text: str, name: str) -> float:
    """Sum of every sample of one metric in a Prometheus text exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def wait_for(
    predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.2
) -> None:
    """Poll ``predicate()`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def dockerfile_healthcheck() -> str:
    """The Python one-liner of the Dockerfile's HEALTHCHECK, as the container runs it."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK .*?CMD (\[.*\])\s*$", text, re.M)
    assert match is not None, "no exec-form HEALTHCHECK in the Dockerfile"
    argv = json.loads(match.group(1))
    assert argv[:2] == ["python", "-c"], argv
    return str(argv[2])
