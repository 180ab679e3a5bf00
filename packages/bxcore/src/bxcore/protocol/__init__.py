"""The messages each socket carries, one module per socket. Frame kinds are listed per socket so
a decoder refuses a kind that socket never speaks."""
