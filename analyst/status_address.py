"""Where ``analyst status --serve [ADDRESS]`` listens, and who can then read the page.

Loopback by default (:data:`DEFAULT_ADDRESS`): only accounts on the analyst's host read it, and
an operator elsewhere reaches it through an SSH tunnel. Any other address is the operator's
explicit choice and :func:`exposure_warning` says what it exposes: the page has no password and
no TLS, and it shows every site's results.
"""

from __future__ import annotations

from dataclasses import dataclass

from noisyanchor.common.errors import InvalidInputError

#: The page's default port; 8642 is no well-known service's.
DEFAULT_PORT = 8642

#: The page's default address: loopback only.
DEFAULT_ADDRESS = f"127.0.0.1:{DEFAULT_PORT}"


@dataclass(frozen=True)
class Address:
    """A ``host:port`` to listen on; ``loopback`` when only this host can connect to it."""

    host: str
    port: int
    loopback: bool

    @property
    def url_host(self) -> str:
        """``host`` as a URL writes it (an IPv6 literal in brackets)."""
        return f"[{self.host}]" if ":" in self.host else self.host


def parse_address(text: str) -> Address:
    """``host:port`` or ``[ipv6]:port`` (port 0: any free port) as an :class:`Address`.

    The host is an IP literal or ``localhost``; a name that resolves elsewhere would make
    whether the page is exposed depend on the resolver, so it is refused.
    """
    import ipaddress

    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise InvalidInputError(f"--serve {text!r}: expected host:port, such as "
                                f"{DEFAULT_ADDRESS}")
    bracketed = host.startswith("[") and host.endswith("]")
    if ":" in host and not bracketed:
        raise InvalidInputError(f"--serve {text!r}: an IPv6 address goes in brackets, "
                                "such as [::1]:8642")
    host = host[1:-1] if bracketed else host
    if host == "localhost":
        return Address("127.0.0.1", int(port), True)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise InvalidInputError(f"--serve {text!r}: the host must be an IP address or "
                                "localhost (an IPv6 address in brackets: [::1]:8642)") from None
    return Address(str(ip), int(port), ip.is_loopback)


def exposure_warning(address: Address, port: int) -> str | None:
    """What listening on ``address`` (bound to ``port``) exposes; None on loopback."""
    if address.loopback:
        return None
    where = ("every network this host is on" if address.host in ("0.0.0.0", "::")
             else f"the network of {address.host}")
    return (f"warning: the status page listens on {address.url_host}:{port}: anyone who can "
            f"reach that port from {where} reads the federation's progress, every site's "
            "metrics, gain and contributions, withdrawal reasons and the privacy budget, "
            "without a password and without TLS. To read it from elsewhere, keep the default "
            f"address and tunnel: ssh -L {DEFAULT_PORT}:127.0.0.1:{DEFAULT_PORT} "
            "you@analyst-host")
