"""``bxctl verify-device``: the inference contract measured against the owner's router."""
