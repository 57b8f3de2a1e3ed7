"""An attempt's own way to the gateway, in place of the shared one its sandbox would get.

Why: on the shared socket a connection belongs to nobody until its token is read, so one
attempt's agent could hold the gateway's ceiling for everyone (issue 35). ``Gateway.open_channel``
gives each attempt a socket of its own; this picks the kind the run's shared target has (a Unix
socket on this machine, a TCP port for workers on other nodes) and hands the attempt's
connection limit to the sandbox's forwarder, which then refuses past it itself.
"""

from __future__ import annotations

from assay.models.gateway.service import Gateway
from assay.sandbox import ProxyTarget


def attempt_channel(gateway: Gateway, token: str, shared: ProxyTarget) -> ProxyTarget:
    """The attempt's ``ProxyTarget``: its channel, the same port inside the sandbox."""
    cap = gateway.connections_per_attempt
    if shared.tcp is not None:
        return ProxyTarget(tcp=gateway.open_tcp_channel(token), port=shared.port,
                           name=shared.name, max_connections=cap)
    return ProxyTarget(unix_socket=gateway.open_channel(token), port=shared.port,
                       name=shared.name, max_connections=cap)
