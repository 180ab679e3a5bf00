"""brokerd's policy: grants in, Decisions out. The only place a Decision is made.

``decide`` is pure and takes the call's arguments parsed (``CallArguments``, parsed once per
call); ``settle`` turns an answered ``ask`` into its outcome; ``parse_grant`` reads
one grant file's text (the loading shell is ``brokerd.grantstore``).
"""

from ..errors import NotAuthorized
from ._decide import (
    CLOCK_GRANT,
    MEMORY_GRANT,
    MEMORY_TOOLS,
    NOT_AN_OBJECT,
    CallArguments,
    decide,
    path_arguments,
    path_roots,
)
from ._decision import Decision, settle
from .grants import Grant, parse_grant

__all__ = [
    "CLOCK_GRANT", "MEMORY_GRANT", "MEMORY_TOOLS", "NOT_AN_OBJECT", "CallArguments", "Decision",
    "Grant", "NotAuthorized", "decide", "parse_grant", "path_arguments", "path_roots",
    "settle",
]
