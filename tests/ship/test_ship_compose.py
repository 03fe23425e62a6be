"""docker-compose.yml: it parses, everything it mounts exists, and the pieces agree.

No container engine runs here, so the checks are the ones that break a
`docker compose up` silently: a bind mount of a missing file (docker creates
an empty directory in its place), a scrape target no service answers to, a
dashboards path Grafana's provisioning does not read, a devnet anvil started
differently from the one the tests use.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from keeper.cli import build_parser
from keeper.config import load_config
from keeper.daemon import SHUTDOWN_GRACE_SECONDS
from keeper.devnet.anvil import DEV_KEYS

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ("live", "devnet", "postgres")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def services_in(compose: dict[str, Any], profile: str) -> dict[str, dict[str, Any]]:
    """The services `docker compose --profile <profile> up` starts."""
    return {
        name: svc
        for name, svc in compose["services"].items()
        if not svc.get("profiles") or profile in svc["profiles"]
    }


def binds(svc: dict[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of the bind mounts (short syntax, relative host paths)."""
    out = []
    for volume in svc.get("volumes", []):
        host, container = str(volume).split(":")[:2]
        if host.startswith("."):
            out.append((host, container))
    return out


def names_on_network(svc_name: str, svc: dict[str, Any]) -> set[str]:
    networks = svc.get("networks") or {}
    aliases = {a for net in networks.values() if net for a in net.get("aliases", [])}
    return {svc_name, *aliases}


def listen_port(svc: dict[str, Any]) -> str:
    """The API port of a keeper service: its KEEPER_API__LISTEN, else the image's default."""
    env = svc.get("environment") or {}
    default = re.search(r"(?m)^\s*KEEPER_API__LISTEN=([\w.:]+)", (ROOT / "Dockerfile").read_text())
    assert default is not None
    listen = env.get("KEEPER_API__LISTEN", default.group(1)) if isinstance(env, dict) else None
    return str(listen or default.group(1)).rpartition(":")[2]


class TestCompose:
    def test_bind_mounts_exist(self, compose: dict[str, Any]) -> None:
        """Every bind-mounted host path is in the repository, except the operator's own config."""
        operator_files = {"./config/keeper.toml"}  # copied from config/keeper.example.toml
        for name, svc in compose["services"].items():
            for host, _ in binds(svc):
                if host in operator_files:
                    assert (ROOT / "config" / "keeper.example.toml").exists()
                    continue
                assert (ROOT / host).exists(), f"{name}: {host} does not exist"

    def test_keeper_services_use_the_image_built_from_this_dockerfile(
        self, compose: dict[str, Any]
    ) -> None:
        """The daemon services build from ./Dockerfile and allow the daemon's shutdown time."""
        for name in ("keeper", "devnet", "keeper-pg"):
            svc = compose["services"][name]
            assert svc["build"]["context"] == "."
            assert (ROOT / svc["build"]["dockerfile"]).exists()
            grace = float(str(svc["stop_grace_period"]).rstrip("s"))
            assert grace > SHUTDOWN_GRACE_SECONDS

    @pytest.mark.parametrize("profile", PROFILES)
    def test_exactly_one_scrape_target_per_profile(
        self, compose: dict[str, Any], profile: str
    ) -> None:
        """Each profile runs exactly one service answering to the Prometheus target's host."""
        prom = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
        targets = [
            t
            for job in prom["scrape_configs"]
            for static in job.get("static_configs", [])
            for t in static["targets"]
        ]
        running = services_in(compose, profile)
        for target in targets:
            host, _, port = target.rpartition(":")
            answering = [n for n, s in running.items() if host in names_on_network(n, s)]
            assert len(answering) == 1, (profile, target, answering)
            (svc,) = [running[n] for n in answering]
            assert listen_port(svc) == port

    def test_prometheus_gets_its_rules(self, compose: dict[str, Any]) -> None:
        """prometheus.yml's rule files are mounted beside it in the container."""
        prom_svc = compose["services"]["prometheus"]
        mounted = dict((c, h) for h, c in binds(prom_svc))
        config_arg = next(a for a in prom_svc["command"] if a.startswith("--config.file="))
        config_path = config_arg.split("=", 1)[1]
        assert config_path in mounted
        prom = yaml.safe_load((ROOT / mounted[config_path]).read_text())
        config_dir = str(Path(config_path).parent)
        for rule_file in prom["rule_files"]:
            assert f"{config_dir}/{rule_file}" in mounted, rule_file
            assert yaml.safe_load((ROOT / mounted[f"{config_dir}/{rule_file}"]).read_text())

    def test_grafana_provisioning_points_at_mounted_dashboards(
        self, compose: dict[str, Any]
    ) -> None:
        """The provider path is where grafana/dashboards is mounted, and it holds dashboards."""
        grafana = compose["services"]["grafana"]
        mounted = {c: h for h, c in binds(grafana)}
        assert mounted["/etc/grafana/provisioning"] == "./grafana/provisioning"
        provisioning = ROOT / "grafana/provisioning/dashboards"
        providers = [
            p
            for f in provisioning.glob("*.y*ml")
            for p in yaml.safe_load(f.read_text())["providers"]
        ]
        assert providers
        for provider in providers:
            host_dir = ROOT / mounted[provider["options"]["path"]]
            dashboards = list(host_dir.glob("*.json"))
            assert dashboards
            for d in dashboards:
                assert "panels" in json.loads(d.read_text())
        datasources = ROOT / "grafana/provisioning/datasources"
        urls = [
            ds["url"]
            for f in datasources.glob("*.y*ml")
            for ds in yaml.safe_load(f.read_text())["datasources"]
        ]
        assert "http://prometheus:9090" in urls

    def test_devnet_profile_wires_anvil_to_the_traffic_generator(
        self, compose: dict[str, Any]
    ) -> None:
        """The devnet container runs `keeper devnet` against the anvil service, once healthy."""
        devnet = compose["services"]["devnet"]
        anvil = compose["services"]["anvil"]
        assert "devnet" in devnet["profiles"] and "devnet" in anvil["profiles"]
        command = devnet["command"]
        assert command[0] == "devnet"
        rpc = command[command.index("--rpc") + 1]
        assert rpc == "http://anvil:" + anvil["command"][anvil["command"].index("--port") + 1]
        assert devnet["depends_on"]["anvil"]["condition"] == "service_healthy"
        assert anvil["healthcheck"]["test"]
        build_parser().parse_args(command)  # the command line is one the CLI accepts

    def test_devnet_anvil_matches_the_test_harness(self, compose: dict[str, Any]) -> None:
        """anvil gets the funded dev accounts and contract size limit the devnet deploy needs."""
        args = compose["services"]["anvil"]["command"]
        flags = {args[i]: args[i + 1] for i in range(0, len(args) - 1) if args[i].startswith("--")}
        assert flags["--host"] == "0.0.0.0"
        assert flags["--chain-id"] == "31337"
        assert int(flags["--accounts"]) >= len(DEV_KEYS)
        assert int(flags["--code-size-limit"]) >= 100_000

    def test_no_secret_values_in_the_file(self, compose: dict[str, Any]) -> None:
        """Secrets are passed through by name from the shell, never written with a value."""
        for name, svc in compose["services"].items():
            env = svc.get("environment") or []
            items = env.items() if isinstance(env, dict) else [(e, None) for e in env]
            for key, value in items:
                if any(s in key.upper() for s in ("KEY", "PASS", "SECRET", "RPC_URLS")):
                    assert value is None and "=" not in key, (name, key)


