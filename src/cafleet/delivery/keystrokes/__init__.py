"""Typing into a member's pane and submitting it: the preview and its sanitiser, the
pane-input lock, reading a pane's screen, the submission, the send path's drain, and the
dialog a blocked member shows with its answer (docs/delivery.md)."""
