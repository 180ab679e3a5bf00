"""memoryd: keeps the memory files and their index, syncs finished turns to Honcho, and runs
every memory tool call brokerd has decided. See docs/memory.md."""
