"""loopd's inference client: streaming chat completions through inferproxy."""
