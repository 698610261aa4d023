"""A real Apache httpd over HTTPS in front of a simulated BMC, set up the way that ends TLS badly.

`ApacheFront(upstream, tls, workdir)` writes a configuration into `workdir` and runs `apache2 -X`
on it (one foreground process, nothing outside `workdir`) on a free port of 127.0.0.1, with the
test CA's server certificate, proxying `/redfish/` to the upstream. Every reply is set up as an
old BMC front end or a site's Apache sends it:

- `ssl-unclean-shutdown` (mod_ssl): the TLS connection ends without close_notify;
- `force-response-1.0`, `downgrade-1.0` and `nokeepalive`: HTTP/1.0 replies, one per connection;
- mod_deflate with `force-gzip`: JSON bodies gzip'd on the fly, so their length is not known when
  the head is sent; HTTP/1.0 has no chunked coding, so the body is framed by the connection's end.

`apache_or_skip()` names the Debian package when Apache is missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from types import TracebackType

import pytest

from bench.ports import free_port as _free_port
from bmcsim import TlsFiles
from tests.plugins.redfish.wire.front_process import stop_process, wait_until_listening

_APACHE = "/usr/sbin/apache2"
_MODULES = Path("/usr/lib/apache2/modules")


def apache_or_skip() -> str:
    """The apache2 binary, or a skip that says what to install."""
    binary = shutil.which("apache2") or (_APACHE if Path(_APACHE).exists() else None)
    if binary is None or not (_MODULES / "mod_ssl.so").exists():
        pytest.skip("Apache httpd not installed (Debian: apt-get install apache2)")
    return binary


class ApacheFront:
    """Apache proxying `https://127.0.0.1:<port>/redfish/...` to `upstream` (`https://host:port`).

    Attributes:
        url: the front's origin, `https://127.0.0.1:<port>`.
        access_log: one line per request: `"<request line>" <status> <Content-Encoding or ->`.
    """

    def __init__(self, upstream: str, tls: TlsFiles, workdir: Path) -> None:
        self._binary = apache_or_skip()
        self._dir = workdir
        self.port = _free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.access_log = workdir / "access.log"
        self._error_log = workdir / "error.log"
        self._conf = workdir / "httpd.conf"
        modules = {
            "mpm_event": "mod_mpm_event.so",
            "authz_core": "mod_authz_core.so",
            "ssl": "mod_ssl.so",
            "setenvif": "mod_setenvif.so",
            "env": "mod_env.so",
            "filter": "mod_filter.so",
            "deflate": "mod_deflate.so",
            "proxy": "mod_proxy.so",
            "proxy_http": "mod_proxy_http.so",
        }
        load = "\n".join(f"LoadModule {name}_module {_MODULES / so}" for name, so in modules.items())
        # the upstream's certificate is not checked (the client's TLS to Apache is what the tests
        # are about); as root, Apache insists on a user to switch to
        self._conf.write_text(
            f"""ServerRoot {workdir}
ServerName 127.0.0.1
{load}
User daemon
Group daemon
PidFile {workdir / "httpd.pid"}
DefaultRuntimeDir {workdir}
Mutex file:{workdir} default
Listen 127.0.0.1:{self.port}
ErrorLog {self._error_log}
LogLevel warn
LogFormat "\\"%r\\" %>s %{{Content-Encoding}}o" front
CustomLog {self.access_log} front
SSLEngine on
SSLProtocol -all +TLSv1.2 +TLSv1.3
SSLCertificateFile {tls.cert}
SSLCertificateKeyFile {tls.key}
SetEnvIf Request_URI . ssl-unclean-shutdown force-response-1.0 downgrade-1.0 nokeepalive
SetEnv force-gzip 1
AddOutputFilterByType DEFLATE application/json
SSLProxyEngine on
SSLProxyVerify none
SSLProxyCheckPeerName off
SSLProxyCheckPeerCN off
ProxyPass /redfish/ {upstream}/redfish/ flushpackets=on
ProxyPassReverse /redfish/ {upstream}/redfish/
ProxyPreserveHost on
"""
        )
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ApacheFront:
        self._process = subprocess.Popen(
            [self._binary, "-X", "-d", str(self._dir), "-f", str(self._conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        wait_until_listening(self._process, self.port, self._error_log, "apache2")
        return self

    def stop(self) -> None:
        if self._process is not None:
            stop_process(self._process)
            self._process = None

    def requests(self) -> list[str]:
        """`"<request line>" <status> <content coding>` for each request Apache logged so far."""
        if not self.access_log.exists():
            return []
        return self.access_log.read_text().splitlines()

    def __enter__(self) -> ApacheFront:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
