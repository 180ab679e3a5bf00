"""toolkit: the programs that run inside tool sandboxes, one call per process.

Stdlib only and importing nothing of the project: it is copied into the toolkit image and
bind-mounted into bubblewrap sandboxes, where only the Python standard library exists.

    bx-tool <name> [--class C] [--root DIR]... [--cap BYTES] [--proxy-socket PATH]
            [--settings JSON] [ARGS]
    bx-tool schemas [--out FILE]

A call prints exactly one JSON object on stdout and nothing else: on success
``{"class", "content", "truncated", "untrusted"}`` with exit status 0, on failure
``{"error", "kind"}`` with exit status 1 (the tool failed), 2 (bad usage or arguments) or
3 (out of memory). The tool table is ``toolkit.table.TOOLS``.
"""
