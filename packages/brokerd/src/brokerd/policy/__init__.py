"""brokerd's policy: grants in, Decisions out. The only place a Decision is made."""

from ._decision import Decision, NotAuthorized

__all__ = ["Decision", "NotAuthorized"]
