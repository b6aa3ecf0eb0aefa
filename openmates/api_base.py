"""Which model-server URLs (``api_base``) an instance may point the gateway at.

An instance's owner need not be the server's operator, yet every ``api_base`` of its tier
map is a URL the server itself requests (LLM calls, the health probe): a server-side
request forgery if it names the cloud's metadata service or another address that only
the server can reach. :func:`api_base_refusal` refuses, by ``ipaddress`` category:

- link-local addresses (``169.254.0.0/16``, ``fe80::/10``), where clouds serve instance
  metadata and credentials, also inside IPv6 forms that carry an IPv4 address
  (IPv4-mapped, 6to4, Teredo);
- the metadata services that sit elsewhere (AWS's IPv6 ``fd00:ec2::254``, Alibaba's
  ``100.100.100.200``, Oracle's ``192.0.0.192``) and their host names
  (``metadata.google.internal`` …);
- unspecified (``0.0.0.0``, ``::``), multicast, broadcast and reserved addresses;
- IPv4 written other than as a dotted quad (``2852039166``, ``0xa9.0xfe.0xa9.0xfe``),
  which resolvers read as an address but the categories above would not see;
- host names that resolve to any of these, and hosts that are no valid host name (a
  space, ``%``: parsers may read such a URL differently).

Loopback and private addresses stay allowed (a self-hoster's local Ollama or vLLM)
unless ``settings.LLM_API_BASE_PRIVATE_ALLOWED`` is off. The settings' own default tiers
(``LLM_<TIER>_API_BASE``) are the operator's and are not checked.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services outside the link-local ranges.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address) for address in ("fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)
# Host names of metadata services (compared without a trailing dot, lower case).
METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
    }
)


# A host name as resolvers take it: dot-separated labels of letters, digits, "-" and "_"
# (internal names use it), or an IP address; anything else (a space, "%", "\\") is a URL
# parsers may read differently from each other.
_HOST_NAME = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,62})(?:\.[a-z0-9_](?:[a-z0-9_-]{0,62}))*")


def _ascii_host(host: str) -> str:
    """``host`` in ASCII (an internationalised name in its IDNA "xn--" form), or "" when
    it has none."""
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return ""


def _refused_kind(address: IPAddress) -> str | None:
    """The kind of address that makes ``address`` refused (``"a link-local address"``),
    or ``None`` when it may be requested."""
    if isinstance(address, ipaddress.IPv6Address):
        # IPv6 forms that carry an IPv4 address a host or relay may end up reaching:
        # IPv4-mapped (::ffff:a.b.c.d), 6to4 (2002:aabb:ccdd::) and Teredo's client.
        teredo = address.teredo
        for embedded in (address.ipv4_mapped, address.sixtofour, teredo[1] if teredo else None):
            if embedded is not None and (kind := _refused_kind(embedded)) is not None:
                return kind
        if address.ipv4_mapped is not None:
            return None
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_multicast:
        return "a multicast address"
    # IPv6's reserved ::/8 holds the loopback ::1.
    if address.is_reserved and not address.is_loopback:
        return "a reserved or broadcast address"
    if not address.is_global and not settings.LLM_API_BASE_PRIVATE_ALLOWED:
        return "a loopback or private address (LLM_API_BASE_PRIVATE_ALLOWED is off)"
    return None


def _host_address(host: str) -> IPAddress | None:
    """``host`` as an IP address when it is one (IPv6 without a zone), else ``None``.

    Raises:
        ValueError: ``host`` is IPv4 in a form other than the dotted quad, or IPv6 with a
            zone index.
    """
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if "%" in host:
        raise ValueError("an IPv6 address with a zone index is refused")
    try:
        socket.inet_aton(host)
    except OSError:
        return None
    raise ValueError("write an IPv4 address as four decimal numbers (a.b.c.d)")


def _resolved(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to; none when it does not resolve (yet): a local
    server's name may be unknown while it is down, and an unknown name reaches nothing."""
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    addresses: list[IPAddress] = []
    for info in infos:
        try:
            addresses.append(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]))
        except ValueError:
            continue
    return addresses


def api_base_refusal(url: str, *, resolve: bool = True) -> str | None:
    """Why the gateway may not call ``url``, as a sentence fragment, or ``None`` if it may.

    ``url`` must be ``http(s)://host[:port]/…``; with ``resolve`` a host name is looked up
    (blocking, ``socket.getaddrinfo``) and refused when any of its addresses is; without
    it only the host as written is judged (what the gateway does per call).
    """
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return "it is not a valid URL"
    if parts.scheme not in ("http", "https"):
        return "it must be an http(s) URL"
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        return "it names no host"
    if host in METADATA_HOSTS:
        return f"{host} is a cloud metadata host"
    if ":" not in host and not _HOST_NAME.fullmatch(_ascii_host(host)):
        return "its host is not a valid host name or address"
    try:
        address = _host_address(host)
    except ValueError as exc:
        return str(exc)
    if address is not None:
        kind = _refused_kind(address)
        return f"{address} is {kind}" if kind else None
    if not resolve:
        return None
    for resolved in _resolved(host, port):
        kind = _refused_kind(resolved)
        if kind is not None:
            return f"{host} resolves to {resolved}, {kind}"
    return None