def _interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}`` / ``${VAR:?message}`` interpolation from ``env``."""
    return re.sub(r"\$\{(\w+)(?::\?[^}]*)?\}", lambda m: env[m.group(1)], text)


def _env(svc: dict[str, Any]) -> dict[str, str | None]:
    env = svc.get("environment") or {}
    if isinstance(env, dict):
        return {k: None if v is None else str(v) for k, v in env.items()}
    return {e.split("=", 1)[0]: (e.split("=", 1)[1] if "=" in e else None) for e in env}


class TestPostgresProfile:
    def test_a_postgres_15_server_with_a_volume_and_a_healthcheck(
        self, compose: dict[str, Any]
    ) -> None:
        pg = compose["services"]["postgres"]
        assert pg["profiles"] == ["postgres"]
        assert pg["image"] == "postgres:15"
        volume, _, mount = pg["volumes"][0].partition(":")
        assert mount == "/var/lib/postgresql/data" and volume in compose["volumes"]
        test = pg["healthcheck"]["test"]
        env = _env(pg)
        assert test[:2] == ["CMD", "pg_isready"]
        assert test[test.index("-U") + 1] == env["POSTGRES_USER"]
        assert test[test.index("-d") + 1] == env["POSTGRES_DB"]
        assert env["POSTGRES_PASSWORD"] is None  # passed through from the shell by name

    def test_the_daemon_reaches_that_server_with_the_example_config(
        self, compose: dict[str, Any], tmp_path: Path
    ) -> None:
        """keeper-pg waits for the healthy server, and the example config (what
        config/keeper.toml starts as) with the service's environment selects PostgreSQL
        at the server's host, user, database and password, shown without the password."""
        svc, pg = compose["services"]["keeper-pg"], compose["services"]["postgres"]
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert "postgres" in svc["profiles"] and "keeper" in names_on_network("keeper-pg", svc)
        assert ("./config/keeper.toml", "/etc/keeper/keeper.toml") in binds(svc)
        pg_env = _env(pg)
        url = svc["environment"]["KEEPER_DATABASE__URL"]
        assert "s3cr3t" not in url
        shell = {"POSTGRES_PASSWORD": "s3cr3t"}
        config = tmp_path / "keeper.toml"
        config.write_text((ROOT / "config" / "keeper.example.toml").read_text())
        cfg = load_config(config, {"KEEPER_DATABASE__URL": _interpolate(url, shell)})
        expected = (
            f"postgresql://{pg_env['POSTGRES_USER']}:s3cr3t@postgres:5432/{pg_env['POSTGRES_DB']}"
        )
        assert cfg.database.url == expected
        assert "s3cr3t" not in cfg.database.shown and "postgres:5432" in cfg.database.shown
        with pytest.raises(KeyError):  # unset in the shell: compose refuses to start
            _interpolate(url, {})
