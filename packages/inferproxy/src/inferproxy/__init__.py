"""inferproxy: lets loopd, which has no network, reach the llama-server router.

One Unix socket in, one fixed upstream out, bytes forwarded both ways; nothing is logged but
connection counts and errors.
"""

from .proxy import Proxy, Upstream

__all__ = ["Proxy", "Upstream"]
