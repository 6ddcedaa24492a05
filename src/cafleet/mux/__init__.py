"""Terminal multiplexers (tmux, herdr) behind one small protocol."""


def first_line(text: str) -> str:
    """The first non-blank line of a tool's stderr, cut short for a one-line error."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line[:200]
