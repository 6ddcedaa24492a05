"""Terminal multiplexers (tmux, herdr) behind one small protocol."""
